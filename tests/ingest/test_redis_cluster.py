"""The ingest API on a real Redis Cluster (`TALLY_REDIS_CLUSTER=1`): rate limits, acknowledged
reactions and the hot videos' shard counts reach the node of each key's slot."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from fastapi.testclient import TestClient

from counting import redisconn
from counting.event import Event
from counting.settings import Settings
from counting.wire import decode_events
from ingest.app import create_app
from ingest.auth import issue_token
from serving_layer.reactions import read_user_reaction
from tally.topics import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
VIDEOS = [f"v{n:03d}" for n in range(12)]  # their keys fall in the slots of every master


@pytest.fixture
def cluster_settings(settings: Settings, broker: str, redis_cluster_url: str) -> Settings:
    configured = settings.model_copy(
        update={"kafka_bootstrap": broker, "redis_url": redis_cluster_url, "redis_cluster": True}
    )
    ensure_topics(configured)
    return configured


def _written(settings: Settings, expected: int, timeout: float = 15.0) -> list[Event]:
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(settings.events_topic, p, 0) for p in range(settings.topic_partitions)])
    events: list[Event] = []
    deadline = time.monotonic() + timeout
    while len(events) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            events.extend(decode_events(message.value()))
    consumer.close()
    return events


def _as(settings: Settings, user: str) -> dict[str, str]:
    return {"authorization": f"Bearer {issue_token(settings.user_token_secret, user, 600)}"}


def test_likes_are_acknowledged_and_read_back_across_the_clusters_slots(
    cluster_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    liker, viewer = _as(cluster_settings, "u1"), _as(cluster_settings, "u2")
    view = {"session_id": "s2", "watch_secs": 40.0}
    with caplog.at_level(logging.WARNING), TestClient(create_app(cluster_settings)) as api:
        answers = [api.post(f"/v1/videos/{video}/like", headers=liker) for video in VIDEOS]
        answers += [api.post(f"/v1/videos/{video}/view", json=view, headers=viewer) for video in VIDEOS]
    assert [a.status_code for a in answers] == [202] * (2 * len(VIDEOS)), [a.text for a in answers]
    written = _written(cluster_settings, 2 * len(VIDEOS))
    assert sorted((e.video_id, e.type) for e in written) == sorted(
        [(v, "like") for v in VIDEOS] + [(v, "view") for v in VIDEOS]
    )
    # No Redis call of the write path failed on the cluster (a cross-slot command would be logged
    # and fall back: shards read as one, rate limits not applied, reactions not recorded).
    assert [r.getMessage() for r in caplog.records if r.name.startswith("tally.ingest")] == []

    async def read_back() -> list[str]:
        client = redisconn.async_client(cluster_settings)
        try:
            return [(await read_user_reaction(client, video, "u1"))[0] for video in VIDEOS]
        finally:
            await client.aclose()

    assert asyncio.run(read_back()) == ["liked"] * len(VIDEOS)


def test_the_rate_limit_holds_on_the_cluster(cluster_settings: Settings) -> None:
    limited = cluster_settings.model_copy(update={"rate_limit_user_per_min": 3})
    with TestClient(create_app(limited)) as api:
        codes = [
            api.post(f"/v1/videos/{video}/like", headers=_as(limited, "u9")).status_code
            for video in VIDEOS[:5]
        ]
        other = api.post("/v1/videos/v000/like", headers=_as(limited, "u10")).status_code
    assert (codes, other) == ([202, 202, 202, 429, 429], 202)
