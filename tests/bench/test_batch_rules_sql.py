"""The DuckDB rules query of the benchmark equals `counting.oracle.count` on the same log files: on
generated traffic with the rules' edge cases, and on the batch benchmark's own columnar log.
(`tests/bench/test_batch_layer.py` checks that Spark equals DuckDB on that log.)"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from bench.batch_rules import count_videos, log_relation
from bench.batch_traffic import BenchTraffic, write_bench_log
from counting import bots, oracle
from counting.event import Event
from counting.logschema import EVENT_COLUMNS, LOG_COLUMNS
from counting.traffic import TrafficConfig, generate
from tests.rulesfiles import IMPOSSIBLE_AGENT, agent_and_velocity_views, threshold_gamed_views
from warehouse.baseline import COUNT_COLUMNS, REJECTED_COLUMNS

_ARROW = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}
LOG_SCHEMA = pa.schema([(name, _ARROW[kind]) for name, kind in LOG_COLUMNS])
START = 1_780_272_000_000


def _write(raw_dir: Path, events: Sequence[Event]) -> None:
    """The events as two log files under one hive partition (copies may land in either file)."""
    rows = []
    for offset, event in enumerate(events):
        row: dict[str, object] = {name: None for name, _ in LOG_COLUMNS}
        row.update(msgspec.structs.asdict(event), kafka_partition=offset % 3, kafka_offset=offset)
        rows.append(row)
    folder = raw_dir / "ingest_date=2026-06-01" / "ingest_hour=00"
    folder.mkdir(parents=True)
    for part in range(2):
        pq.write_table(pa.Table.from_pylist(rows[part::2], schema=LOG_SCHEMA), folder / f"e-{part}.parquet")


def _as_rows(counts: dict[str, oracle.VideoCounts]) -> dict[str, dict[str, int]]:
    out = {}
    for video_id, c in counts.items():
        row = {name: getattr(c, name) for name in COUNT_COLUMNS}
        row.update(
            {
                col: c.rejected.get(reason, 0)
                for col, reason in zip(REJECTED_COLUMNS, bots.REASONS, strict=True)
            }
        )
        out[video_id] = row
    return out


def _duckdb_rows(raw_dir: Path, cutoff: int) -> dict[str, dict[str, int]]:
    table = count_videos(duckdb.connect(), log_relation(str(raw_dir / "*" / "*" / "*.parquet")), cutoff)
    return {row.pop("video_id"): row for row in table.to_pylist()}


def _traffic() -> list[Event]:
    config = TrafficConfig(seed=7, videos=40, viewers=400, events=12_000, rate=50.0, bot_fraction=0.25)
    rng = random.Random(3)
    events = []
    for item in generate(config):
        ingest = START + item.send_at_ms
        events.append(msgspec.convert({**item.event, "ingest_ts": ingest}, Event))
        if rng.random() < 0.01:  # a copy ingested in the same millisecond, read from another file
            events.append(msgspec.convert({**item.event, "ingest_ts": ingest}, Event))
    return events


def _edge_cases() -> list[Event]:
    """Address forms, agents, fingerprints and watch times at the edges of the signals."""
    out = []
    ips = ["3.14.15.92", "52.63.255.255", "52.64.0.0", "2600:1f00::7", "2600:1fff:ffff::1", "2600:2000::1"]
    ips += ["::ffff:52.3.4.5", "::ffff:81.2.3.4", "2a05:d000::1:2", "2a05:d07f:ffff::", "2a05:d080::", "::1"]
    ips += ["64:ff9b::3.1.2.3", "159.89.255.255", "159.90.0.0", "fe80::1%eth0", "1:2:3:4:5:6:7:8"]
    agents = ["Mozilla/5.0 HeadlessChrome/131", "a ROBOT here", "the Bot", "curl/8.5", "MyBotty", None, "x"]
    agents += [" \t\u3000", IMPOSSIBLE_AGENT]
    ja3s = [
        *sorted(bots.SHIPPED.bad_ja3)[:2],
        sorted(bots.SHIPPED.bad_ja3)[0].upper(),
        "cd08e31494f9531f560d64c695473da9",
        None,
    ]
    watches: list[tuple[float | None, float | None]] = [(30.0, None), (29.9, 10.0), (40.0, 30.0)]
    watches += [(36.5, 30.0), (36.6, 30.0), (50_000.0, None), (None, None), (43_200.0, None)]
    n = 0
    for ip in [*ips, None]:
        for agent in agents:
            for ja3 in ja3s:
                watch, duration = watches[n % len(watches)]
                n += 1
                out.append(
                    Event(
                        event_id=f"edge-{n:05d}",
                        type="view",
                        video_id=f"edge-{n % 5}",
                        ts=START + n * 7_000,
                        user_id=None if n % 3 else f"eu{n % 11}",
                        session_id=f"es{n % 13}",
                        ip=ip,
                        user_agent=agent,
                        ja3=ja3,
                        watch_secs=watch,
                        video_duration_secs=duration,
                        ingest_ts=START + n * 7_000 + 50,
                    )
                )
    return out


def test_rules_sql_equals_the_oracle_on_generated_traffic(tmp_path: Path) -> None:
    events = (
        _traffic()
        + _edge_cases()
        + threshold_gamed_views(START)
        + agent_and_velocity_views(START + 3_600_000)
    )
    cutoff = max(e.ingest_ts or 0 for e in events) - 60_000
    _write(tmp_path, events)
    expected = _as_rows(oracle.count(events, cutoff))
    actual = _duckdb_rows(tmp_path, cutoff)
    assert sum(r["views"] for r in expected.values()) > 1_000
    # every signal that can be the heaviest of a rejected view shows up: the watch anomaly, the
    # watch ratio and a missing agent only add (each rejects only beside a heavier signal, or an
    # equal one listed first)
    for reason in set(bots.REASONS) - {bots.WATCH_ANOMALY, bots.WATCH_RATIO, bots.MISSING_AGENT}:
        assert sum(r[f"rejected_{reason}"] for r in expected.values()) > 0, reason
    assert actual == expected


def test_rules_sql_equals_the_oracle_on_the_benchmark_log(tmp_path: Path) -> None:
    """The log `bench.batch_layer` times both engines on: every row before the cutoff, as there."""
    traffic = BenchTraffic(events=40_000, seed=11, chunk=10_000)
    write_bench_log(tmp_path, traffic)
    rows = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table(columns=list(EVENT_COLUMNS))
    events = msgspec.convert(rows.to_pylist(), type=list[Event])
    cutoff = traffic.start_ms + traffic.span_ms + 24 * 3_600_000
    expected = _as_rows(oracle.count(events, cutoff))
    actual = _duckdb_rows(tmp_path, cutoff)
    assert 39_000 < len(events) <= 40_000  # retries are drawn: the last chunk may fall a few short
    assert sum(r["views"] for r in expected.values()) > 1_000
    for reason in (bots.SCRIPTED_AGENT, bots.DATACENTER_IP, bots.ADDRESS_VELOCITY, bots.REPLAY_RATE):
        assert sum(r[f"rejected_{reason}"] for r in expected.values()) > 0, reason
    assert actual == expected


@pytest.mark.parametrize(
    "agent",
    [
        "HeadlessChrome",
        "Scrapy/2.11",
        "WebDriver",
        "a bot",
        "bot",
        "robot",
        "Bots",
        "OkHttp/4",
        "Java/17",
        "\u017fpider",  # a long s: RE2 folds case as Python does
    ],
)
def test_scripted_agent_pattern_means_the_same_in_duckdb(agent: str) -> None:
    """DuckDB's RE2 reads the pattern as Python does: `(?i)` and `\\b` included."""
    found = (
        duckdb.connect()
        .execute("select regexp_matches(?, ?)", [agent, bots.SHIPPED.scripted_pattern])
        .fetchall()
    )
    assert found == [(bots.SHIPPED.is_scripted_agent(agent),)]


@pytest.mark.parametrize(
    "agent",
    [
        IMPOSSIBLE_AGENT,
        IMPOSSIBLE_AGENT.replace("Chrome/312", "Chrome/149"),
        "Mozilla/5.0 (Windows NT 11.0; Win64; x64)",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64)",
        "Mozilla/5.0 (Windows NT 6.1; WOW64)",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X; Windows NT 10.0)",
        "Mozilla/5\x01 (X11)",
        "Mozilla/5",
    ],
)
def test_impossible_agent_pattern_means_the_same_in_duckdb(agent: str) -> None:
    found = (
        duckdb.connect()
        .execute("select regexp_matches(?, ?)", [agent, bots.SHIPPED.impossible_pattern])
        .fetchall()
    )
    assert found == [(bots.SHIPPED.is_impossible_agent(agent),)]
