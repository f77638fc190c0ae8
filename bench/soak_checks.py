"""What the soak verifies once the platform has caught up: the counts against the oracle over the
acknowledged events, the Parquet log's missing and doubled rows, and the memory bound.

`bench.soak` reports these figures; `tests/system/test_soak.py` asserts on them."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import httpx
import pyarrow.dataset as ds

from bench.soak_faults import Rig
from bench.soak_load import LoadFigures, MemorySampler
from counting import keys, oracle, redisconn
from counting.event import event_from_dict, stamped
from counting.settings import Settings
from speed_layer.state.partition import PartitionState
from speed_layer.state.partition_store import PartitionStore
from tally.speedview import speed_totals

GROWTH_FACTOR = 1.5
GROWTH_MB = 50.0
STORE_BYTES_PER_EVENT = 1024
STORES = ("broker", "redis")
FIGURES = ("views", "likes", "dislikes", "unique_viewers", "short_views", "repeat_views", "rejected")
WARM_UP_EVENT_ID = "soak-warm-up"


def _served(settings: Settings, videos: list[str]) -> dict[str, dict[str, Any]]:
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}", timeout=10.0) as api:
        return {v: api.get(f"/v1/videos/{v}/stats").json() for v in videos}


def _log_rows(settings: Settings) -> Counter[tuple[str, int]]:
    table = ds.dataset(settings.raw_dir, format="parquet", partitioning="hive").to_table(
        columns=["event_id", "ingest_ts"]
    )
    return Counter(zip(table["event_id"].to_pylist(), table["ingest_ts"].to_pylist(), strict=True))


def _markers(rig: Rig) -> int:
    """Event ids the counter has applied: the markers its partitions' committed states hold."""
    return asyncio.run(_seen_in_committed_states(rig.settings))


async def _seen_in_committed_states(settings: Settings) -> int:
    client = redisconn.async_client(settings)
    try:
        store = PartitionStore(client, settings.events_topic)
        total = 0
        for partition in range(settings.topic_partitions):
            state = PartitionState(settings.bucket_ms, settings.retention_ms, settings.retry_horizon_ms)
            await store.restore(partition, state)
            total += len(state.seen)
        return total
    finally:
        await client.aclose()


def _differences(
    expected: Mapping[str, tuple[int, ...]], actual: Mapping[str, tuple[int, ...]]
) -> dict[str, Any]:
    differing = sorted(v for v in expected.keys() | actual.keys() if expected.get(v) != actual.get(v))
    return {
        "videos_differing": len(differing),
        "examples": {v: {"expected": expected.get(v), "actual": actual.get(v)} for v in differing[:5]},
    }


def check(rig: Rig, load: LoadFigures) -> dict[str, Any]:
    """Compare what the platform counted and archived with the oracle over the acknowledged events."""
    settings = rig.settings
    events = [stamped(event_from_dict(event, ts), ts) for event, ts in load.acked]
    truth = oracle.count(events)
    expected = {
        v: (
            c.views,
            c.likes,
            c.dislikes,
            c.unique_viewers,
            c.short_views,
            c.repeat_views,
            sum(c.rejected.values()),
        )
        for v, c in truth.items()
    }
    speed: dict[str, tuple[int, ...]] = {}
    with rig.client() as client:
        found: set[bytes] = client.smembers(keys.videos_index())
        for video in sorted(expected.keys() | {v.decode() for v in found} - {"warmup"}):
            t = speed_totals(client, video)
            rejected = sum(n for name, n in t.items() if name.startswith("rejected:"))
            fields = ("views", "likes", "dislikes", "uniques", "short_views", "repeat_views")
            speed[video] = (*(t.get(name, 0) for name in fields), rejected)
    time.sleep(settings.serving_cache_ms / 1000 + 0.2)
    answers = _served(settings, sorted(expected))
    served = {v: tuple(int(a[f]) for f in FIGURES[:4]) for v, a in answers.items()}
    log = _log_rows(settings)
    for key in [k for k in log if k[0] == WARM_UP_EVENT_ID]:
        del log[key]
    acked = Counter((event.event_id, event.ingest_ts or 0) for event in events)
    countable = {e.event_id for e in events if e.type != "heartbeat"}
    counted = _markers(rig) - 1  # the warm-up view
    return {
        "events_acknowledged": len(events),
        "event_ids_acknowledged": len({e.event_id for e in events}),
        "countable_ids_acknowledged": len(countable),
        "events_counted": counted,
        "speed_vs_oracle": _differences(expected, speed),
        "served_vs_oracle": _differences({v: e[:4] for v, e in expected.items()}, served),
        "log": {
            "rows": sum(log.values()),
            "missing": sum(max(0, n - log.get(k, 0)) for k, n in acked.items()),
            "doubled": sum(max(0, log.get(k, 0) - n) for k, n in acked.items()),
            "unacknowledged_rows": sum(n for k, n in log.items() if k not in acked),
        },
        "served_degraded_at_end": sum(1 for a in answers.values() if a.get("degraded")),
        "videos": len(expected),
    }


def counts_equal(checked: Mapping[str, Any]) -> bool:
    """Every acknowledged event counted once, every video as the oracle says, nothing lost or
    doubled in the log: the figures of `check` a soak passes on."""
    return bool(
        checked["countable_ids_acknowledged"] == checked["events_counted"]
        and checked["speed_vs_oracle"]["videos_differing"] == 0
        and checked["served_vs_oracle"]["videos_differing"] == 0
        and checked["log"]["missing"] == 0
        and checked["log"]["doubled"] == 0
    )


def memory(sampler: MemorySampler, acknowledged: int) -> tuple[dict[str, Any], bool]:
    """The RSS figures of each process and whether each ended within its bound."""
    figures: dict[str, Any] = {}
    ok = True
    for name in sorted(sampler.start):
        start, end = sampler.start[name], sampler.end.get(name, 0.0)
        bound = start * GROWTH_FACTOR + GROWTH_MB
        if name in STORES:
            bound += acknowledged * STORE_BYTES_PER_EVENT / 2**20
        within = end <= bound
        ok = ok and within
        figures[name] = {
            "start_mb": start,
            "end_mb": end,
            "peak_mb": sampler.peak.get(name, 0.0),
            "bound_mb": round(bound, 1),
            "processes": len(sampler.processes.get(name, ())),
            "within": within,
        }
    return figures, ok


MEMORY_BOUND = (
    f"{GROWTH_FACTOR} x start + {GROWTH_MB:.0f} MB (+ {STORE_BYTES_PER_EVENT} B per "
    "acknowledged event for the broker and Redis)"
)
