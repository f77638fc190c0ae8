"""A consumed broker record (where it came from and its bytes) and how its events are decoded."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from counting.event import Event
from counting.wire import decode_events
from speed_layer.errors import PoisonRecord


@dataclass(frozen=True, slots=True)
class Record:
    """One broker record as a worker consumed it."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    key: bytes | None = None


def decode_record(value: bytes | None) -> list[Event]:
    """The stamped events of a record value; raise PoisonRecord when it cannot be counted as is.

    A record is refused whole (every worker makes the same decision, so the log and the counts agree):
    bytes that are not a msgpack list of events, or any event without `ingest_ts`.
    """
    if value is None:
        raise PoisonRecord("record has no value")
    try:
        events = decode_events(value)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PoisonRecord(f"not a msgpack list of events: {exc}") from None
    for index, event in enumerate(events):
        if event.ingest_ts is None:
            raise PoisonRecord(f"event {index} ({event.event_id!r}) has no ingest_ts")
    return events


def by_partition(records: list[Record]) -> dict[tuple[str, int], list[Record]]:
    """Records grouped by (topic, partition), each group in offset order."""
    groups: dict[tuple[str, int], list[Record]] = {}
    for record in records:
        groups.setdefault((record.topic, record.partition), []).append(record)
    for group in groups.values():
        group.sort(key=lambda r: r.offset)
    return groups
