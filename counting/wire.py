"""The broker record format: events bound for one partition packed into one msgpack record."""

from __future__ import annotations

import zlib

import msgspec

from counting.errors import InvalidEvent
from counting.event import Event, check_video_id

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[Event])


def encode_events(events: list[Event]) -> bytes:
    """Pack stamped events into one record value."""
    return _encoder.encode(events)


def decode_events(value: bytes) -> list[Event]:
    """Unpack a record value; raises msgspec.DecodeError or ValidationError on a malformed record
    (a video id outside the pattern included)."""
    events = _decoder.decode(value)
    for index, event in enumerate(events):
        try:
            check_video_id(event.video_id)
        except InvalidEvent as exc:
            raise msgspec.ValidationError(f"{exc.reason} - at `$[{index}].video_id`") from None
    return events


def record_key(video_id: str, shard: int = 0) -> bytes:
    """The partitioning key: the video, or `video_id#k` for a shard of a hot video."""
    return (video_id if shard == 0 else f"{video_id}#{shard}").encode()


def partition_for(key: bytes, partitions: int) -> int:
    """The partition of a key: crc32 modulo the partition count (the same everywhere)."""
    return zlib.crc32(key) % partitions
