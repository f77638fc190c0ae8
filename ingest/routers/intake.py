"""What the event routes share: the body read under its size cap, and the write (publish to the
broker, then record the reactions in Redis)."""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass

from fastapi import Request
from redis.exceptions import RedisError

from counting.errors import InvalidEvent
from counting.event import MAX_BODY_BYTES, Event
from ingest.publisher import Publisher
from ingest.reactions import ReactionState


async def read_body(request: Request) -> bytes:
    """The request body, refused once it is larger than `MAX_BODY_BYTES` (declared or sent)."""
    return await read_capped(request.headers.get("content-length"), request.stream())


async def read_capped(declared: str | None, chunks: AsyncIterable[bytes]) -> bytes:
    """A body from its chunks, refused once it is larger than `MAX_BODY_BYTES`: at once when its
    `declared` length (the Content-Length header) says so, else when the chunks pass it."""
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise InvalidEvent("body", f"larger than {MAX_BODY_BYTES} bytes (got {declared})")
    body = bytearray()
    async for chunk in chunks:
        body.extend(chunk)
        if len(body) > MAX_BODY_BYTES:
            raise InvalidEvent("body", f"larger than {MAX_BODY_BYTES} bytes")
    return bytes(body)


@dataclass(frozen=True)
class Writer:
    """Writes events for the routes: to the broker, then to the reaction state."""

    publisher: Publisher
    reactions: ReactionState
    redis_url: str

    async def __call__(self, events: list[Event]) -> tuple[list[Event], list[str]]:
        """Publish (acks=all), then record reactions for `user_liked`; a Redis fault there is a
        warning, never a refusal: the events are already in the log."""
        written = await self.publisher.publish(events)
        try:
            await self.reactions.apply(written)
        except (RedisError, OSError) as exc:
            return written, [
                f"reaction state not updated now (Redis at {self.redis_url}: {exc}); "
                "user_liked follows once the speed layer counts the event"
            ]
        return written, []
