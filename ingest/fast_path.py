"""Answer the user routes (`ingest.routes.SINGLE_ROUTES`: a like, a view, ...), the API's hottest
requests, before FastAPI's routing, dependency solving and exception middleware: the same checks
and write (`SingleWrites`), the same answers; every other request goes through FastAPI."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ingest.refusals import REFUSALS, refusal
from ingest.routers.intake import read_capped
from ingest.routers.single import SingleWrites
from ingest.routes import SINGLE_ROUTES

_PREFIX = "/v1/videos/"
# (method, the path's last segment) -> the event type it writes.
_ROUTES: dict[tuple[str, str], str] = {
    (method, path.rsplit("/", 1)[1]): event_type for method, path, event_type in SINGLE_ROUTES
}
assert all(path.startswith(_PREFIX) and path.count("/") == 4 for _, path, _ in SINGLE_ROUTES)
_JSON = msgspec.json.Encoder()


class PlainWrites:
    """ASGI middleware: a request of a user route is answered by `writes` (202, or the refusal's
    status, content and headers as FastAPI's exception handlers give them); any other request
    (another path or method, a path FastAPI would not match, a mounted app's root path) goes on
    to FastAPI."""

    def __init__(self, app: ASGIApp, writes: SingleWrites) -> None:
        self.app = app
        self._writes = writes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = _user_route(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        event_type, video_id = route
        headers = Headers(scope=scope)
        client = scope.get("client")
        extra: dict[str, str] = {}
        try:
            content = await self._writes(
                event_type,
                video_id,
                headers,
                client[0] if client else None,
                lambda: read_capped(headers.get("content-length"), _chunks(receive)),
            )
            status = 202
        except REFUSALS as exc:
            status, content, extra = refusal(exc)
        body = _JSON.encode(content)
        raw = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
        raw += [(name.lower().encode(), value.encode()) for name, value in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})


def _user_route(scope: Scope) -> tuple[str, str] | None:
    """(event type, video id) of a request of a user route, as FastAPI would route it; else None."""
    if scope["type"] != "http" or scope.get("root_path"):
        return None
    path: str = scope["path"]
    if not path.startswith(_PREFIX):
        return None
    video_id, _, last = path[len(_PREFIX) :].partition("/")
    event_type = _ROUTES.get((scope["method"], last))
    if event_type is None or not video_id:
        return None
    return event_type, video_id


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body's chunks as the server hands them over."""
    while True:
        message: Message = await receive()
        if message["type"] != "http.request":  # the client went away
            return
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return
