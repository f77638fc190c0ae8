"""The counter's stream loop, independent of Faust so tests can drive it: micro-batches planned
(CPU in this process) while the previous one is written (commit and sink in Redis), acked once
stored; what a batch did (`BatchReport`), its metrics and log line, its dead letters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from counting.settings import Settings
from speed_layer import logs, metrics
from speed_layer.counter.state_plan import StatePlan
from speed_layer.deadletter import DeadLetter, dead_letter_of
from speed_layer.records import Record
from speed_layer.retry import until_reachable

if TYPE_CHECKING:
    from speed_layer.counter.state_counter import StateCounter

SendDeadLetter = Callable[[DeadLetter], Awaitable[None]]
WORKER = "counter"
T = TypeVar("T")
M = TypeVar("M")  # a consumed message as the stream hands it over (Faust's event)


@dataclass(frozen=True)
class WriteResult:
    """What one partition's commit did: offsets before and after, events applied / duplicate /
    skipped, and whether it was refused because another worker owns the partition now (nothing
    was written)."""

    topic: str
    partition: int
    offset_before: int
    offset_after: int
    applied: int
    duplicates: int
    skipped: int
    fenced: bool = False


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did."""

    records: int
    events: int
    dead_letters: int
    results: list[WriteResult]
    hot: dict[str, int] = field(default_factory=dict)

    @property
    def applied(self) -> int:
        return sum(r.applied for r in self.results)

    @property
    def duplicates(self) -> int:
        return sum(r.duplicates for r in self.results)

    @property
    def skipped(self) -> int:
        return sum(r.skipped for r in self.results)

    @property
    def fenced(self) -> set[tuple[str, int]]:
        """The partitions whose writes were refused: another worker owns them now."""
        return {(r.topic, r.partition) for r in self.results if r.fenced}


@dataclass(frozen=True)
class PlannedBatch:
    """A planned micro-batch waiting to be written."""

    records: int
    plan: StatePlan
    planned_at: float


async def until_redis(settings: Settings, action: Callable[[], Awaitable[T]]) -> T:
    """`action` once Redis answers (retried while it does not, saying how to start it)."""
    hint = "start it with 'tally up' or set TALLY_REDIS_URL"
    return await until_reachable("redis", action, url=settings.redis_url, hint=hint)


async def send_dead_letters(plan: StatePlan, send: SendDeadLetter) -> None:
    """Send a planned batch's undecodable records to the dead-letter topic (before its write, so a
    record is never skipped before it reached the topic)."""
    for record, error in plan.dead_letters:
        await send(dead_letter_of(record, error, WORKER))
        logs.warning(
            "dead_letter",
            worker=WORKER,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            reason=error.reason,
        )


def observe_batch(report: BatchReport, rejected: dict[str, int], planned_at: float) -> None:
    """A stored batch's metrics (`rejected`: the views rejected by field, of unfenced partitions)
    and its log line."""
    metrics.RECORDS.labels(WORKER).inc(report.records)
    metrics.EVENTS.labels(WORKER).inc(report.events)
    metrics.BATCH_RECORDS.labels(WORKER).observe(report.records)
    metrics.BATCH_EVENTS.labels(WORKER).observe(report.events)
    metrics.OPS.labels("applied").inc(report.applied)
    metrics.OPS.labels("duplicate").inc(report.duplicates)
    metrics.OPS.labels("skipped").inc(report.skipped)
    metrics.DEAD_LETTERS.labels(WORKER).inc(report.dead_letters)
    metrics.FENCED.inc(len(report.fenced))
    metrics.SHARD_RAISES.inc(len(report.hot))
    for name, n in rejected.items():
        metrics.REJECTED.labels(name.removeprefix("rejected:")).inc(n)
    logs.info(
        "counter_batch",
        records=report.records,
        events=report.events,
        writes=len(report.results),
        applied=report.applied,
        duplicates=report.duplicates,
        skipped=report.skipped,
        dead_letters=report.dead_letters,
        fenced=len(report.fenced),
        hot=len(report.hot),
        ms=round((time.perf_counter() - planned_at) * 1000, 1),
    )
    if report.fenced:
        logs.warning("counter_fenced", partitions=sorted(report.fenced))


@dataclass(frozen=True)
class Consumed(Generic[M]):
    """How the counter reaches its stream: each message's record, its ack, and a partition's end
    offset as last fetched (None when unknown)."""

    record_of: Callable[[M], Record]
    ack: Callable[[M], Awaitable[object]]
    end_offset: Callable[[str, int], int | None]


async def count_stream(
    worker: StateCounter,
    batches: AsyncIterator[list[M]],
    consumed: Consumed[M],
    on_failure: Callable[[BaseException], None],
) -> None:
    """Count micro-batches as they come with one write in flight: the next batch is planned while
    Redis runs the previous one, and writes still reach Redis in order (each waits for the one
    before). A batch's messages are acked once it is stored, except those of partitions another
    worker owns now (fenced). A failure calls `on_failure` at once and stops the loop: no later
    batch may be written (its offsets would pass the failed one's)."""
    reported: list[BaseException] = []

    async def write_and_ack(batch: PlannedBatch, messages: list[M], records: list[Record]) -> None:
        try:
            report = await worker.write(batch)
            fenced = report.fenced
            for message, record in zip(messages, records, strict=True):
                if (record.topic, record.partition) not in fenced:
                    await consumed.ack(message)
            _observe_lag(batch, consumed.end_offset)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reported.append(exc)
            on_failure(exc)
            raise

    writing: asyncio.Future[None] | None = None
    try:
        async for messages in batches:
            records = [consumed.record_of(m) for m in messages]
            await worker.prepare(records)
            batch = worker.plan(records)
            if writing is not None:
                await writing
            writing = asyncio.ensure_future(write_and_ack(batch, messages, records))
    except Exception as exc:
        if exc not in reported:
            on_failure(exc)
        raise


def _observe_lag(batch: PlannedBatch, end_offset: Callable[[str, int], int | None]) -> None:
    """Set the lag gauge of the partitions of a stored batch (the broker's end minus what is stored)."""
    for topic, partition, last_offset in batch.plan.positions:
        end = end_offset(topic, partition)
        if end is not None:
            metrics.LAG.labels(WORKER, topic, str(partition)).set(max(0, end - last_offset - 1))
