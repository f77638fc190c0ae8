"""The counter's batch handler: decode, dead-letter the poison, plan, write to Redis (retrying until
Redis answers), independent of Faust so tests can drive it directly.

Planning (CPU in this process) and writing (the script running in Redis) are separate steps, so the
Faust agent can plan the next micro-batch while the previous one is being written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from counting.bots import RulesInUse
from counting.settings import Settings
from speed_layer import logs, metrics
from speed_layer.counter import CounterPlan, PartitionPlan, plan_batch, remember_expiries
from speed_layer.deadletter import DeadLetter, dead_letter_of
from speed_layer.hot import HotVideos
from speed_layer.records import Record
from speed_layer.redis_writer import RedisWriter, WriteResult
from speed_layer.windows import ViewWindows

SendDeadLetter = Callable[[DeadLetter], Awaitable[None]]
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0
WORKER = "counter"
T = TypeVar("T")


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
    plan: CounterPlan
    planned_at: float


class CounterWorker:
    """Turns micro-batches of records into atomic Redis writes; one instance per worker process."""

    def __init__(
        self,
        settings: Settings,
        client: aioredis.Redis,
        send_dead_letter: SendDeadLetter,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._writer = RedisWriter(client)
        self._send_dead_letter = send_dead_letter
        self._clock = clock
        self.windows = ViewWindows()
        self.hot = HotVideos(settings.hot_video_events_per_sec, settings.max_video_shards)
        self.bot_rules = RulesInUse(settings.bot_rules_file)
        self.generations: dict[tuple[str, int], int] = {}
        self._trims: dict[str, int] = {}
        self._expiring: set[str] = set()

    async def claim(self, topic: str, partitions: list[int]) -> None:
        """Take ownership of newly assigned partitions (fences out their previous owner's writes)."""
        if not partitions:
            return
        claimed = await self._retry(lambda: self._writer.claim(topic, partitions))
        self.generations.update(claimed)
        logs.info("partitions_claimed", topic=topic, generations={p: g for (_, p), g in claimed.items()})

    def plan(self, records: list[Record]) -> PlannedBatch:
        """Decode and plan a micro-batch (CPU only)."""
        started = time.perf_counter()
        plan = plan_batch(
            records,
            self._settings,
            self.windows,
            int(self._clock() * 1000),
            hot=self.hot,
            generations=self.generations,
            trims=self._trims,
            expiring=self._expiring,
            bot_filter=self.bot_rules.current(),
        )
        metrics.PLAN_SECONDS.observe(time.perf_counter() - started)
        return PlannedBatch(len(records), plan, started)

    async def write(self, batch: PlannedBatch) -> BatchReport:
        """Store a planned micro-batch; return when Redis has it (dead letters are sent first, so a
        record is never skipped before it reached the dead-letter topic)."""
        plan = batch.plan
        for record, error in plan.dead_letters:
            await self._send_dead_letter(dead_letter_of(record, error, WORKER))
            logs.warning(
                "dead_letter",
                worker=WORKER,
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                reason=error.reason,
            )
        started = time.perf_counter()
        results = await self._write(plan.writes)
        for write, result in zip(plan.writes, results, strict=True):
            if not result.fenced:
                remember_expiries(self._expiring, write, *result.written)
        metrics.FLUSH_SECONDS.labels(WORKER).observe(time.perf_counter() - started)
        report = BatchReport(batch.records, plan.events, len(plan.dead_letters), results, plan.hot)
        self._observe(report, plan)
        logs.info(
            "counter_batch",
            records=report.records,
            events=report.events,
            writes=len(results),
            applied=report.applied,
            duplicates=report.duplicates,
            skipped=report.skipped,
            dead_letters=report.dead_letters,
            fenced=len(report.fenced),
            hot=len(report.hot),
            ms=round((time.perf_counter() - batch.planned_at) * 1000, 1),
        )
        if report.fenced:
            logs.warning("counter_fenced", partitions=sorted(report.fenced))
        return report

    async def handle(self, records: list[Record]) -> BatchReport:
        """Count a micro-batch exactly once: plan it, then write it."""
        return await self.write(self.plan(records))

    def _observe(self, report: BatchReport, plan: CounterPlan) -> None:
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
        for write in plan.writes:
            if (write.topic, write.partition) in report.fenced:
                continue
            for name, n in write.rejected.items():
                metrics.REJECTED.labels(name.removeprefix("rejected:")).inc(n)

    async def _write(self, plans: list[PartitionPlan]) -> list[WriteResult]:
        return await self._retry(lambda: self._writer.apply(plans))

    async def _retry(self, action: Callable[[], Awaitable[T]]) -> T:
        delay = RETRY_FIRST_S
        while True:
            try:
                return await action()
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                logs.error(
                    "redis_unavailable",
                    url=self._settings.redis_url,
                    error=exc,
                    retry_in_s=delay,
                    hint="start it with 'tally up' or set TALLY_REDIS_URL",
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
