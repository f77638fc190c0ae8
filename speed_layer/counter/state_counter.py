"""The counter with its state in the worker (docs/design.md, "Speed layer"): each partition's state is
restored on assignment, micro-batches are applied to it in memory by the rules of `counting/`, then
each partition's changes are committed atomically (`partition_store`) and its counts sunk to the
read keys (`sink`). `stream.count_stream` drives it from the Faust agent; tests drive it directly.

A worker commits a batch only after the previous one was sunk, so at most the last committed entry
of a partition can lack its counts in the read keys: a restore sinks it again (idempotent).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import redis.asyncio as aioredis

from counting import rules
from counting.bots import RulesInUse
from counting.event import Event
from counting.regions import Exchange, accepted_here
from counting.settings import Settings
from counting.values import ShardPlan
from speed_layer import logs, metrics
from speed_layer.counter.handoff import (
    NOTICE_MS,
    announce,
    hand_off,
    home_of,
    moved_entries,
    moved_sessions,
    take_over,
)
from speed_layer.counter.hot import HotVideos
from speed_layer.counter.judge import REACTION, judge_view
from speed_layer.counter.state_plan import Commit, Owned, StatePlan
from speed_layer.counter.stream import (
    WORKER,
    BatchReport,
    PlannedBatch,
    SendDeadLetter,
    WriteResult,
    observe_batch,
    send_dead_letters,
    until_redis,
)
from speed_layer.counter.windows import ViewWindows
from speed_layer.errors import EarlierCounterState, PoisonRecord
from speed_layer.records import Record, by_partition, decode_record
from speed_layer.regions.regions import Publish, components_of
from speed_layer.sink.sink import SinkPlan, merged, plan_sink, sink
from speed_layer.state import snapshot
from speed_layer.state.counted_views import window_key as _window_key
from speed_layer.state.firsts import first_key as _first_key
from speed_layer.state.partition import PartitionState
from speed_layer.state.partition_store import (
    ALREADY,
    CHUNK_REFUSED,
    COMMITTED,
    FENCED,
    SNAPSHOT_SWITCHED,
    Chunk,
    PartitionStore,
    compress,
    earlier_counter_partitions,
    encode,
    packed,
)
from speed_layer.state.presence import session_key as _session_key
from speed_layer.state.rows import warm
from speed_layer.state.seen import fingerprint as _fingerprint
from speed_layer.state.snapshot import SnapshotBuild

T = TypeVar("T")
_encoder = msgspec.msgpack.Encoder()
# A snapshot build begins once the changelog entries since the last one weigh more than it (and at
# least this much): restore reads at most about twice the state.
MIN_LOG_BYTES = 1 << 20
_PRESENCE = frozenset({"heartbeat", "leave"})
_viewer_of, _view_window_of, _is_qualified_view, _viewer_digest = (
    rules.viewer_of,
    rules.view_window_of,
    rules.is_qualified_view,
    rules.viewer_digest,
)


class StateCounter:
    """Counts micro-batches with partition state in memory; one instance per worker process."""

    def __init__(
        self,
        settings: Settings,
        client: aioredis.Redis,
        send_dead_letter: SendDeadLetter,
        clock: Callable[[], float] = time.time,
        rebuilding: bool = False,
        publish: Publish | None = None,
    ) -> None:
        """`rebuilding`: replaying the archived log in ingestion order with every partition (`tally
        speed rebuild`): no shard is planned from velocities; a hot video's plan is read from the
        log instead (its first event at another partition than its home), and the state of its
        moving viewers is taken over from the home's state in memory. `publish`: where the
        components of each entry go once sunk, for the other regions (decision 0006)."""
        self._settings = settings
        self._client = client
        self._rebuilding = rebuilding
        self._store = PartitionStore(client, settings.events_topic)
        self._send_dead_letter = send_dead_letter
        self._clock = clock
        self._publish = publish
        self._region = settings.region
        self.windows = ViewWindows()
        self.hot = HotVideos(settings.hot_video_events_per_sec, settings.max_video_shards)
        self.bot_rules = RulesInUse(settings.bot_rules_file)
        self.owned: dict[int, Owned] = {}
        self._chunked = -1  # the partition that took the last snapshot chunk
        # The assignment callback and a batch whose records came before it may claim at once: one
        # at a time, or the second would fence the first one's batch in flight.
        self._claiming = asyncio.Lock()
        warm()

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
        async with self._claiming:
            await self._claim(topic, partitions)

    async def assigned(self, topic: str, partitions: list[int]) -> None:
        """The callback of an assignment (the whole of it): forget the partitions this worker no
        longer holds, then claim the new ones. A state kept past its partition's revocation would be
        stale once another worker commits there, and a batch planned on it when the partition comes
        back would be fenced after the consumer moved past its records."""
        if topic != self._settings.events_topic:
            return
        async with self._claiming:
            for partition in set(self.owned) - set(partitions):
                del self.owned[partition]  # a batch planned on it still writes it (`Commit.owned`)
            if partitions:
                await self._claim(topic, partitions)

    async def _claim(self, topic: str, partitions: list[int]) -> None:
        # A partition this worker claimed already (its records can come before the assignment's
        # callback) and no other worker claimed since keeps its state: claiming it again would fence
        # the batches in flight.
        if not self._rebuilding and not self.owned:
            await self._refuse_earlier_counter()
        owners = await self._retry(lambda: self._store.owners(partitions))
        partitions = [p for p in partitions if p not in self.owned or owners[p] != self.owned[p].generation]
        if not partitions:
            return
        generations = await self._retry(lambda: self._store.claim(partitions))
        started = time.perf_counter()
        for partition, generation in generations.items():
            state = self._new_state()
            last = await self._retry(lambda p=partition, s=state: self._store.restore(p, s))  # type: ignore[misc]
            # What the restored state holds, taken before the partition is owned: from then on the
            # stream may apply newer records to it (uncommitted, unsunk) while this claim awaits Redis.
            restored = state.offset
            resink = None if last is None else (last, self._plan_sink(last, state, partition))
            self.owned[partition] = Owned(state, generation)
            # Every plan of the videos this partition is home to, closed or not: the ingest API
            # routes by them, and a hash lost or never written gets them again (the same values).
            plans = {v: ShardPlan(p[0], p[1]) for v, p in state.plans.items()}
            if plans:
                await self._retry(lambda plans=plans: announce(self._client, plans))  # type: ignore[misc]
            if resink is not None:
                entry, plan = resink
                await self._retry(lambda plan=plan: sink(self._client, plan))  # type: ignore[misc]
                await self._published(entry, state, partition)  # it may not have left either
                await self._retry(lambda p=partition, o=restored: self._store.mark_sunk({p: o}))  # type: ignore[misc]
        logs.info(
            "partitions_claimed",
            topic=topic,
            generations=generations,
            restore_ms=round((time.perf_counter() - started) * 1000, 1),
        )

    async def _refuse_earlier_counter(self) -> None:
        s = self._settings
        found = await self._retry(
            lambda: earlier_counter_partitions(self._client, s.events_topic, s.topic_partitions)
        )
        if found:
            raise EarlierCounterState(
                f"Redis at {s.redis_url} holds the state of the Redis-state counter of an earlier "
                f"version (its offsets of partitions {found} of topic '{s.events_topic}'): this "
                "counter does not read it, and counting on would add to its counts. Stop the counter, "
                "run 'tally speed rebuild --replace' (it counts the archived log into a new state) "
                "and start it again"
            )

    async def prepare(self, records: list[Record]) -> None:
        """Before a batch is planned: claim the partitions of its records this worker does not own
        yet, take over the hand-offs that the events held in its partitions wait for, and apply
        those events (their changes go with the partition's next commit)."""
        unowned = sorted({r.partition for r in records} - set(self.owned))
        if unowned:  # records of an assignment whose callback has not run yet: they are this worker's
            await self.claim(self._settings.events_topic, unowned)
        bot_filter = self.bot_rules.current()
        for partition, owned in list(self.owned.items()):
            waiting = sorted(owned.state.pending)
            if not waiting:
                continue
            parts = await self._retry(lambda w=waiting, p=partition: take_over(self._client, w, p))  # type: ignore[misc]
            for video, entries in parts.items():
                scratch = Commit(partition, owned.generation, 0, 0, owned)
                for event in owned.state.take_over(video, entries):
                    self._apply(owned.state, event, bot_filter, scratch)
                logs.info(
                    "handoff_taken_over",
                    video=video,
                    partition=partition,
                    entries=len(entries),
                    held_applied=scratch.applied,
                    held_duplicates=scratch.duplicates,
                )

    def plan(self, records: list[Record]) -> PlannedBatch:
        """Apply a micro-batch to the partitions' states (CPU only); records of a partition this
        worker does not own are left for its owner. The events of a video whose home is another
        partition wait until this partition has taken over their viewers' state (`handoff`)."""
        started = time.perf_counter()
        bot_filter = self.bot_rules.current()
        partitions = self._settings.topic_partitions
        commits: dict[int, Commit] = {}
        dead_letters: list[tuple[Record, PoisonRecord]] = []
        per_video: dict[str, int] = {}
        homes: dict[str, int] = {}
        newest = 0
        for (_, partition), group in by_partition(records).items():
            owned = self.owned.get(partition)
            if owned is None:
                continue
            state = owned.state
            if group[0].offset > state.offset + 1 and not self._rebuilding:
                _warn_of_a_gap(partition, state.offset, group[0].offset)
            commit = commits[partition] = Commit(
                partition, owned.generation, group[0].offset, state.offset, owned
            )
            decoded: list[tuple[int, list[Event]]] = []
            for record in group:
                commit.records += 1
                if record.offset <= state.offset:
                    commit.skipped += 1
                    continue
                try:
                    decoded.append((record.offset, decode_record(record.value)))
                except PoisonRecord as exc:
                    dead_letters.append((record, exc))
                    decoded.append((record.offset, []))
            # The markers of the group's views and reactions, and the windows and viewers' first
            # buckets of its views, looked up at once (presence has neither).
            flat = [e for _, events in decoded for e in events]
            fps = [0 if e.type in _PRESENCE else _fingerprint(e.video_id, e.event_id) for e in flat]
            # A heartbeat's or a leave's session.
            sessions = [
                _session_key(e.video_id, e.session_id) if not fp and e.session_id is not None else 0
                for e, fp in zip(flat, fps, strict=True)
            ]
            viewers = [_viewer_of(e) if _is_qualified_view(e) else "" for e in flat]  # views that may count
            windows = [
                _window_key(e.video_id, viewer, _view_window_of(e.ts)) if viewer else 0
                for e, viewer in zip(flat, viewers, strict=True)
            ]
            digests = [_viewer_digest(viewer) if viewer else "" for viewer in viewers]
            firsts = [
                _first_key(e.video_id, digest) if digest else 0
                for e, digest in zip(flat, digests, strict=True)
            ]
            state.seen.fetch([fp for fp in fps if fp])
            state.windows.fetch([w for w in windows if w])
            state.firsts.fetch([f for f in firsts if f])
            state.sessions.fetch([s for s in sessions if s])
            # The bot windows' clock: the newest ingest time of the group (stamped a record at a time).
            clock = max((events[-1].ingest_ts or 0 for _, events in decoded if events), default=0)
            self.windows.advance(clock)
            newest = max(newest, clock)
            at = 0
            for offset, events in decoded:
                for event in events:
                    fp, viewer, window = fps[at] or sessions[at], viewers[at], windows[at]
                    digest, key = digests[at], firsts[at]
                    at += 1
                    video = event.video_id
                    per_video[video] = per_video.get(video, 0) + 1
                    home = homes.get(video)
                    if home is None:
                        home = homes[video] = home_of(video, partitions)
                    if video not in state.imported and home != partition and self._rebuilding:
                        self._take_over_from_home(video, home, partition, event)
                    if video in state.imported or home == partition:
                        self._apply(state, event, bot_filter, commit, fp, viewer, window, digest, key)
                    else:
                        state.hold(event)
                        commit.held += 1
                commit.events += len(events)
                state.offset = offset
            commit.last_offset = state.offset
        now = self._now()
        hot = self.hot.observe(per_video, newest, now) if newest else {}
        if not self._rebuilding:
            self._plan_shards(hot, now)
        for partition, owned in self.owned.items():
            if partition not in commits and owned.state.changed:  # a hand-off taken over, a plan
                commits[partition] = Commit(
                    partition, owned.generation, owned.state.offset + 1, owned.state.offset, owned
                )
        # Snapshot chunks of this batch's budget of entries (the loop's pause grows with the batch,
        # never with the state), the partitions taking turns from the one after the last that took one.
        budget = snapshot.chunk_budget(sum(c.events for c in commits.values()))
        for partition in sorted(commits, key=lambda p: (p - self._chunked - 1) % partitions):
            used = self._seal(self.owned[partition], commits[partition], budget)
            if used:
                budget, self._chunked = budget - used, partition
        metrics.PLAN_SECONDS.observe(time.perf_counter() - started)
        plan = StatePlan(self._settings.events_topic, list(commits.values()), dead_letters, hot)
        return PlannedBatch(len(records), plan, started)

    def _plan_shards(self, hot: dict[str, int], now: int) -> None:
        """Plan the shards of the hot videos whose home partition this worker owns (once a video)."""
        shards = self._settings.max_video_shards
        if shards <= 1:
            return
        for video in hot:
            owned = self.owned.get(home_of(video, self._settings.topic_partitions))
            if owned is not None and video not in owned.state.plans:
                owned.state.plan_shards(video, shards, now + NOTICE_MS)

    def _take_over_from_home(self, video: str, home: int, partition: int, event: Any) -> None:
        """Rebuilding: the first event of a video at another partition than its home marks when its
        plan held (every later event is routed by it); the home's state, which holds every event
        ingested before (the log is replayed in ingestion order), hands the moving viewers over."""
        owned = self.owned.get(home)
        if owned is None:
            return
        shards = self._settings.max_video_shards
        if video not in owned.state.plans:
            owned.state.plan_shards(video, shards, event.ingest_ts)
            owned.state.close(video)
        moved = moved_entries(
            owned.state, video, owned.state.plans[video][0], self._settings.topic_partitions
        )
        mine = moved.get(partition, {})
        self.owned[partition].state.take_over(video, {name.encode(): value for name, value in mine.items()})
        owned.state.drop_beats(video, moved_sessions({partition: mine}))  # each session watches in one place

    def plans(self) -> dict[str, ShardPlan]:
        """The shard plans of the videos whose home partition this worker owns."""
        return {
            video: ShardPlan(plan[0], plan[1])
            for owned in self.owned.values()
            for video, plan in owned.state.plans.items()
        }

    def _seal(self, owned: Owned, commit: Commit, budget: int) -> int:
        """Take a partition's changes into its commit: the changelog entry, the sketches, the next
        chunk of a snapshot build (begun when the changelog outweighs the last snapshot), of at
        most `budget` entries, the plans to announce and the hand-offs due. The chunk's entries."""
        state = owned.state
        commit.same_offset = commit.last_offset < commit.first_offset and state.changed
        if commit.last_offset < commit.first_offset and not commit.same_offset:
            return 0  # every record was committed before: nothing to do
        due = state.closing(self._settings.delivery_timeout_ms)
        commit.closing = [v for v in due if v not in owned.handing]
        owned.handing.update(commit.closing)
        outweighs = owned.log_bytes > max(owned.snapshot_bytes, MIN_LOG_BYTES)
        begin = budget > 0 and owned.build is None and outweighs
        if begin:
            state.trim()  # before the copies: what aged out is not in the snapshot
        commit.entry = state.delta()
        plans: dict[str, list[int] | None] = commit.entry["plans"]  # type: ignore[assignment]
        commit.announce = {v: ShardPlan(p[0], p[1]) for v, p in plans.items() if p is not None and not p[2]}
        # The changelog keeps the state; the sketches' digests are kept for the last batch only.
        commit.encoded = encode({k: v for k, v in commit.entry.items() if k != "sketches"})
        commit.sketches = _encoder.encode(commit.entry["sketches"])
        entry_bytes = len(commit.encoded)
        owned.log_bytes += entry_bytes
        if begin:  # its first chunk goes with this batch, whose entry a restore loads after the chunks
            owned.build = SnapshotBuild(state)
        build = owned.build
        if build is None:
            return 0
        build.log_bytes += entry_bytes
        if budget <= 0 or build.planned_all:
            return 0
        # Compressed by `write` in a thread, while the loop goes on.
        index, chunk, entries, last = build.next_chunk(budget)
        commit.chunk, commit.build = Chunk(index, packed(chunk), last), build
        return max(entries, 1)

    def _apply(
        self,
        state: PartitionState,
        event: Any,
        bot_filter: Any,
        commit: Commit,
        fp: int | None = None,
        viewer: str = "",
        window: int = 0,
        digest: str = "",
        first_fp: int = 0,
    ) -> None:
        """Apply an event (`fp`: its marker's fingerprint, or a heartbeat's or leave's session key; a
        view's `viewer`, `window` key, viewer `digest` and first bucket's key (`first_fp`), as the
        batch's look-up made them; each made here if not given)."""
        here = accepted_here(event, self._region)
        state.arrive(event.ingest_ts, here)
        kind = event.type
        if kind == "heartbeat" or kind == "leave":
            state.presence(event, fp)
            return
        if fp is None:
            fp = _fingerprint(event.video_id, event.event_id)
        if kind == "view":
            if not viewer:
                viewer = rules.viewer_of(event)
            first = state.is_first_copy(fp)
            verdict = judge_view(event, viewer, first, self.windows, bot_filter)
        elif kind in rules.REACTION_STATE and event.user_id is not None:
            viewer, verdict = event.user_id, REACTION
            if here and self._publish is not None:
                state.forward(event)
        else:
            return
        digest = digest or _viewer_digest(viewer)
        if state.count(event, verdict, viewer, digest, fp, window or None, first_fp or None):
            commit.applied += 1
            if verdict.startswith("rejected:"):
                commit.rejected[verdict] = commit.rejected.get(verdict, 0) + 1
        else:
            commit.duplicates += 1

    async def write(self, batch: PlannedBatch) -> BatchReport:
        """Commit each partition's changes, then sink its counts; dead letters are sent first."""
        plan = batch.plan
        await send_dead_letters(plan, self._send_dead_letter)
        started = time.perf_counter()
        commits: list[Commit] = [c for c in plan.commits if c.due]
        for c in commits:
            if c.chunk is not None and c.build is not None:
                c.chunk.data = await asyncio.to_thread(compress, c.chunk.data)
                c.build.stored_bytes += len(c.chunk.data)
        answers = await self._retry(
            lambda: self._store.commit(
                [
                    (
                        c.partition,
                        c.generation,
                        c.last_offset,
                        c.encoded,
                        c.sketches,
                        c.same_offset,
                        c.chunk,
                    )
                    for c in commits
                ]
            )
        )
        results = []
        committed: list[Commit] = []
        for commit, (status, value, chunk) in zip(commits, answers, strict=True):
            fenced = status == FENCED
            owned = commit.owned
            if commit.build is not None and owned.build is commit.build:
                self._built(owned, commit.build, chunk if status == COMMITTED else CHUNK_REFUSED)
            if fenced:
                if self.owned.get(commit.partition) is owned:
                    del self.owned[commit.partition]  # another worker owns it now
            elif status != ALREADY:
                committed.append(commit)
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
        # Every committed partition's counts in one pipeline (one round trip, not one a partition).
        if committed:
            sunk = merged([self._plan_sink(c.entry, c.owned.state, c.partition) for c in committed])
            await self._retry(lambda: sink(self._client, sunk))
        for commit in committed:
            await self._published(commit.entry, commit.owned.state, commit.partition)
            await self._hand_over(commit.owned, commit)
        sunk_to = {c.partition: c.last_offset for c in committed}
        if sunk_to:
            await self._retry(lambda: self._store.mark_sunk(sunk_to))
        for c in plan.commits:
            if not c.due:  # every record committed before
                results.append(
                    WriteResult(
                        self._settings.events_topic,
                        c.partition,
                        c.last_offset,
                        c.last_offset,
                        0,
                        0,
                        c.skipped,
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

    @staticmethod
    def _built(owned: Owned, build: SnapshotBuild, chunk: int) -> None:
        """What became of a build's chunk: the build goes on, ends (the snapshot switched: the next
        one is due once the changelog outweighs it), or is dropped (a chunk not stored: the next
        batch begins another)."""
        if chunk == SNAPSHOT_SWITCHED:
            owned.snapshot_bytes, owned.log_bytes, owned.build = build.stored_bytes, build.log_bytes, None
        elif chunk == CHUNK_REFUSED:
            owned.build = None

    def _plan_sink(self, entry: dict[str, Any], state: PartitionState, partition: int) -> SinkPlan:
        s = self._settings
        return plan_sink(
            entry, state, self._part(partition), self._now(), s.retention_ms, bool(s.peers), s.redis_cluster
        )

    async def _published(self, entry: dict[str, Any], state: PartitionState, partition: int) -> None:
        """Hand what a sunk entry changed to `publish` (several regions only): its components, and
        the reactions accepted here that it applied (a restored entry holds them decoded)."""
        if self._publish is not None:
            topic = self._settings.events_topic
            components = components_of(entry, state, self._settings.region, topic, partition)
            reactions = [msgspec.convert(e, Event) for e in entry.get("forward", [])]
            await self._publish(Exchange(components, reactions))

    async def _hand_over(self, owned: Owned, commit: Commit) -> None:
        """After a commit of a home partition: announce the shard plans it holds, and hand off the
        videos whose every event before their plan is applied (a crash before the hand-off is
        marked in the state makes the next owner do it again: the same values)."""
        if commit.announce:
            await self._retry(lambda: announce(self._client, commit.announce))
        for video in commit.closing:
            shards = owned.state.plans[video][0]
            moved = moved_entries(owned.state, video, shards, self._settings.topic_partitions)
            await self._retry(lambda v=video, m=moved: hand_off(self._client, v, m))  # type: ignore[misc]
            owned.state.close(video)
            # Committed with the next batch (as the close): till then a moved session taken over
            # already counts in both partitions, for one micro-batch at most.
            owned.state.drop_beats(video, moved_sessions(moved))
            owned.handing.discard(video)
            logs.info(
                "handoff_written",
                video=video,
                home=commit.partition,
                partitions=sorted(moved),
                entries=sum(len(m) for m in moved.values()),
            )

    async def handle(self, records: list[Record]) -> BatchReport:
        """Count a micro-batch exactly once: take over what waits, apply it, commit and sink it."""
        await self.prepare(records)
        return await self.write(self.plan(records))

    def _now(self) -> int:
        return int(self._clock() * 1000)

    async def _retry(self, action: Callable[[], Awaitable[T]]) -> T:
        return await until_redis(self._settings, action)


def _warn_of_a_gap(partition: int, state_offset: int, first: int) -> None:
    """Records of a partition come in offset order with none missing (no producer writes
    transactions to the events topic, and a record that does not decode still takes its offset):
    a first record past the state's next offset means the state in Redis is older than what the
    consumer committed (Redis flushed, or restored from an older snapshot), and the records between
    are not counted. Said once a batch; the counts stay short until a rebuild."""
    logs.warning(
        "counter_gap",
        partition=partition,
        state_offset=state_offset,
        first_offset=first,
        not_counted=first - state_offset - 1,
        action="the speed state in Redis is older than the counter's consumer offsets: stop the "
        "counter, run 'tally speed rebuild --replace', then start it",
    )
