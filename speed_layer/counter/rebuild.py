"""Rebuild the speed layer's state and read keys after Redis lost them (flushed, restarted without
persistence): every archived record of the Parquet log, then every record the broker holds past the
archive (the archiver writes a partition's records a flush interval after the counter counted
them), is counted by the counter itself, partition state and offsets committed, so the counter
resumes right after the broker's end at the time of the rebuild.

Run it with the counter stopped; it claims the partitions (raising their owner generations), so a
counter still running would be fenced out rather than corrupt the rebuilt counts."""

from __future__ import annotations

import heapq
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pyarrow.dataset as ds
import redis.asyncio as aioredis

from counting import keys
from counting.event import Event
from counting.logschema import EVENT_COLUMNS
from counting.offsets import end_reader, read_ends
from counting.settings import Settings
from counting.wire import encode_events
from speed_layer.counter.handoff import announce
from speed_layer.counter.state_counter import StateCounter
from speed_layer.deadletter import DeadLetter
from speed_layer.errors import PoisonRecord, RebuildRefused
from speed_layer.records import Record, decode_record
from speed_layer.state.partition_store import committed_partitions

RECORDS_PER_WRITE = 2_000
BROKER_TIMEOUT_S = 10.0  # the longest wait for the broker's answer, or its next record in the tail

Ordered = list[tuple[int, Record]]  # a partition's records in offset order, each with its ingest time


@dataclass(frozen=True)
class RebuildReport:
    """What a rebuild replayed: records, events, partitions and the last offset of each."""

    records: int
    from_broker: int  # of `records`, those read from the broker past the archive
    undecodable: int  # of `records`, those skipped (the counter dead-lettered them when they came)
    events: int
    last_offsets: dict[int, int]
    seconds: float


def in_ingestion_order(partitions: dict[int, Ordered]) -> list[Record]:
    """The records of every partition merged by the records' ingest time, each partition kept in
    offset order (events of one record in the order they were written).

    Ingestion order matters across partitions: when a hot video's shard count grows, a viewer's
    events move to another partition, and which view of a window counts (the first ingested) and
    in which bucket a viewer is first seen depend on the order the two partitions are replayed."""
    merged = heapq.merge(*partitions.values(), key=lambda item: (item[0], item[1].partition))
    return [record for _, record in merged]


def archived(settings: Settings) -> dict[int, Ordered]:
    """The archived records of the events topic, by partition."""
    if not settings.own_log_dir.exists() or not any(settings.own_log_dir.rglob("*.parquet")):
        return {}
    columns = [*EVENT_COLUMNS, "kafka_partition", "kafka_offset"]
    table = ds.dataset(settings.own_log_dir, format="parquet", partitioning="hive").to_table(columns=columns)
    grouped: dict[tuple[int, int], list[Event]] = {}
    for row in table.to_pylist():
        fields = {k: v for k, v in row.items() if k in EVENT_COLUMNS and v is not None}
        grouped.setdefault((row["kafka_partition"], row["kafka_offset"]), []).append(Event(**fields))
    partitions: dict[int, Ordered] = {}
    for (partition, offset), events in sorted(grouped.items()):
        ingest_ts = min(e.ingest_ts or 0 for e in events)
        record = Record(settings.events_topic, partition, offset, encode_events(events))
        partitions.setdefault(partition, []).append((ingest_ts, record))
    return partitions


