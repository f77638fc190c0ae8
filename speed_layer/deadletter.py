"""Dead letters: a record the workers cannot count, sent on unchanged with headers naming the error."""

from __future__ import annotations

from dataclasses import dataclass

from speed_layer.errors import PoisonRecord
from speed_layer.records import Record


@dataclass(frozen=True)
class DeadLetter:
    """The message to produce to the dead-letter topic: the record's key and value as received."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


def dead_letter_of(record: Record, error: PoisonRecord, worker: str) -> DeadLetter:
    """The dead letter of a poison record; headers say what was wrong and where the record was."""
    headers = [
        ("tally-error", error.reason.encode()),
        ("tally-error-type", type(error).__name__.encode()),
        ("tally-source-topic", record.topic.encode()),
        ("tally-source-partition", str(record.partition).encode()),
        ("tally-source-offset", str(record.offset).encode()),
        ("tally-worker", worker.encode()),
    ]
    return DeadLetter(record.key, record.value, headers)
