"""The counter's batch handler: decode, dead-letter the poison, plan, write to Redis (retrying until
Redis answers), independent of Faust so tests can drive it directly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from counting.settings import Settings
from speed_layer import logs
from speed_layer.counter import PartitionPlan, plan_batch
from speed_layer.deadletter import DeadLetter, dead_letter_of
from speed_layer.records import Record
from speed_layer.redis_writer import RedisWriter, WriteResult
from speed_layer.windows import ViewWindows

SendDeadLetter = Callable[[DeadLetter], Awaitable[None]]
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did."""

    records: int
    events: int
    dead_letters: int
    results: list[WriteResult]

    @property
    def applied(self) -> int:
        return sum(r.applied for r in self.results)

    @property
    def duplicates(self) -> int:
        return sum(r.duplicates for r in self.results)

    @property
    def skipped(self) -> int:
        return sum(r.skipped for r in self.results)


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

    async def handle(self, records: list[Record]) -> BatchReport:
        """Count a micro-batch exactly once; return when Redis has it (dead letters are sent first,
        so a record is never skipped before it reached the dead-letter topic)."""
        plan = plan_batch(records, self._settings, self.windows, int(self._clock() * 1000))
        for record, error in plan.dead_letters:
            await self._send_dead_letter(dead_letter_of(record, error, "counter"))
            logs.warning(
                "dead_letter",
                worker="counter",
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                reason=error.reason,
            )
        results = await self._write(plan.writes)
        report = BatchReport(len(records), plan.events, len(plan.dead_letters), results)
        logs.info(
            "counter_batch",
            records=report.records,
            events=report.events,
            writes=len(results),
            applied=report.applied,
            duplicates=report.duplicates,
            skipped=report.skipped,
            dead_letters=report.dead_letters,
        )
        return report

    async def _write(self, plans: list[PartitionPlan]) -> list[WriteResult]:
        delay = RETRY_FIRST_S
        while True:
            try:
                return await self._writer.apply(plans)
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
