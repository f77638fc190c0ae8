"""Rebuild the speed layer's Redis state from the Parquet log, after Redis lost it (flushed,
restarted without persistence): every archived record is planned and written exactly as the
counter would, and its offsets are stored, so the counter resumes right after the archive.

Run it with the counter stopped; it claims the partitions (raising their owner generations), so a
counter still running would be fenced out rather than corrupt the rebuilt counts."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow.dataset as ds
import redis.asyncio as aioredis

from counting.event import Event
from counting.logschema import EVENT_COLUMNS
from counting.settings import Settings
from counting.wire import encode_events
from speed_layer.counter import plan_batch
from speed_layer.records import Record
from speed_layer.redis_writer import RedisWriter
from speed_layer.windows import ViewWindows

RECORDS_PER_WRITE = 2_000


@dataclass(frozen=True)
class RebuildReport:
    """What a rebuild replayed: records, events, partitions and the last offset of each."""

    records: int
    events: int
    last_offsets: dict[int, int]
    seconds: float


def archived_records(settings: Settings) -> list[Record]:
    """The archived records of the events topic, in offset order per partition (events of one
    record in the order the archiver wrote them)."""
    if not settings.raw_dir.exists() or not any(settings.raw_dir.rglob("*.parquet")):
        return []
    columns = [*EVENT_COLUMNS, "kafka_partition", "kafka_offset"]
    table = ds.dataset(settings.raw_dir, format="parquet", partitioning="hive").to_table(columns=columns)
    grouped: dict[tuple[int, int], list[Event]] = {}
    for row in table.to_pylist():
        fields = {k: v for k, v in row.items() if k in EVENT_COLUMNS and v is not None}
        grouped.setdefault((row["kafka_partition"], row["kafka_offset"]), []).append(Event(**fields))
    return [
        Record(settings.events_topic, partition, offset, encode_events(events))
        for (partition, offset), events in sorted(grouped.items())
    ]


async def rebuild(
    settings: Settings, client: aioredis.Redis, on_progress: Callable[[int], None] | None = None
) -> RebuildReport:
    """Replay the whole archived log into Redis (the viewer sets and window markers need every
    event, not only those after the cutoff, for the counts after it to be exact)."""
    started = time.monotonic()
    records = archived_records(settings)
    writer = RedisWriter(client)
    partitions = sorted({r.partition for r in records})
    generations = await writer.claim(settings.events_topic, partitions) if partitions else {}
    windows = ViewWindows()
    events = 0
    for start in range(0, len(records), RECORDS_PER_WRITE):
        chunk = records[start : start + RECORDS_PER_WRITE]
        plan = plan_batch(chunk, settings, windows, int(time.time() * 1000), generations=generations)
        await writer.apply(plan.writes)
        events += plan.events
        if on_progress is not None:
            on_progress(len(chunk))
    last: dict[int, int] = {}
    for record in records:
        last[record.partition] = max(last.get(record.partition, -1), record.offset)
    return RebuildReport(len(records), events, last, round(time.monotonic() - started, 3))
