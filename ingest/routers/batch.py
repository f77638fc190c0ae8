"""The collector route: a batch of events from a trusted collector (`X-Collector-Key`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from counting import rules
from counting.event import ParsedBatch, parse_batch
from counting.settings import Settings
from ingest.auth import check_key
from ingest.publisher import now_ms
from ingest.routers.intake import Writer, read_body
from ingest.schemas import ANSWERS, batch_body


def batch_router(settings: Settings, write: Writer) -> APIRouter:
    """`POST /v1/events`, checked against the configured collector key."""
    router = APIRouter()

    @router.post("/v1/events", status_code=202, responses=ANSWERS, openapi_extra=batch_body())
    async def post_events(
        request: Request, x_collector_key: Annotated[str | None, Header()] = None
    ) -> JSONResponse:
        """Accept a batch `{"events": [...]}` from a trusted collector (`X-Collector-Key`); valid
        events are written even when others are refused."""
        check_key(x_collector_key, settings.collector_key, "x-collector-key")
        body = await read_body(request)
        parsed = parse_batch(body, now_ms())
        events, copies = rules.first_copies(parsed.events)
        written, warnings = await write(events)
        content = {
            "accepted": len(written),
            "ingest_ts": written[0].ingest_ts if written else None,
            "errors": parsed.errors,
            "warnings": [*_retry_warnings(parsed, copies), *warnings],
        }
        return JSONResponse(status_code=422 if parsed.errors else 202, content=content)

    return router


def _retry_warnings(parsed: ParsedBatch, copies: list[tuple[int, int]]) -> list[str]:
    """A warning per copy of an event_id left out of the write: the copy and the event kept."""
    return [
        f"events[{parsed.indices[copy]}]: event_id {parsed.events[copy].event_id!r} repeats "
        f"events[{parsed.indices[kept]}]; a retry inside one request is written and counted once"
        for copy, kept in copies
    ]
