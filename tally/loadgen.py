"""Send generated traffic to the ingest API at a set rate and keep what it acknowledged."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from counting.event import Event, event_from_dict, stamped


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
    so a retry never counts twice.
    """
    sent = Sent()
    started = time.monotonic()
    pending: list[Item] = []
    headers = {"x-collector-key": collector_key}
    with httpx.Client(base_url=ingest_url, timeout=timeout, headers=headers) as client:

        def flush() -> None:
            body = {"events": [item.event for item in pending]}
            for attempt in range(10):
                try:
                    response = client.post("/v1/events", json=body)
                except httpx.TransportError:
                    response = None
                if response is not None and response.status_code in (401, 413):
                    raise RuntimeError(f"the ingest API refused the batch: {response.text}")
                if response is not None and response.status_code < 500:
                    break
                time.sleep(min(0.2 * 2**attempt, 5.0))
            else:
                raise RuntimeError(f"the ingest API at {ingest_url} refused {len(pending)} events 10 times")
            answer = response.json()
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
