"""The stats answer of a video: the merge of baseline and speed, with its freshness and health."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from counting import keys, rules, values
from counting.bots import RulesInUse
from counting.display import readable
from counting.settings import Settings
from counting.values import decode_peer_state
from serving_layer.baselines import BaselineCache
from serving_layer.cache import ReadCache
from serving_layer.errors import StoreUnavailable
from serving_layer.merge import merge
from serving_layer.reactions import read_user_reaction
from serving_layer.speed import SpeedCounts, read_video, speed_state_keys

REDIS_ERRORS = (RedisError, OSError)
_JSON = msgspec.json.Encoder()


def encode_json(value: Any) -> bytes:
    """JSON text as FastAPI's JSON answers have it: compact, UTF-8, keys in their order."""
    return _JSON.encode(value)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Answer:
    """A stats answer and its JSON text, encoded once per load (a cache hit is sent as it is)."""

    body: dict[str, Any]
    encoded: bytes


@dataclass
class StatsReader:
    """Reads merged stats through a short-lived cache; trending videos get a tighter bound."""

    settings: Settings
    redis: Redis
    baselines: BaselineCache
    cache: ReadCache[Answer]
    max_age_secs: float = 1.0
    hot_max_age_secs: float = 0.25
    hot_videos: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self._owners = speed_state_keys(self.settings.events_topic, self.settings.topic_partitions)
        self._bot_rules = RulesInUse(
            self.settings.bot_rules_file
        )  # the counter's, for counts after the cutoff
        # Per (baseline run, video): by how much that baseline corrected the speed layer's count, once
        # known; a read then no longer sums the speed buckets before the cutoff.
        self._corrections: dict[tuple[str, str], int] = {}

    async def stats(self, video_id: str) -> dict[str, Any]:
        """The counts of a video (possibly up to `max_age_secs` old); StoreUnavailable when
        neither Redis nor a baseline can answer. The dict is shared: copy it to change it."""
        return (await self.answer(video_id)).body

    async def answer(self, video_id: str) -> Answer:
        """`stats` with its JSON text."""
        key = self._key(video_id)
        return await self.cache.get(key, self._bound(video_id), lambda: self._load(video_id))

    def cached(self, video_id: str) -> Answer | None:
        """The answer `stats` would give from the cache without loading, or None (a load is due)."""
        entry = self.cache.fresh(self._key(video_id), self._bound(video_id))
        return entry.value if entry is not None else None

    def _bound(self, video_id: str) -> float:
        return self.hot_max_age_secs if video_id in self.hot_videos else self.max_age_secs

    def _key(self, video_id: str) -> str:
        baseline = self.baselines.get()
        return f"{baseline.run_id if baseline else '-'}/{video_id}"  # a new baseline is a new entry

    async def _load(self, video_id: str) -> Answer:
        now = now_ms()
        baseline = self.baselines.get()
        cutoff = baseline.cutoff if baseline else 0
        degraded: list[str] = []
        speed: SpeedCounts | None = None
        try:
            from_bucket = rules.bucket_of(cutoff, self.settings.bucket_ms)
            uniques = "g_uniques" if self.settings.peers else "uniques"
            known = self._corrections.get((baseline.run_id, video_id)) if baseline else None
            before = baseline is not None and known is None
            speed, owned = await read_video(
                self.redis, video_id, from_bucket, now, self._owners, uniques, before=before
            )
            if not owned:
                degraded.append(
                    "the speed layer has no state in Redis (no counter has run, or Redis lost it): counts "
                    "after the cutoff may be missing; start the counter or run 'tally speed rebuild'"
                )
        except REDIS_ERRORS as exc:
            if baseline is None:
                raise StoreUnavailable(
                    f"Redis is not reachable at {self.settings.redis_url} and no batch baseline is "
                    f"published: start Redis ('tally up') or run a batch ({exc})"
                ) from exc
            degraded.append("speed layer unreachable: counts are the batch baseline only")
        if baseline is not None and now - baseline.cutoff > self.settings.retention_ms:
            degraded.append("baseline older than the speed retention: recent counts may be missing")
        regions = await self._regions(now, degraded) if self.settings.peers else None
        merged = merge(video_id, baseline.get(video_id) if baseline else None, speed)
        corrected = merged.corrected_by_batch
        if baseline is not None:
            corrected = self._correction(baseline.run_id, video_id, corrected)
        body = {
            "video_id": video_id,
            "views": merged.views,
            "likes": merged.likes,
            "dislikes": merged.dislikes,
            "unique_viewers": merged.unique_viewers,
            "watching_now": merged.watching_now,
            "views_display": readable(merged.views),
            "likes_display": readable(merged.likes),
            "dislikes_display": readable(merged.dislikes),
            "unique_viewers_display": readable(merged.unique_viewers),
            "rejected": merged.rejected,
            "flagged": merged.flagged,
            "as_of": now,
            "batch_cutoff": baseline.cutoff if baseline else None,
            "batch_run_id": baseline.run_id if baseline else None,
            "rules_version": baseline.rules_version if baseline else self._bot_rules.current().version,
            "approx": bool(degraded) or merged.approx,
            "corrected_by_batch": corrected,
            "degraded": degraded,
        }
        if regions is not None:
            body["regions"] = regions
        return Answer(body, encode_json(body))

    def _correction(self, run_id: str, video_id: str, read: int | None) -> int | None:
        """The correction of the baseline `run_id` for the video: the one known, else `read` (kept
        once known: later reads skip the buckets before the cutoff, which only expire after it)."""
        key = (run_id, video_id)
        if key in self._corrections:
            return self._corrections[key]
        if read is not None:
            if len(self._corrections) > 100_000:
                self._corrections.clear()
            self._corrections[key] = read
        return read

    async def _regions(self, now: int, degraded: list[str]) -> dict[str, dict[str, Any]]:
        """This region and each peer with the age of the components it holds from it: the time
        since its replicator last read the peer's components to their end (None: never)."""
        found: dict[str, dict[str, Any]] = {self.settings.region: {"local": True, "age_ms": 0}}
        try:
            raw = await self.redis.hgetall(keys.region_peers())
        except REDIS_ERRORS:
            raw = {}
        statuses = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
        for peer in sorted(self.settings.peers):
            try:
                status = decode_peer_state(statuses[peer]) if peer in statuses else values.PeerState()
            except values.UnknownLayout as exc:
                status = values.PeerState(error=str(exc))
            synced = status.in_sync_at
            age = now - synced if synced else None
            found[peer] = {"local": False, "age_ms": age, "error": status.error}
            if status.error or not synced:
                why = status.error or "never reached"
                degraded.append(
                    f"region {peer}: its counts here may be behind ({why}); see the replicator's log"
                )
        return found

    async def user_reaction(self, video_id: str, user_id: str) -> tuple[str | None, str | None]:
        """liked / disliked / none, read uncached (strongly consistent), and why it may be wrong:
        (None, why) when Redis is away or holds a value this version cannot read; (state, why)
        when Redis lost the speed state (an acknowledged reaction may be missing until the
        counter has counted it again)."""
        try:
            state, owned = await read_user_reaction(self.redis, video_id, user_id, self._owners)
        except REDIS_ERRORS as exc:
            return (
                None,
                f"user reactions unreadable: Redis at {self.settings.redis_url} is unreachable ({exc})",
            )
        except values.UnknownLayout as exc:
            return None, str(exc)
        if not owned:
            return state, (
                "user reactions may be out of date: Redis holds no speed state (no counter has run, or "
                "Redis lost it); run 'tally speed rebuild' and start the counter"
            )
        return state, None
