"""Send generated traffic to the ingest API at a set rate and keep what it acknowledged."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from counting.event import Event, event_from_dict, stamped
from tally.errors import StackError

# Tries of one batch before giving up on an API that answers 5xx or stops answering.
TRIES = 10


class IngestRefused(StackError, RuntimeError):
    """The ingest API could not be reached, or refused what it was sent; the message says what to do.
    A RuntimeError too, as callers that keep sending while a stack stops expect."""


class Item(Protocol):
    """What the traffic generator yields: an event as JSON, its label and when to send it."""

    @property
    def event(self) -> dict[str, Any]: ...

    @property
    def label(self) -> str: ...

    @property
    def send_at_ms(self) -> int: ...


@dataclass
class Sent:
    """What the ingest API acknowledged: the events as stamped, their labels, and what it refused."""

    events: list[Event] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0


def post_traffic(
    items: Iterable[Item],
    ingest_url: str,
    collector_key: str,
    batch_size: int = 200,
    realtime: bool = True,
    on_progress: Callable[[int], None] | None = None,
    timeout: float = 30.0,
) -> Sent:
    """Post items in batches to `POST /v1/events`, pacing by their `send_at_ms` when `realtime`.

    A batch the API did not acknowledge (5xx, network error) is retried with the same event ids,
    so a retry never counts twice. An API that cannot be reached at the first batch, refuses the
    collector key or answers what is not the ingest API raises IngestRefused at once.
    """
    sent = Sent()
    started = time.monotonic()
    pending: list[Item] = []
    headers = {"x-collector-key": collector_key}
    with httpx.Client(base_url=ingest_url, timeout=timeout, headers=headers) as client:

        def flush() -> None:
            body = {"events": [item.event for item in pending]}
            response: httpx.Response | None = None
            for attempt in range(TRIES):
                try:
                    response = client.post("/v1/events", json=body)
                except httpx.ConnectError:
                    if sent.requests == 0:  # never reached: not a passing outage
                        raise IngestRefused(_unreachable(ingest_url)) from None
                    response = None
                except httpx.TransportError:
                    response = None
                if response is not None and response.status_code < 500:
                    break
                time.sleep(min(0.2 * 2**attempt, 5.0))
            else:
                if response is None:
                    raise IngestRefused(f"{_unreachable(ingest_url)} (no answer to {TRIES} tries)")
                raise IngestRefused(
                    f"the ingest API at {ingest_url} answered {response.status_code} to a batch of "
                    f"{len(pending)} events {TRIES} times in a row: see its log"
                )
            answer = _answer(response, ingest_url, len(pending))
            sent.requests += 1
            refused = {e["index"] for e in answer["errors"]}
            sent.refused.extend(answer["errors"])
            ingest_ts = answer["ingest_ts"]
            for index, item in enumerate(pending):
                if index not in refused:
                    event = event_from_dict(item.event, ingest_ts)
                    sent.events.append(stamped(event, ingest_ts))
                    sent.labels.append(item.label)
            if on_progress is not None:
                on_progress(len(pending))
            pending.clear()

        for item in items:
            if realtime:
                delay = item.send_at_ms / 1000 - (time.monotonic() - started)
                if delay > 0:
                    if pending:
                        flush()
                    time.sleep(delay)
            pending.append(item)
            if len(pending) >= batch_size:
                flush()
        if pending:
            flush()
    return sent


def _unreachable(ingest_url: str) -> str:
    return f"cannot reach the ingest API at {ingest_url}: start it with 'tally up'"


def _answer(response: httpx.Response, ingest_url: str, events: int) -> dict[str, Any]:
    """The API's answer to a batch it took (202, or 422 naming the refused events), else IngestRefused."""
    status = response.status_code
    if status == 401:
        raise IngestRefused(
            "the ingest API refused the collector key: set TALLY_COLLECTOR_KEY to the key the API uses"
        )
    if status == 413:
        raise IngestRefused(f"the ingest API refused a batch of {events} events as too large (413)")
    try:
        answer: dict[str, Any] = response.json()
        errors = answer["errors"]
        per_event = all("index" in error for error in errors)
    except (ValueError, KeyError, TypeError):
        per_event = False
    if status in (200, 202, 422) and per_event:
        return answer
    if status == 422:
        raise IngestRefused(
            f"the ingest API refused the whole batch of {events} events: {response.text[:200]}"
        )
    raise IngestRefused(
        f"the ingest API at {ingest_url} answered {status} to POST /v1/events "
        f"({response.text[:200]!r}): check that {ingest_url} is its base URL"
    )
