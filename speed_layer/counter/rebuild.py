"""Rebuild the speed layer's state and read keys from the Parquet log, after Redis lost them
(flushed, restarted without persistence): every archived record is counted by the counter itself,
partition state and offsets committed, so the counter resumes right after the archive.

Run it with the counter stopped; it claims the partitions (raising their owner generations), so a
counter still running would be fenced out rather than corrupt the rebuilt counts."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow.dataset as ds
import redis.asyncio as aioredis

from counting import keys
from counting.event import Event
from counting.logschema import EVENT_COLUMNS
from counting.settings import Settings
from counting.wire import encode_events
from speed_layer.counter.handoff import announce
from speed_layer.counter.state_counter import StateCounter
from speed_layer.deadletter import DeadLetter
from speed_layer.errors import RebuildRefused
from speed_layer.records import Record
from speed_layer.state.partition_store import counts_without_state

RECORDS_PER_WRITE = 2_000


@dataclass(frozen=True)
class RebuildReport:
    """What a rebuild replayed: records, events, partitions and the last offset of each."""

    records: int
    events: int
    last_offsets: dict[int, int]
    seconds: float


def archived_records(settings: Settings) -> list[Record]:
    """The archived records of the events topic in ingestion order: the partitions merged by the
    records' ingest time, each partition kept in offset order (events of one record in the order
    the archiver wrote them).

    Ingestion order matters across partitions: when a hot video's shard count grows, a viewer's
    events move to another partition, and which view of a window counts (the first ingested) and
    in which bucket a viewer is first seen depend on the order the two partitions are replayed."""
    if not settings.own_log_dir.exists() or not any(settings.own_log_dir.rglob("*.parquet")):
        return []
    columns = [*EVENT_COLUMNS, "kafka_partition", "kafka_offset"]
    table = ds.dataset(settings.own_log_dir, format="parquet", partitioning="hive").to_table(columns=columns)
    grouped: dict[tuple[int, int], list[Event]] = {}
    for row in table.to_pylist():
        fields = {k: v for k, v in row.items() if k in EVENT_COLUMNS and v is not None}
        grouped.setdefault((row["kafka_partition"], row["kafka_offset"]), []).append(Event(**fields))
    partitions: dict[int, list[tuple[int, Record]]] = {}
    for (partition, offset), events in sorted(grouped.items()):
        ingest_ts = min(e.ingest_ts or 0 for e in events)
        record = Record(settings.events_topic, partition, offset, encode_events(events))
        partitions.setdefault(partition, []).append((ingest_ts, record))
    merged = heapq.merge(*partitions.values(), key=lambda item: (item[0], item[1].partition))
    return [record for _, record in merged]


def partition_runs(records: list[Record], limit: int) -> list[list[Record]]:
    """Consecutive records of one partition, at most `limit` a run: each run is one write, so the
    writes follow the records' order across partitions (a plan groups its records by partition)."""
    runs: list[list[Record]] = []
    for record in records:
        if runs and runs[-1][-1].partition == record.partition and len(runs[-1]) < limit:
            runs[-1].append(record)
        else:
            runs.append([record])
    return runs


async def rebuild(
    settings: Settings,
    client: aioredis.Redis,
    on_progress: Callable[[int], None] | None = None,
    replace: bool = False,
) -> RebuildReport:
    """Replay the whole archived log through the counter (the viewer sets and window markers need
    every event, not only those after the cutoff, for the counts after it to be exact). `replace`
    first deletes the speed layer's keys (`is_speed_key`): for a state partly lost, or counts an
    earlier layout wrote."""
    started = time.monotonic()
    if replace:
        await delete_speed_keys(client)
    elif await counts_without_state(client, settings.events_topic, settings.topic_partitions):
        raise RebuildRefused(
            f"Redis at {settings.redis_url} holds speed counts that no partition of the counter "
            "committed (written by an earlier layout, or its state was partly lost): a replay "
            "would add to them. Run 'tally speed rebuild --replace' to delete the speed layer's keys "
            "first (the ingest API's reactions and rate limits and the archiver's positions stay)"
        )
    records = archived_records(settings)
    events = 0
    counter = StateCounter(settings, client, _archived_records_are_decoded, rebuilding=True)
    await counter.claim(settings.events_topic, list(range(settings.topic_partitions)))
    for chunk in partition_runs(records, RECORDS_PER_WRITE):
        events += (await counter.handle(chunk)).events
        if on_progress is not None:
            on_progress(len(chunk))
    await counter.handle([])  # what the last records changed without a record of their own
    await announce(client, counter.plans())  # the hot videos' plans, as the log shows them
    return _report(records, events, started)


# Keys under the prefix that are not the speed layer's: the ingest API's acknowledged reactions and
# rate windows, and the archiver's positions and watermark.
KEPT = (":user-reactions", f"{keys.PREFIX}:rate:", f"{keys.PREFIX}:archiver:")


def is_speed_key(name: str) -> bool:
    return name.startswith(f"{keys.PREFIX}:") and not any(
        name.endswith(k) if k.startswith(":") else name.startswith(k) for k in KEPT
    )


async def delete_speed_keys(client: aioredis.Redis) -> int:
    """Delete the speed layer's keys (what the counters write); returns how many."""
    doomed = [k async for k in client.scan_iter(match=f"{keys.PREFIX}:*", count=1_000)]
    names = [k.decode() if isinstance(k, bytes) else str(k) for k in doomed]
    speed = [n for n in names if is_speed_key(n)]
    for start in range(0, len(speed), 1_000):
        async with client.pipeline(transaction=False) as pipe:  # one DEL a key: many slots on a cluster
            for name in speed[start : start + 1_000]:
                pipe.delete(name)
            await pipe.execute()
    return len(speed)


async def _archived_records_are_decoded(letter: DeadLetter) -> None:
    raise AssertionError(f"an archived record could not be decoded: {letter.headers}")


def _report(records: list[Record], events: int, started: float) -> RebuildReport:
    last: dict[int, int] = {}
    for record in records:
        last[record.partition] = max(last.get(record.partition, -1), record.offset)
    return RebuildReport(len(records), events, last, round(time.monotonic() - started, 3))
