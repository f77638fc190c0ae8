"""Parity: `run_batch` over a random log in the archiver's layout equals `counting.oracle.count`."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import redis
from pyspark.sql import SparkSession

from batch_layer import run_batch
from counting import bots, oracle, rules
from counting.batchpaths import baseline_path, daily_path, series_path
from counting.event import Event
from counting.settings import Settings
from tests.logfiles import oracle_rows
from tests.rulesfiles import IMPOSSIBLE_AGENT
from tests.writers import archived_until
from warehouse.baseline import COUNT_COLUMNS, current_baseline

pytestmark = [pytest.mark.slow, pytest.mark.integration]

WriteLog = Callable[[Path, Sequence[Event]], None]

START = int(datetime(2026, 11, 20, 22, 0, tzinfo=UTC).timestamp() * 1000)  # 22:00 UTC: spans a midnight
SPAN_MS = 4 * 3_600_000
MIDNIGHT = START + 2 * 3_600_000
BROWSER = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36"
HEADLESS = ("Mozilla/5.0 HeadlessChrome/131.0", "python-requests/2.32.3", "Go-http-client/1.1", "curl/8.5")
DATACENTER_IPS = ("3.14.15.92", "52.10.1.1", "34.70.2.3", "159.89.10.10")
DATACENTER_IPS += ("2600:1f00::7", "2a05:d000::1:2", "::ffff:52.3.4.5")  # IPv6 and IPv4-mapped


class _Log:
    """A seeded random log: humans, four kinds of bots, reaction churn, heartbeats and retries."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.events: list[Event] = []
        self.videos = [f"vid-{i:02d}" for i in range(12)]
        self.homes = [f"81.2.{i}.{j}" for i in range(8) for j in range(1, 9)] + ["2001:db8::1", "2001:db8::2"]

    def _ingest(self) -> int:
        return START + self.rng.randrange(SPAN_MS)

    def add(self, **fields: object) -> None:
        """Add one event; `ts` defaults to shortly (sometimes hours) before its ingestion."""
        ingest_ts = fields.pop("ingest_ts", None) or self._ingest()
        assert isinstance(ingest_ts, int)
        delay = (
            self.rng.choice((0, 40, 900, 3_000))
            if self.rng.random() < 0.95
            else self.rng.randrange(7_200_000)
        )
        fields.setdefault("ts", ingest_ts - delay)
        fields.setdefault("event_id", f"ev-{len(self.events):06d}-{self.rng.randrange(10**6):06d}")
        self.events.append(Event(ingest_ts=ingest_ts, **fields))  # type: ignore[arg-type]

    def view(self, **fields: object) -> None:
        rng = self.rng
        user = rng.randrange(220)
        defaults: dict[str, object] = {
            "type": "view",
            "video_id": rng.choice(self.videos),
            "user_id": f"user-{user}" if user < 160 else None,
            "session_id": f"sess-{user}-{rng.randrange(3)}",
            "ip": self.homes[user % len(self.homes)],
            "user_agent": BROWSER,
            "watch_secs": rng.choice((3.0, 12.5, 29.999, 30.0, 31.0, 95.5, 240.0, 600.0)),
            "video_duration_secs": rng.choice((None, 60.0, 180.0, 900.0)),
        }
        defaults.update(fields)
        self.add(**defaults)

    def humans(self, n: int) -> None:
        for _ in range(n):
            self.view()

    def headless(self, n: int) -> None:
        for _ in range(n):
            self.view(
                user_agent=self.rng.choice(HEADLESS), user_id=None, session_id=f"bot-{self.rng.random()}"
            )

    def datacenter(self, n: int) -> None:
        for i in range(n):
            ja3 = self.rng.choice(sorted(bots.SHIPPED.bad_ja3)) if i % 2 else None
            self.view(ip=self.rng.choice(DATACENTER_IPS), ja3=ja3, user_id=f"farm-{i % 7}")

    def velocity(self, address: str, per_minute: Sequence[int]) -> None:
        """Bursts from one address: `per_minute[k]` views in the k-th minute of a random hour."""
        first = (self._ingest() // rules.MINUTE_MS) * rules.MINUTE_MS
        for k, n in enumerate(per_minute):
            for _ in range(n):
                ts = first + k * rules.MINUTE_MS + self.rng.randrange(rules.MINUTE_MS)
                self.view(ip=address, ts=ts, ingest_ts=ts + self.rng.randrange(2_000), user_id=None)

    def replay(self, viewer: str, video_id: str, n: int) -> None:
        """One viewer watching one video `n` times before midnight (one UTC day), 7 minutes apart."""
        for k in range(n):
            ts = START + k * 7 * rules.MINUTE_MS + self.rng.randrange(1_000)
            ip = self.rng.choice(self.homes)
            self.view(user_id=viewer, video_id=video_id, ts=ts, ingest_ts=ts + 1_000, ip=ip)

    def bad_tls(self, n: int) -> None:
        """Known bad fingerprints from home addresses, some watching longer than the video lasts."""
        for i in range(n):
            watch = self.rng.choice((45.0, 5_000.0, bots.SHIPPED.max_watch_secs + 60))
            duration = None if watch > bots.SHIPPED.max_watch_secs else 60.0
            ja3 = self.rng.choice(sorted(bots.SHIPPED.bad_ja3))
            self.view(ja3=ja3, watch_secs=watch, video_duration_secs=duration, user_id=f"tls-{i % 9}")

    def rotation(self, address: str, agents: int) -> None:
        """One view per agent from one address, `agents` distinct agents in the log's second hour of
        event time (before both cutoffs)."""
        hour = START + rules.HOUR_MS
        for k in range(agents):
            ts = hour + self.rng.randrange(rules.HOUR_MS)
            self.view(ip=address, ts=ts, ingest_ts=ts + 500, user_agent=f"{BROWSER} Build/{k}", user_id=None)

    def odd_agents(self, n: int) -> None:
        """Views with an impossible, a blank or no agent (the last two only weigh with others)."""
        for i in range(n):
            agent = (IMPOSSIBLE_AGENT, " ", None)[i % 3]
            ja3 = self.rng.choice(sorted(bots.SHIPPED.bad_ja3)) if i % 2 else None
            self.view(user_agent=agent, ja3=ja3, user_id=f"odd-{i % 11}")

    def reactions(self, n: int) -> None:
        for _ in range(n):
            ts = START + self.rng.randrange(0, SPAN_MS, 7_000)  # coarse: equal ts happen, event_id decides
            self.add(
                type=self.rng.choice(tuple(rules.REACTION_STATE)),
                video_id=self.rng.choice(self.videos[:5]),
                user_id=f"user-{self.rng.randrange(40)}",
                ts=ts,
                event_id=f"r-{self.rng.randrange(10**9):09d}",
            )

    def heartbeats(self, n: int) -> None:
        for i in range(n):
            self.add(type="heartbeat", video_id=self.rng.choice(self.videos), session_id=f"sess-{i}")

    def retries(self, share: float) -> None:
        """Copy a share of the events with the same event_id and a later ingest_ts."""
        for event in list(self.events):
            if self.rng.random() < share:
                later = event.ingest_ts + self.rng.choice((1, 700, 60_000, 3_600_000))  # type: ignore[operator]
                self.events.append(Event(**{**_fields(event), "ingest_ts": later}))

    def at_edges(self, cutoff: int) -> None:
        """Views ingested exactly at the cutoff and one millisecond before it."""
        self.view(ingest_ts=cutoff, ts=cutoff - 5)
        self.view(ingest_ts=cutoff - 1, ts=cutoff - 5)


def _fields(event: Event) -> dict[str, object]:
    return {f: getattr(event, f) for f in event.__struct_fields__}


MID_CUTOFF = START + 2 * 3_600_000 + 17 * 60_000 + 4_000  # 00:17:04, a 2-second bucket edge


@pytest.fixture(scope="module")
def log() -> list[Event]:
    gen = _Log(seed=20261122)
    gen.humans(1_800)
    gen.headless(120)
    gen.datacenter(140)
    gen.bad_tls(90)
    gen.velocity("198.51.100.7", (45, 31, 30, 12))
    gen.velocity("2001:db8:ffff::9", (33,))
    gen.replay("looper", "vid-03", 15)
    gen.replay("fan", "vid-04", bots.SHIPPED.max_replays_per_day)
    gen.rotation("81.9.9.9", bots.SHIPPED.max_agents_per_address_hour + 3)
    gen.rotation("81.9.9.10", bots.SHIPPED.max_agents_per_address_hour)
    gen.odd_agents(60)
    gen.reactions(500)
    gen.heartbeats(150)
    for cutoff in (MID_CUTOFF, MIDNIGHT):
        gen.at_edges(cutoff)
    gen.retries(0.12)
    gen.rng.shuffle(gen.events)
    return gen.events


def _final_cutoff(events: list[Event], bucket_ms: int) -> int:
    last = max(e.ingest_ts or 0 for e in events)
    return (last // bucket_ms + 1) * bucket_ms


@pytest.fixture
def published_log(
    log: list[Event], settings: Settings, redis_client: redis.Redis, write_log: WriteLog
) -> Settings:
    write_log(settings.raw_dir, log)
    archived_until(settings, _final_cutoff(log, settings.bucket_ms))
    return settings


def test_the_generated_log_exercises_every_rule(log: list[Event]) -> None:
    totals = oracle.count(log, MID_CUTOFF).values()
    rejected = {reason for c in totals for reason, n in c.rejected.items() if n}
    # The lightest signals never decide: each rejects only beside a heavier one, or an equal one
    # listed first (and the two watch signals, too long and too little, never fire together).
    assert rejected == set(bots.REASONS) - {bots.WATCH_ANOMALY, bots.WATCH_RATIO, bots.MISSING_AGENT}
    low_ratio = [e for e in log if bots.SHIPPED.is_low_watch_ratio(e.watch_secs, e.video_duration_secs)]
    assert any(rules.is_qualified_view(e) for e in low_ratio), "a counted-length view watched too little"
    for column in COUNT_COLUMNS:
        assert sum(getattr(c, column) for c in totals) > 0, column


@pytest.mark.parametrize("cutoff", [MID_CUTOFF, MIDNIGHT], ids=["mid-hour", "midnight"])
def test_batch_equals_the_oracle_at_a_cutoff(
    log: list[Event], published_log: Settings, spark: SparkSession, cutoff: int
) -> None:
    result = run_batch(published_log, cutoff, spark=spark)

    baseline = current_baseline(published_log.baselines_dir)
    assert baseline is not None
    assert baseline.rows == oracle_rows(log, cutoff)
    assert (baseline.run_id, baseline.cutoff, baseline.rules_version) == (
        result.run_id,
        cutoff,
        bots.SHIPPED.version,
    )
    assert result.events_read == sum(1 for e in log if (e.ingest_ts or 0) < cutoff)
    assert result.videos == len(baseline.rows)


def test_batch_equals_the_oracle_after_everything_and_daily_rows_add_up(
    log: list[Event], published_log: Settings, spark: SparkSession
) -> None:
    cutoff = _final_cutoff(log, published_log.bucket_ms)  # equal to the watermark: closed
    result = run_batch(published_log, cutoff, run_id="full", spark=spark)

    baseline = current_baseline(published_log.baselines_dir)
    assert baseline is not None
    assert baseline.rows == oracle_rows(log, None)
    assert result.events_read == len(log)

    daily = pq.read_table(daily_path(published_log, "full"))
    assert set(daily.column("run_id").to_pylist()) == {"full"}
    assert set(daily.column("rules_version").to_pylist()) == {bots.SHIPPED.version}
    for column in ("views", "likes", "dislikes", "short_views", "repeat_views"):
        per_video = daily.group_by("video_id").aggregate([(column, "sum")])
        summed = dict(
            zip(per_video["video_id"].to_pylist(), per_video[f"{column}_sum"].to_pylist(), strict=True)
        )
        assert summed == {v: getattr(row, column) for v, row in baseline.rows.items()}, column
    assert pc.sum(daily["unique_viewers"]).as_py() >= sum(r.unique_viewers for r in baseline.rows.values())


def test_runs_are_idempotent(published_log: Settings, spark: SparkSession) -> None:
    first = run_batch(published_log, MID_CUTOFF, spark=spark)
    second = run_batch(published_log, MID_CUTOFF, spark=spark)
    again = run_batch(published_log, MID_CUTOFF, run_id=second.run_id, spark=spark)

    assert first.run_id != second.run_id
    tables = [pq.read_table(baseline_path(published_log, r.run_id)) for r in (first, second, again)]
    assert tables[0].num_rows > 0
    assert tables[0].equals(tables[1])
    assert tables[1].equals(tables[2])
    dailies = [
        pq.read_table(daily_path(published_log, r.run_id)).drop_columns(["run_id"]) for r in (first, second)
    ]
    assert dailies[0].equals(dailies[1])
    keys_in_file = list(zip(dailies[0]["date"].to_pylist(), dailies[0]["video_id"].to_pylist(), strict=True))
    assert keys_in_file == sorted(set(keys_in_file))  # one row per (date, video), in that order
    video_ids = tables[0]["video_id"].to_pylist()
    assert video_ids == sorted(set(video_ids), key=str.encode)  # the byte order of the ids


def test_per_bucket_series_equals_the_oracle(
    published_log: Settings, spark: SparkSession, log: list[Event]
) -> None:
    settings = published_log
    cutoff = _final_cutoff(log, settings.bucket_ms)
    result = run_batch(settings, cutoff, spark=spark)

    table = pq.read_table(series_path(settings, result.run_id)).to_pylist()
    keys_in_file = [(r["video_id"], r["bucket"]) for r in table]
    assert keys_in_file == sorted(set(keys_in_file))  # one row per (video, bucket), in that order
    got = {(r["video_id"], r["bucket"]): (r["views"], r["rejected"], r["short_views"]) for r in table}

    want: dict[tuple[str, int], list[int]] = {}
    for event, outcome, _ in oracle.view_outcomes(oracle.dedup(log, cutoff)):
        slot = want.setdefault((event.video_id, (event.ingest_ts or 0) // settings.bucket_ms), [0, 0, 0])
        slot[0] += outcome == oracle.COUNTED
        slot[1] += outcome == oracle.REJECTED
        slot[2] += outcome == oracle.SHORT
    assert got == {key: tuple(value) for key, value in want.items()}
