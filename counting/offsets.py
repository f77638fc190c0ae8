"""A partition's end offset as the broker really has it (every reader of end offsets uses this)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka import Consumer


def end_reader(bootstrap: str, group: str) -> Consumer:
    """A consumer for `read_ends` (it needs the broker to signal a partition's end)."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # librdkafka's own lines on stderr stop at errors (3): a broker away is a line every
            # reconnect; the callers raise what it answered instead.
            "log_level": 2,
        }
    )


def read_ends(consumer: Consumer, topic: str, partitions: Iterable[int], timeout_s: float) -> dict[int, int]:
    """The end offset of each partition (the offset its next record will get). The high watermarks
    are checked by reading from each one's last record to the end the broker signals: the local
    Tansu broker reports a write of several records as ending after the first of them (5 records
    written at once at offsets 0-4 report an end of 1), which would let the archiver watermark pass
    records not yet archived. On Kafka the read finds each end at once. A partition the broker
    says nothing more of within `timeout_s` keeps its reported end."""
    from confluent_kafka import KafkaError, TopicPartition

    ends: dict[int, int] = {}
    for partition in partitions:
        ends[partition] = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout_s, cached=False
        )[1]
    open_ = {p for p, high in ends.items() if high > 0}
    if not open_:
        return ends
    consumer.assign([TopicPartition(topic, p, ends[p] - 1) for p in sorted(open_)])
    deadline = time.monotonic() + timeout_s
    while open_ and time.monotonic() < deadline:
        record = consumer.poll(max(0.0, deadline - time.monotonic()))
        if record is None:
            break
        which, offset, error = record.partition(), record.offset(), record.error()
        if which is None or which not in open_ or offset is None:
            continue
        if error is None:
            ends[which] = max(ends[which], offset + 1)
        elif error.code() == KafkaError._PARTITION_EOF:
            ends[which] = max(ends[which], offset)
            open_.discard(which)
    consumer.unassign()
    return ends
