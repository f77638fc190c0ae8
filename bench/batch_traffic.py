"""A vectorised (numpy/Arrow) log generator for the batch benchmark: millions of rows a second
where `counting.traffic` makes about 40,000 events a second. It is not the simulation of
`counting.traffic`; it makes rows that exercise every rule: human views (short, repeated within
their window, late), heartbeats, reaction churn, retries, and the bot kinds (headless agents,
data-centre addresses IPv4 and IPv6, bad TLS fingerprints, watch anomalies, address-velocity
bursts, replay loops). Rows are written in the archiver's hive layout.

The pieces are `counting.traffic`'s: its catalog (videos, durations, Zipf popularity), its home and
data-centre addresses, its browser and headless agents with their TLS fingerprints; only the
mixing of them into rows is columnar here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from counting import bots, rules
from counting.catalog import make_catalog
from counting.logschema import LOG_COLUMNS
from counting.traffic import BROWSERS, DEFAULT_START_MS, HEADLESS_AGENTS
from counting.traffic_clients import datacenter_address, home_address, mix
from speed_layer.archiver.archiver import file_name, write_log_file

_ARROW = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}
LOG_SCHEMA = pa.schema([(name, _ARROW[kind]) for name, kind in LOG_COLUMNS])
HOUR_MS = 3_600_000
PARTITIONS = 4

# Shares of the rows (before retries): what kind of event a row is.
_HEARTBEAT, _REACTION = 0.28, 0.08
_HEADLESS, _DATACENTER, _VELOCITY, _REPLAY = 0.03, 0.03, 0.03, 0.03
_RETRY = 0.02
_BOUNCE, _REWATCH, _LATE, _ANON, _NO_DURATION = 0.22, 0.08, 0.03, 0.3, 0.05


@dataclass(frozen=True)
class BenchTraffic:
    """What to write: `events` rows (retries included) ingested over `span_ms` from `start_ms`."""

    events: int
    seed: int = 0
    span_ms: int = 24 * HOUR_MS
    start_ms: int = DEFAULT_START_MS
    chunk: int = 1_000_000

    @property
    def videos(self) -> int:
        return int(min(20_000, max(200, self.events // 1_000)))

    @property
    def viewers(self) -> int:
        return int(max(2_000, self.events // 10))


def _strings(prefix: str, numbers: np.ndarray, *more: tuple[str, np.ndarray]) -> pa.Array:
    parts: list[object] = [prefix, pc.cast(pa.array(numbers), pa.string())]
    for text, values in more:
        parts += [text, pc.cast(pa.array(values), pa.string())]
    return pc.binary_join_element_wise(*parts, "")


def _home_addresses(count: int, seed: int) -> pa.Array:
    """The home addresses of `count` households, as `counting.traffic` gives them (a quarter IPv6)."""
    return pa.array([home_address(seed, household) for household in range(count)])


def _datacenter_addresses(count: int, seed: int) -> pa.Array:
    """`count` data-centre addresses, as `counting.traffic` gives them; one IPv4 address in seven
    written IPv4-mapped (judged as its IPv4 address)."""
    out = []
    for i in range(count):
        text = datacenter_address(mix(seed, i, 0xDC))
        out.append(f"::ffff:{text}" if i % 7 == 0 and ":" not in text else text)
    return pa.array(out)


class LogWriter:
    """Writes row batches into `raw/ingest_date=/ingest_hour=/` files, one per hour, Kafka partition
    and chunk, named as the archiver names them: by the first and last offsets they hold."""

    def __init__(self, raw_dir: Path) -> None:
        self.raw_dir = raw_dir
        self.files = 0

    def write(self, table: pa.Table, chunk: int) -> None:
        hours = pc.divide(table["ingest_ts"], HOUR_MS).to_numpy()
        parts = table["kafka_partition"].to_numpy()
        keys = hours * PARTITIONS + parts
        order = np.argsort(keys, kind="stable")
        table, keys = table.take(pa.array(order)), keys[order]
        edges = np.flatnonzero(np.diff(keys)) + 1
        for begin, end in zip(np.r_[0, edges], np.r_[edges, len(keys)], strict=True):
            key = int(keys[begin])
            moment = datetime.fromtimestamp(key // PARTITIONS * HOUR_MS / 1000, tz=UTC)
            folder = self.raw_dir / f"ingest_date={moment:%Y-%m-%d}" / f"ingest_hour={moment:%H}"
            folder.mkdir(parents=True, exist_ok=True)
            rows = table.slice(begin, end - begin)
            offsets = pc.min_max(rows["kafka_offset"])
            name = file_name("events", key % PARTITIONS, offsets["min"].as_py(), offsets["max"].as_py())
            write_log_file(rows, folder / name)
            self.files += 1


def in_archiver_order(table: pa.Table) -> pa.Table:
    """Log rows in ingestion order with the offsets a broker gives them: each partition's rows
    numbered from 0 in that order (so the files of successive flushes span successive offsets)."""
    table = table.sort_by([("ingest_ts", "ascending"), ("kafka_partition", "ascending")])
    parts = table["kafka_partition"].to_numpy()
    offsets = np.empty(len(parts), dtype=np.int64)
    for partition in np.unique(parts):
        mine = parts == partition
        offsets[mine] = np.arange(int(mine.sum()))
    return table.set_column(table.schema.get_field_index("kafka_offset"), "kafka_offset", pa.array(offsets))


def write_bench_log(
    raw_dir: Path, config: BenchTraffic, progress: Callable[[int], None] | None = None
) -> int:
    """Write `config.events` log rows under `raw_dir`; return the number of files written."""
    rng = np.random.default_rng([config.seed, 0xBE7C])
    videos, viewers = config.videos, config.viewers
    catalog = make_catalog(config.seed, videos)
    video_ids = pa.array([row.video_id for row in catalog.rows])
    popularity = np.array(catalog.cumulative) / catalog.cumulative[-1]
    durations = np.array([row.duration_secs for row in catalog.rows])
    user_ids = _strings("u", np.arange(viewers))
    homes = _home_addresses(max(1, viewers * 5 // 6), config.seed)
    datacenter = _datacenter_addresses(2_000, config.seed)
    agents = pa.array([agent for agent, _ in BROWSERS] + list(HEADLESS_AGENTS))
    fingerprints = pa.array([ja3 for _, ja3 in BROWSERS] + sorted(bots.SHIPPED.bad_ja3))
    writer = LogWriter(raw_dir)
    made = 0
    chunk = 0
    base_total = int(config.events / (1 + _RETRY))
    slice_ms = config.span_ms * config.chunk / max(base_total, 1)
    while made < config.events:
        n = min(config.chunk, base_total - chunk * config.chunk)
        if n <= 0:
            break
        begin = config.start_ms + int(chunk * slice_ms)
        table = _chunk(rng, n, begin, int(slice_ms * n / config.chunk), chunk, config)
        table = _fill(
            table, rng, video_ids, popularity, durations, user_ids, homes, datacenter, agents, fingerprints
        )
        retries = rng.random(n) < _RETRY * config.events / base_total
        copies = table.filter(pa.array(retries))
        later = rng.integers(0, 3_000, len(copies))
        later[rng.random(len(copies)) < 0.1] = 0  # some copies share the millisecond
        copies = copies.set_column(
            copies.schema.get_field_index("ingest_ts"),
            "ingest_ts",
            pa.array(copies["ingest_ts"].to_numpy() + later),
        )
        table = pa.concat_tables([table, copies]).slice(0, config.events - made)
        offsets = np.arange(made, made + len(table))
        table = table.set_column(
            table.schema.get_field_index("kafka_offset"), "kafka_offset", pa.array(offsets)
        )
        writer.write(table.select(LOG_SCHEMA.names).cast(LOG_SCHEMA), chunk)
        made += len(table)
        chunk += 1
        if progress is not None:
            progress(made)
    return writer.files


def _chunk(
    rng: np.random.Generator, n: int, begin: int, span: int, chunk: int, config: BenchTraffic
) -> dict[str, np.ndarray]:
    """The numeric skeleton of one chunk: kinds, times, and who acts."""
    kinds = rng.choice(
        7,
        n,
        p=[
            1 - _HEARTBEAT - _REACTION - _HEADLESS - _DATACENTER - _VELOCITY - _REPLAY,
            _HEARTBEAT,
            _REACTION,
            _HEADLESS,
            _DATACENTER,
            _VELOCITY,
            _REPLAY,
        ],
    )
    ingest = np.sort(begin + rng.integers(0, max(span, 1), n))
    delay = rng.integers(15, 400, n)
    late = rng.random(n) < _LATE
    delay[late] = rng.integers(2 * 60_000, 6 * HOUR_MS, late.sum())
    return {
        "kind": kinds,
        "ingest_ts": ingest,
        "ts": ingest - delay,
        "index": np.arange(n) + chunk * config.chunk,
        "viewer": (config.viewers * rng.random(n) ** 1.5).astype(np.int64),
        "pick": rng.random(n),
        "u": rng.random(n),
    }


def _fill(
    raw: dict[str, np.ndarray],
    rng: np.random.Generator,
    video_ids: pa.Array,
    popularity: np.ndarray,
    durations: np.ndarray,
    user_ids: pa.Array,
    homes: pa.Array,
    datacenter: pa.Array,
    agents: pa.Array,
    fingerprints: pa.Array,
) -> pa.Table:
    """The log columns of one chunk."""
    kind, ts, viewer, n = raw["kind"], raw["ts"].copy(), raw["viewer"], len(raw["kind"])
    human_view, heartbeat, reaction = kind == 0, kind == 1, kind == 2
    headless, dc, velocity, replay = kind == 3, kind == 4, kind == 5, kind == 6
    bot = headless | dc | velocity | replay
    video = np.minimum(np.searchsorted(popularity, raw["pick"]), len(popularity) - 1)
    # a human re-watches: the (viewer, video) of an earlier row, a minute later (same window mostly)
    rewatch = np.flatnonzero(human_view & (rng.random(n) < _REWATCH))
    source = np.maximum(rewatch - rng.integers(1, 50, len(rewatch)), 0)
    viewer, video = viewer.copy(), video.copy()
    viewer[rewatch], video[rewatch] = viewer[source], video[source]
    ts[rewatch] = np.maximum(ts[rewatch], ts[source] + 60_000)
    # velocity: bursts of 31..120 views from one address inside one minute
    burst = np.cumsum(velocity) // rng.integers(2 * bots.SHIPPED.max_views_per_address_minute, 90)
    minute_start = (ts // rules.MINUTE_MS) * rules.MINUTE_MS
    first_of_burst = np.zeros(n, dtype=np.int64)
    v_idx = np.flatnonzero(velocity)
    if len(v_idx):
        _, first = np.unique(burst[v_idx], return_index=True)
        starts = minute_start[v_idx][first]
        first_of_burst[v_idx] = starts[np.searchsorted(np.unique(burst[v_idx]), burst[v_idx])]
        ts[v_idx] = first_of_burst[v_idx] + rng.integers(0, rules.MINUTE_MS, len(v_idx))
    # replay: loops of 13..36 views of one video by one account on one day
    loop = np.cumsum(replay) // (bots.SHIPPED.max_replays_per_day + 8)
    r_idx = np.flatnonzero(replay)
    if len(r_idx):
        day_start = (ts[r_idx] // rules.DAY_MS) * rules.DAY_MS
        ts[r_idx] = np.maximum(ts[r_idx], day_start + 1_000)
        video[r_idx] = (loop[r_idx] * 7919) % len(popularity)
    # who: users (some anonymous), sessions, addresses, agents, fingerprints
    anon = (rng.random(n) < _ANON) | headless | velocity | dc
    users = pc.if_else(pa.array(anon), pa.nulls(n, pa.string()), user_ids.take(pa.array(viewer)))
    replay_users = _strings("r", raw["index"] // 1_000_000, ("x", loop))
    users = pc.if_else(pa.array(replay), replay_users, users)
    reaction_users = user_ids.take(pa.array(viewer % max(1, len(user_ids) // 20)))
    users = pc.if_else(pa.array(reaction), reaction_users, users)
    reaction_video = video % min(200, len(popularity))
    video = np.where(reaction, reaction_video, video)
    sessions = _strings("s", viewer, ("-", ts // rules.DAY_MS))
    bot_sessions = _strings("b", raw["index"])
    sessions = pc.if_else(pa.array(headless | velocity | dc), bot_sessions, sessions)
    address = homes.take(pa.array(viewer % len(homes)))
    rotating = _strings("185.", raw["index"] % 200, (".", raw["index"] // 200 % 256), (".", 1 + loop % 250))
    address = pc.if_else(pa.array(headless | replay), rotating, address)
    chunk_no = raw["index"] // 1_000_000
    burst_address = _strings("45.", chunk_no % 256, (".", burst // 250 % 256), (".", 1 + burst % 250))
    address = pc.if_else(pa.array(velocity), burst_address, address)
    address = pc.if_else(pa.array(dc), datacenter.take(pa.array(raw["index"] % len(datacenter))), address)
    agent_of = viewer % len(BROWSERS)
    agent_of = np.where(headless, len(BROWSERS) + raw["index"] % len(HEADLESS_AGENTS), agent_of)
    ja3_of = viewer % len(BROWSERS)
    bad = dc & (raw["u"] < 0.5) | human_view & (raw["u"] < 0.005)
    ja3_of = np.where(bad, len(BROWSERS) + raw["index"] % len(bots.SHIPPED.bad_ja3), ja3_of)
    # what: watch times (bounces, anomalies), reaction types
    duration = durations[video]
    watched = np.minimum(duration * rng.beta(1.6, 1.2, n), rng.exponential(600.0, n))
    bounce = rng.random(n) < _BOUNCE
    watched = np.where(bounce, rng.uniform(1.0, rules.MIN_WATCH_SECS - 0.1, n), watched)
    watched = np.where(bot, rng.uniform(rules.MIN_WATCH_SECS, 300.0, n), watched)
    anomaly = dc & (raw["u"] > 0.7) | human_view & ((raw["u"] > 0.998) | (raw["u"] < 0.002))
    overrun = duration * bots.SHIPPED.watch_overrun_factor + bots.SHIPPED.watch_overrun_slack_secs + 30.0
    watched = np.where(anomaly, overrun, watched)
    watched = np.maximum(1.0, watched).round(1)
    is_view = ~(heartbeat | reaction)
    duration_known = is_view & (rng.random(n) >= _NO_DURATION)
    types = np.array(["view", "heartbeat", "like", "unlike", "dislike", "undislike"])
    reaction_type = rng.choice([2, 3, 4, 5], n, p=[0.6, 0.2, 0.15, 0.05])
    type_of = np.where(heartbeat, 1, np.where(reaction, reaction_type, 0))
    partition = video % PARTITIONS
    return pa.table(
        {
            "event_id": _strings("e", raw["index"]),
            "type": pa.array(types[type_of]),
            "video_id": video_ids.take(pa.array(video)),
            "user_id": users,
            "session_id": pc.if_else(pa.array(reaction), pa.nulls(n, pa.string()), sessions),
            "ts": pa.array(ts),
            "ip": address,
            "user_agent": agents.take(pa.array(agent_of)),
            "watch_secs": pa.array(np.where(is_view, watched, np.nan), mask=~is_view),
            "video_duration_secs": pa.array(duration, mask=~duration_known),
            "ja3": fingerprints.take(pa.array(ja3_of)),
            "ingest_ts": pa.array(raw["ingest_ts"]),
            "kafka_partition": pa.array(partition.astype(np.int64)),
            "kafka_offset": pa.array(np.zeros(n, dtype=np.int64)),
        }
    )
