"""The serving API on a real Redis Cluster (`TALLY_REDIS_CLUSTER=1`). The counter cannot write to a
cluster yet (issue 26: its one atomic script spans many slots), so the real counter writes a single
Redis and every key it wrote is then moved into the cluster unchanged (DUMP and RESTORE, with its
time to live): each route must answer on the cluster what it answers on the single Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from counting import oracle
from counting.catalog import CatalogRow
from counting.settings import Settings
from serving_layer.app import create_app
from speed_layer.state.partition import EXACT_VIEWERS_LIMIT
from tests.serving_layer.conftest import Events
from tests.speed_layer.helpers import Traffic
from tests.writers import Writers, closed_bucket
from warehouse.migrate import migrate
from warehouse.store import open_store, upsert_catalog

pytestmark = [pytest.mark.integration, pytest.mark.slow]
VIDEOS = [f"vid{i}" for i in range(6)]


def _copy_into(source: redis.Redis, cluster: redis.RedisCluster) -> int:
    """Every Tally key of `source` into `cluster`, value and expiry unchanged; how many."""
    moved = 0
    for name in source.scan_iter(match="tally:*", count=1000):
        dumped = source.dump(name)
        ttl = int(source.pttl(name))
        if dumped is None or ttl == -2:
            continue
        cluster.restore(name, max(ttl, 0), dumped, replace=True)
        moved += 1
    return moved


# The traffic's views reach back 90 minutes, past this window (33 minutes of 2 s buckets): its edge
# moves through them while the test reads, so each windowed read is compared within one bucket.
WINDOW_BUCKETS = 1_000


def _windowed(
    single: TestClient, clustered: TestClient, url: str, bucket_ms: int, **params: int
) -> list[dict[str, Any]]:
    """One windowed route read on both apps within the same bucket: a window ends at the current
    bucket, so a read that crossed a bucket's edge between the two apps is made again."""
    for _ in range(5):
        pair = [api.get(url, params=params).json() for api in (single, clustered)]
        if len({answer["as_of"] // bucket_ms for answer in pair}) == 1:
            for answer in pair:
                answer.pop("as_of")
            return pair
    raise AssertionError(f"{url}: five reads in a row crossed a bucket's edge")


def _answers(single: TestClient, clustered: TestClient, bucket_ms: int) -> tuple[list[Any], list[Any]]:
    """Every read route's answers from the single Redis's app and from the cluster's."""
    stats = [[api.get(f"/v1/videos/{video}/stats").json() for video in VIDEOS] for api in (single, clustered)]
    for answers in stats:
        for answer in answers:  # when each process read it: not a count
            answer.pop("as_of", None)
    trending = _windowed(single, clustered, "/v1/trending", bucket_ms, window_buckets=WINDOW_BUCKETS)
    velocity = [
        api.get("/v1/trending", params={"window_buckets": 10, "by": "velocity"}).status_code
        for api in (single, clustered)
    ]
    ranks = [
        _windowed(single, clustered, f"/v1/videos/{video}/rank", bucket_ms, window_buckets=WINDOW_BUCKETS)
        for video in VIDEOS
    ]
    single_side, cluster_side = (
        [stats[side], trending[side]["videos"], velocity[side], [pair[side]["rank"] for pair in ranks]]
        for side in (0, 1)
    )
    return single_side, cluster_side


def test_every_read_route_answers_on_the_cluster_as_on_a_single_redis(
    settings: Settings, redis_client: redis.Redis, tally: Writers, redis_cluster_url: str
) -> None:
    events = Traffic(seed=26).mixed(videos=len(VIDEOS), n=400)
    tally.start()
    tally.ingest(events)
    tally.count()

    cluster = redis.RedisCluster.from_url(redis_cluster_url)
    cluster.flushall()
    try:
        assert _copy_into(redis_client, cluster) > 50
        on_cluster = settings.model_copy(update={"redis_url": redis_cluster_url, "redis_cluster": True})
        with TestClient(create_app(settings)) as single, TestClient(create_app(on_cluster)) as clustered:
            expected, answered = _answers(single, clustered, settings.bucket_ms)
    finally:
        cluster.flushall()
        cluster.close()

    assert answered == expected
    counts = oracle.count(events)
    assert [s["views"] for s in answered[0]] == [counts[v].views for v in VIDEOS]
    assert answered[1] and all(rank is not None for rank in answered[3])
    assert answered[2] == 200


def test_a_creators_reach_past_the_exact_sets_answers_on_the_cluster_as_on_a_single_redis(
    settings: Settings, redis_client: redis.Redis, tally: Writers, redis_cluster_url: str
) -> None:
    """A video past EXACT_VIEWERS_LIMIT keeps only a HyperLogLog of its viewers: the creator's reach
    unites it with the others' (copies of the sketches under one scratch tag on the cluster)."""
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, [CatalogRow("big", "c1", 600.0, True), CatalogRow("small", "c1", 600.0, True)])
    e = Events(settings.bucket_ms, prefix="reach")
    c = closed_bucket(settings)
    many = [f"m{n}" for n in range(EXACT_VIEWERS_LIMIT + 40)]
    events = [*e.views("big", c, *many), *e.views("small", c, *many[:10], *(f"s{n}" for n in range(20)))]
    tally.start()
    tally.ingest(events)
    tally.count()

    cluster = redis.RedisCluster.from_url(redis_cluster_url)
    cluster.flushall()
    try:
        _copy_into(redis_client, cluster)
        on_cluster = settings.model_copy(update={"redis_url": redis_cluster_url, "redis_cluster": True})
        with TestClient(create_app(settings)) as single, TestClient(create_app(on_cluster)) as clustered:
            expected = single.get("/v1/creators/c1/stats").json()
            answered = clustered.get("/v1/creators/c1/stats").json()
        assert not cluster.keys("tally:{reach:*")  # the scratch copies are gone
    finally:
        cluster.flushall()
        cluster.close()

    for answer in (expected, answered):
        answer.pop("as_of", None)
    assert answered == expected
    exact = oracle.creator_counts(events, {"big": "c1", "small": "c1"})["c1"].unique_viewers
    assert exact == len(many) + 20 and answered["approx"] is True
    assert abs(answered["unique_viewers"] - exact) <= 0.02 * exact
