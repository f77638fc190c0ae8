"""Answer the plain stats read, the API's hottest request, before FastAPI's routing and validation:
the read cache's answer is sent as its JSON text; every other request goes through FastAPI."""

from __future__ import annotations

import re

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from counting.event import VIDEO_ID_PATTERN
from serving_layer.errors import StoreUnavailable
from serving_layer.schemas import unavailable
from serving_layer.stats import StatsReader

STATS_PATH = "/v1/videos/{video_id}/stats"
_PREFIX, _SUFFIX = STATS_PATH.split("{video_id}")
_VIDEO_ID = re.compile(VIDEO_ID_PATTERN.removeprefix("^").removesuffix("$"))  # used with fullmatch


class PlainStats:
    """ASGI middleware: `GET /v1/videos/{id}/stats` with a valid id and no query string gets the
    stats route's answer (the same status, headers and body) without FastAPI's per-request work:
    from the read cache's JSON text, or from one load when the cached answer is too old. A query
    (`user_id`), an invalid id or any other request goes on to FastAPI, which validates it."""

    def __init__(self, app: ASGIApp, reader: StatsReader, route: BaseRoute) -> None:
        self.app = app
        self._reader = reader
        self._route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        video_id = _plain_stats_read(scope)
        if video_id is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = self._route  # what the metrics name the request by
        answer = self._reader.cached(video_id)
        if answer is None:
            try:
                answer = await self._reader.answer(video_id)
            except StoreUnavailable as exc:
                await unavailable(exc)(scope, receive, send)
                return
        headers = [
            (b"content-length", str(len(answer.encoded)).encode()),
            (b"content-type", b"application/json"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer.encoded})


def _plain_stats_read(scope: Scope) -> str | None:
    """The video id of a stats read with a valid id and no query string, else None."""
    if scope["type"] != "http" or scope["method"] != "GET" or scope["query_string"] or scope.get("root_path"):
        return None
    path: str = scope["path"]
    video_id = path[len(_PREFIX) : -len(_SUFFIX)]
    if path.startswith(_PREFIX) and path.endswith(_SUFFIX) and _VIDEO_ID.fullmatch(video_id):
        return video_id
    return None
