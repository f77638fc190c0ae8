"""Dead letters keep the record as received and name the error and its origin."""

from __future__ import annotations

from speed_layer.deadletter import dead_letter_of
from speed_layer.errors import PoisonRecord
from speed_layer.records import Record


def test_dead_letter_keeps_the_record_and_names_the_error() -> None:
    letter = dead_letter_of(Record("events", 2, 17, b"\xffjunk", b"k"), PoisonRecord("bad bytes"), "counter")
    assert (letter.key, letter.value) == (b"k", b"\xffjunk")
    assert dict(letter.headers) == {
        "tally-error": b"bad bytes",
        "tally-error-type": b"PoisonRecord",
        "tally-source-topic": b"events",
        "tally-source-partition": b"2",
        "tally-source-offset": b"17",
        "tally-worker": b"counter",
    }
