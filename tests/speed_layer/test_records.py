"""Decoding broker records: stamped events pass, anything else is a poison record."""

from __future__ import annotations

import msgspec
import pytest

from counting.event import Event
from counting.wire import encode_events
from speed_layer.errors import PoisonRecord
from speed_layer.records import Record, by_partition, decode_record


def _event(**extra: object) -> Event:
    fields: dict[str, object] = {
        "event_id": "e1",
        "type": "view",
        "video_id": "v",
        "ts": 1,
        "session_id": "s",
    }
    return Event(**{**fields, **extra})  # type: ignore[arg-type]


def test_decodes_stamped_events() -> None:
    events = [_event(ingest_ts=5)]
    assert decode_record(encode_events(events)) == events


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "no value"),
        (b"\x00\x01garbage", "msgpack"),
        (msgspec.msgpack.encode([{"event_id": "e", "type": "nope", "video_id": "v", "ts": 1}]), "msgpack"),
        (encode_events([_event()]), "ingest_ts"),
        (encode_events([_event(ingest_ts=5), _event(ingest_ts=5, video_id="a b")]), r"\$\[1\]\.video_id"),
    ],
)
def test_refuses_poison(value: bytes | None, reason: str) -> None:
    with pytest.raises(PoisonRecord, match=reason):
        decode_record(value)


def test_groups_by_partition_in_offset_order() -> None:
    records = [Record("t", 1, 5, b""), Record("t", 0, 2, b""), Record("t", 1, 4, b"")]
    assert {k: [r.offset for r in g] for k, g in by_partition(records).items()} == {
        ("t", 1): [4, 5],
        ("t", 0): [2],
    }