def broker_tail(settings: Settings, after: dict[int, int]) -> dict[int, Ordered]:
    """The records the broker holds past `after` (each partition's last archived offset; -1 for
    none), up to each partition's end as the broker reports it now. A topic the broker does not
    have has no records past the archive. Refused, naming what to do, when the broker cannot be
    reached or no longer holds a record the archive lacks (its retention deleted it)."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    topic, bootstrap = settings.events_topic, settings.kafka_bootstrap
    consumer = end_reader(bootstrap, f"tally-rebuild-{topic}")
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=BROKER_TIMEOUT_S)
            known = metadata.topics.get(topic)
            if known is None or known.error is not None:
                return {}
            ends = read_ends(consumer, topic, known.partitions, BROKER_TIMEOUT_S)
            starts = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), BROKER_TIMEOUT_S, False)[0]
                for p in ends
            }
        except KafkaException as exc:
            raise RebuildRefused(
                f"the broker at {bootstrap} did not answer ({exc}): the records the archiver has not "
                "written yet are read from it. Start the broker (or set TALLY_KAFKA_BOOTSTRAP to the "
                "one the counter reads) and run 'tally speed rebuild' again; nothing was written"
            ) from None
        wanted = {p: after.get(p, -1) + 1 for p, end in ends.items() if end > after.get(p, -1) + 1}
        lost = {p: (first, starts[p]) for p, first in wanted.items() if starts[p] > first}
        if lost:
            gaps = ", ".join(f"partition {p} offsets {a}-{b - 1}" for p, (a, b) in sorted(lost.items()))
            raise RebuildRefused(
                f"records neither archived nor on the broker at {bootstrap} ({gaps}: its retention "
                "deleted them before the archiver wrote them); their counts come back only with the "
                "next batch run. Nothing was written"
            )
        tail: dict[int, Ordered] = {p: [] for p in wanted}
        if not wanted:
            return tail
        consumer.assign([TopicPartition(topic, p, first) for p, first in wanted.items()])
        reading = set(wanted)
        while reading:
            message = consumer.poll(BROKER_TIMEOUT_S)
            if message is None:
                short = {p: ends[p] for p in reading}
                raise RebuildRefused(
                    f"the broker at {bootstrap} sent nothing for {BROKER_TIMEOUT_S:.0f} s before "
                    f"the end offsets {short}: run 'tally speed rebuild' again once it answers"
                )
            partition, offset, error = message.partition(), message.offset(), message.error()
            if partition not in reading or offset is None:
                continue
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise RebuildRefused(f"the broker at {bootstrap} answered {error} on partition {partition}")
            if error is None and offset < ends[partition]:
                record = Record(topic, partition, offset, message.value(), message.key())
                tail[partition].append((_ingest_ts(record), record))
            if error is not None or offset + 1 >= ends[partition]:
                reading.discard(partition)
        return tail
    finally:
        consumer.close()


def _ingest_ts(record: Record) -> int:
    """A record's ingest time for the merge; an undecodable one (the counter dead-letters it)
    sorts first."""
    try:
        return min(e.ingest_ts or 0 for e in decode_record(record.value))
    except PoisonRecord:
        return 0


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
    on_progress: Callable[[int, int], None] | None = None,
    replace: bool = False,
) -> RebuildReport:
    """Replay the whole archived log, then the broker's records past it, through the counter (the
    viewer sets and window markers need every event, not only those after the cutoff, for the counts
    after it to be exact). `on_progress(done, total)` after each write, in records. `replace` first
    deletes the speed layer's keys (`is_speed_key`): for a state partly lost, or counts an earlier
    layout wrote."""
    started = time.monotonic()
    committed = (
        []
        if replace
        else await committed_partitions(client, settings.events_topic, settings.topic_partitions)
    )
    if committed:
        raise RebuildRefused(
            f"Redis at {settings.redis_url} holds a committed counter state of partitions {committed}: "
            "a replay would skip every record that state covers, and counts a counter wrote after a "
            "loss would stay short. Stop the counter and run 'tally speed rebuild --replace' (it "
            "deletes the speed layer's keys first; the ingest API's reactions and rate limits and the "
            "archiver's positions stay)"
        )
    if not replace and await client.scard(keys.videos_index()):  # counts, and no state: see above
        raise RebuildRefused(
            f"Redis at {settings.redis_url} holds speed counts that no partition of the counter "
            "committed (written by an earlier layout, or its state was partly lost): a replay "
            "would add to them. Run 'tally speed rebuild --replace' to delete the speed layer's keys "
            "first (the ingest API's reactions and rate limits and the archiver's positions stay)"
        )
    partitions = archived(settings)
    tail = broker_tail(settings, {p: ordered[-1][1].offset for p, ordered in partitions.items()})
    for partition, ordered in tail.items():
        partitions.setdefault(partition, []).extend(ordered)
    records = in_ingestion_order(partitions)
    if replace:
        await delete_speed_keys(client)
    letters: list[DeadLetter] = []  # records of the broker the counter dead-lettered when they came

    events, done = 0, 0
    counter = StateCounter(settings, client, _keep_in(letters), rebuilding=True)
    await counter.claim(settings.events_topic, list(range(settings.topic_partitions)))
    for chunk in partition_runs(records, RECORDS_PER_WRITE):
        events += (await counter.handle(chunk)).events
        done += len(chunk)
        if on_progress is not None:
            on_progress(done, len(records))
    await counter.handle([])  # what the last records changed without a record of their own
    await announce(client, counter.plans())  # the hot videos' plans, as the log shows them
    return _report(records, sum(map(len, tail.values())), len(letters), events, started)


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


def _keep_in(letters: list[DeadLetter]) -> Callable[[DeadLetter], Awaitable[None]]:
    async def keep(letter: DeadLetter) -> None:
        letters.append(letter)

    return keep


def _report(
    records: list[Record], from_broker: int, undecodable: int, events: int, started: float
) -> RebuildReport:
    last: dict[int, int] = {}
    for record in records:
        last[record.partition] = max(last.get(record.partition, -1), record.offset)
    seconds = round(time.monotonic() - started, 3)
    return RebuildReport(len(records), from_broker, undecodable, events, last, seconds)
