"""The ingest API's OpenAPI description: request bodies from the event model, answers as models."""

from __future__ import annotations

from typing import Any

import msgspec
from pydantic import BaseModel, Field

from counting.event import SESSION_TYPES, Event


class FieldError(BaseModel):
    """What was refused and why; `index` is the event's place in a batch."""

    field: str
    reason: str
    index: int | None = None


class WriteAnswer(BaseModel):
    """The answer of every write route."""

    accepted: int = Field(description="events written and acknowledged by the broker")
    ingest_ts: int | None = Field(default=None, description="the server's ingestion time of this request")
    event_id: str | None = Field(
        default=None,
        description="single-event routes: the event's id, the server's when the body had none; send it "
        "again to retry without counting twice",
    )
    ts: int | None = Field(
        default=None, description="single-event routes: the event's time, the server's when the body had none"
    )
    errors: list[FieldError] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


def _event_schema(leave_out: set[str], optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    schema = msgspec.json.schema(Event)["$defs"]["Event"]
    properties = {k: v for k, v in schema["properties"].items() if k not in leave_out}
    return {
        "type": "object",
        "properties": properties,
        "required": [f for f in schema.get("required", []) if f not in leave_out | optional],
        "additionalProperties": False,
    }


def batch_body() -> dict[str, Any]:
    events = {"type": "array", "items": _event_schema({"ingest_ts", "region"})}
    schema = {
        "type": "object",
        "properties": {"events": events},
        "required": ["events"],
        "additionalProperties": False,
    }
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


SINGLE_DESCRIPTION = (
    "Write one event for the signed-in user. `type` and `video_id` come from the route, `user_id` from "
    "the token, `ip` and `user_agent` from the connection (X-Forwarded-For counts only from a trusted "
    "proxy): the body must leave them out. `event_id` and `ts` are optional: when absent the server "
    "supplies a fresh id and its own clock, and the answer returns both; a client that retries sends "
    "the answer's (or its own) `event_id` again, and the event counts once."
)


# The parameters each user route reads from the request itself (`ingest.routers.single`), as
# FastAPI would document them declared.
SINGLE_PARAMETERS = [
    {"in": "path", "name": "video_id", "required": True, "schema": {"title": "Video Id", "type": "string"}},
    {
        "in": "header",
        "name": "authorization",
        "required": False,
        "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Authorization"},
    },
]


def single_body(event_type: str) -> dict[str, Any]:
    """What the OpenAPI document says of the route writing `event_type` beyond FastAPI: its
    parameters (`SINGLE_PARAMETERS`) and its body, `session_id` required (and so the body) for the
    session events, `watch_secs` only on a view (`counting.event.check_rules`)."""
    leave_out = {"ingest_ts", "region", "type", "video_id", "user_id", "ip", "user_agent"}
    if event_type != "view":
        leave_out.add("watch_secs")
    schema = _event_schema(leave_out, frozenset({"event_id", "ts"}))
    if event_type in SESSION_TYPES:
        schema["required"] = [*schema["required"], "session_id"]
    required = bool(schema["required"])
    return {
        "parameters": SINGLE_PARAMETERS,
        "requestBody": {"required": required, "content": {"application/json": {"schema": schema}}},
    }


ANSWERS: dict[int | str, dict[str, Any]] = {
    status: {"model": WriteAnswer, "description": text}
    for status, text in {
        202: "accepted and acknowledged by the broker",
        401: "missing or wrong credentials",
        413: "body over the size limit",
        422: "refused events, each naming its field and reason (valid events of a batch are still written)",
        429: "rate limited; see Retry-After",
        503: "the broker did not acknowledge: nothing was acknowledged, retry",
    }.items()
}
