"""The counter with its state in the worker (DESIGN.md, "Speed layer"): each partition's state is
restored on assignment, micro-batches are applied to it in memory by the rules of `counting/`, then
each partition's changes are committed atomically (`partition_store`) and its counts sunk to the
read keys (`sink`). The interface is `CounterWorker`'s, so `count_stream` and the tests drive either.

A worker commits a batch only after the previous one was sunk, so at most the last committed entry
of a partition can lack its counts in the read keys: a restore sinks it again (idempotent).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import redis.asyncio as aioredis

from counting import rules
from counting.bots import RulesInUse
from counting.settings import Settings
from speed_layer import logs, metrics
from speed_layer.counter_worker import (
    WORKER,
    BatchReport,
    PlannedBatch,
    SendDeadLetter,
    observe_batch,
    send_dead_letters,
    until_redis,
)
from speed_layer.errors import PoisonRecord
from speed_layer.hot import HotVideos
from speed_layer.judge import REACTION, judge_view
from speed_layer.partition_store import ALREADY, FENCED, PartitionStore, encode
from speed_layer.plan import CounterPlan
from speed_layer.records import Record, by_partition, decode_record
from speed_layer.redis_writer import WriteResult
from speed_layer.sink import plan_sink, sink
from speed_layer.state import PartitionState
from speed_layer.windows import ViewWindows

T = TypeVar("T")
_encoder = msgspec.msgpack.Encoder()
# A snapshot replaces the changelog once the entries since the last one weigh more than it (and at
# least this much): restore reads at most about twice the state.
MIN_LOG_BYTES = 1 << 20


@dataclass
class _Commit:
    """One partition's part of a planned batch."""

    partition: int
    generation: int
    first_offset: int
    last_offset: int
    entry: dict[str, Any]
    records: int
    events: int
    applied: int
    duplicates: int
    skipped: int
    rejected: dict[str, int]
    snapshot: bytes | None = None
    encoded: bytes = b""
    sketches: bytes = b""


@dataclass
class StatePlan(CounterPlan):
    """A planned micro-batch: each partition's changes to commit."""

    commits: list[_Commit] = field(default_factory=list)

    topic: str = ""

    @property
    def events(self) -> int:
        return sum(c.events for c in self.commits)

    @property
    def positions(self) -> list[tuple[str, int, int]]:
        return [(self.topic, c.partition, c.last_offset) for c in self.commits]


@dataclass
class _Owned:
    state: PartitionState
    generation: int
    log_bytes: int = 0
    snapshot_bytes: int = 0


class StateCounter:
    """Counts micro-batches with partition state in memory; one instance per worker process."""

    def __init__(
        self,
        settings: Settings,
        client: aioredis.Redis,
        send_dead_letter: SendDeadLetter,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._client = client
        self._store = PartitionStore(client, settings.events_topic)
        self._send_dead_letter = send_dead_letter
        self._clock = clock
        self.windows = ViewWindows()
        self.hot = HotVideos(settings.hot_video_events_per_sec, settings.max_video_shards)
        self.bot_rules = RulesInUse(settings.bot_rules_file)
        self.owned: dict[int, _Owned] = {}

    def _part(self, partition: int) -> str:
        return f"{self._settings.events_topic}:{partition}"

    def _new_state(self) -> PartitionState:
        s = self._settings
        return PartitionState(s.bucket_ms, s.retention_ms, s.retry_horizon_ms)

    async def claim(self, topic: str, partitions: list[int]) -> None:
        """Own newly assigned partitions: fence their previous owner, restore their state, and sink
        their last committed entry again (its counts may not have reached the read keys)."""
        if not partitions or topic != self._settings.events_topic:
            return
        generations = await self._retry(lambda: self._store.claim(partitions))
        started = time.perf_counter()
        for partition, generation in generations.items():
            state = self._new_state()
            last = await self._retry(lambda p=partition, s=state: self._store.restore(p, s))  # type: ignore[misc]
            self.owned[partition] = _Owned(state, generation)
            if last is not None:
                plan = plan_sink(last, state, self._part(partition), self._now(), self._settings.retention_ms)
                await self._retry(lambda plan=plan: sink(self._client, plan))  # type: ignore[misc]
        logs.info(
            "partitions_claimed",
            topic=topic,
            generations=generations,
            restore_ms=round((time.perf_counter() - started) * 1000, 1),
        )

    def plan(self, records: list[Record]) -> PlannedBatch:
        """Apply a micro-batch to the partitions' states (CPU only); records of a partition this
        worker does not own are left for its owner."""
        started = time.perf_counter()
        bot_filter = self.bot_rules.current()
        commits: list[_Commit] = []
        dead_letters: list[tuple[Record, PoisonRecord]] = []
        per_video: dict[str, int] = {}
        newest = 0
        for (_, partition), group in by_partition(records).items():
            owned = self.owned.get(partition)
            if owned is None:
                continue
            state = owned.state
            commit = _Commit(
                partition, owned.generation, group[0].offset, state.offset, {}, 0, 0, 0, 0, 0, {}
            )
            for record in group:
                commit.records += 1
                if record.offset <= state.offset:
                    commit.skipped += 1
                    continue
                try:
                    events = decode_record(record.value)
                except PoisonRecord as exc:
                    dead_letters.append((record, exc))
                    events = []
                for event in events:
                    per_video[event.video_id] = per_video.get(event.video_id, 0) + 1
                    self._apply(state, event, bot_filter, commit)
                if events and (events[-1].ingest_ts or 0) > newest:
                    newest = events[-1].ingest_ts or 0
                commit.events += len(events)
                state.offset = record.offset
            commit.last_offset = state.offset
            commit.entry = state.delta()
            if commit.last_offset >= commit.first_offset:
                # The changelog keeps the state; the sketches' digests are kept for the last batch only.
                commit.encoded = encode({k: v for k, v in commit.entry.items() if k != "sketches"})
                commit.sketches = _encoder.encode(commit.entry["sketches"])
                entry_bytes = len(commit.encoded)
                owned.log_bytes += entry_bytes
                if owned.log_bytes > max(owned.snapshot_bytes, MIN_LOG_BYTES):
                    state.trim()
                    commit.snapshot = encode(state.snapshot())
                    owned.snapshot_bytes, owned.log_bytes = len(commit.snapshot), entry_bytes
            commits.append(commit)
        hot = self.hot.observe(per_video, newest, self._now()) if newest else {}
        metrics.PLAN_SECONDS.observe(time.perf_counter() - started)
        return PlannedBatch(
            len(records), StatePlan([], dead_letters, hot, commits, self._settings.events_topic), started
        )

    def _apply(self, state: PartitionState, event: Any, bot_filter: Any, commit: _Commit) -> None:
        state.arrive(event.ingest_ts)
        kind = event.type
        if kind == "heartbeat" or kind == "leave":
            state.presence(event)
            return
        if kind == "view":
            viewer = rules.viewer_of(event)
            verdict = judge_view(event, viewer, state.is_first_copy(event.event_id), self.windows, bot_filter)
        elif kind in rules.REACTION_STATE and event.user_id is not None:
            viewer, verdict = event.user_id, REACTION
        else:
            return
        if state.count(event, verdict, viewer):
            commit.applied += 1
            if verdict.startswith("rejected:"):
                commit.rejected[verdict] = commit.rejected.get(verdict, 0) + 1
        else:
            commit.duplicates += 1

    async def write(self, batch: PlannedBatch) -> BatchReport:
        """Commit each partition's changes, then sink its counts; dead letters are sent first."""
        plan = batch.plan
        assert isinstance(plan, StatePlan)
        await send_dead_letters(plan, self._send_dead_letter)
        started = time.perf_counter()
        commits: list[_Commit] = [c for c in plan.commits if c.last_offset >= c.first_offset]
        answers = await self._retry(
            lambda: self._store.commit(
                [
                    (c.partition, c.generation, c.last_offset, c.encoded, c.sketches, c.snapshot)
                    for c in commits
                ]
            )
        )
        results = []
        shards = {video: (n, self.hot.ttl_ms) for video, n in plan.hot.items()}
        for commit, (status, value) in zip(commits, answers, strict=True):
            fenced = status == FENCED
            if fenced:
                owned = self.owned.get(commit.partition)
                if owned is not None and owned.generation == commit.generation:
                    del self.owned[commit.partition]  # another worker owns it now
            elif status != ALREADY:
                owned = self.owned.get(commit.partition)
                state = owned.state if owned is not None else self._new_state()
                sunk = plan_sink(
                    commit.entry,
                    state,
                    self._part(commit.partition),
                    self._now(),
                    self._settings.retention_ms,
                    shards,
                )
                shards = {}
                await self._retry(lambda sunk=sunk: sink(self._client, sunk))  # type: ignore[misc]
            results.append(
                WriteResult(
                    self._settings.events_topic,
                    commit.partition,
                    commit.first_offset - 1,
                    value if not fenced else commit.first_offset - 1,
                    commit.applied,
                    commit.duplicates,
                    commit.skipped,
                    fenced,
                )
            )
        skipped_whole = [c for c in plan.commits if c.last_offset < c.first_offset]
        for c in skipped_whole:
            results.append(
                WriteResult(
                    self._settings.events_topic, c.partition, c.last_offset, c.last_offset, 0, 0, c.skipped
                )
            )
        metrics.FLUSH_SECONDS.labels(WORKER).observe(time.perf_counter() - started)
        report = BatchReport(batch.records, plan.events, len(plan.dead_letters), results, plan.hot)
        rejected: dict[str, int] = {}
        for commit in commits:
            if (self._settings.events_topic, commit.partition) not in report.fenced:
                for name, n in commit.rejected.items():
                    rejected[name] = rejected.get(name, 0) + n
        observe_batch(report, rejected, batch.planned_at)
        return report

    async def handle(self, records: list[Record]) -> BatchReport:
        """Count a micro-batch exactly once: apply it, then commit and sink it."""
        return await self.write(self.plan(records))

    def _now(self) -> int:
        return int(self._clock() * 1000)

    async def _retry(self, action: Callable[[], Awaitable[T]]) -> T:
        return await until_redis(self._settings, action)
