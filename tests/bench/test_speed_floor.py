"""`bench.speed_floor` and `bench.speed_layer`'s readers against a real broker and a real Redis, on
`bench.speed_traffic`'s events."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from bench import speed_floor, speed_layer, speed_traffic
from counting.event import Event
from counting.settings import Settings
from counting.wire import decode_events
from tally.topics import ensure_topics

# serial: the readers measure rates, the benchmark times its counter against them, and a reader
# stops after IDLE_LIMIT_S without a record: alone on the machine.
pytestmark = [pytest.mark.integration, pytest.mark.serial]

PARTITIONS = 4


@pytest.fixture
def filled(broker: str, settings: Settings) -> tuple[str, list[Event], list[tuple[int, bytes, bytes]]]:
    """A topic of the test's own holding 3,000 bench events (retries among them), as the API packs them."""
    topic = settings.events_topic
    ensure_topics(settings.model_copy(update={"kafka_bootstrap": broker, "topic_partitions": PARTITIONS}))
    now = int(time.time() * 1000)
    events = speed_traffic.generate(3_000, 50, 600, 7, now - 3_600_000, 50_000.0)
    records = speed_traffic.pack(events, PARTITIONS, {})
    speed_traffic.fill(broker, topic, records)
    return topic, events, records


def first_copies(records: list[tuple[int, bytes, bytes]]) -> dict[int, dict[bytes, bytes]]:
    """Per partition, each event id with the ingest time of its first copy in that partition."""
    out: dict[int, dict[bytes, bytes]] = {}
    for partition, _, value in records:
        markers = out.setdefault(partition, {})
        for event in decode_events(value):
            markers.setdefault(event.event_id.encode(), str(event.ingest_ts).encode())
    return out


def test_the_floor_sets_one_marker_an_event_and_stores_the_offsets(
    broker: str, redis_client: redis.Redis, redis_url: str, filled: tuple[str, list[Event], list]
) -> None:
    topic, events, records = filled
    expected = first_copies(records)
    assert sum(len(m) for m in expected.values()) < len(events)  # the traffic holds retries

    result = speed_floor.exactly_once_floor(broker, topic, PARTITIONS, len(events), redis_url)

    assert result["events"] == len(events)
    assert result["markers"] == sum(len(m) for m in expected.values())
    for partition, markers in expected.items():
        offset_key, markers_key = speed_floor.marker_keys(topic, partition)
        assert redis_client.hgetall(markers_key) == markers
        assert int(redis_client.get(offset_key) or -1) == sum(1 for p, _, _ in records if p == partition) - 1
    assert result["events_per_s"] > 0 and result["redis_cpu_us_per_event"] > 0


def test_a_replayed_floor_run_is_skipped_by_its_stored_offsets(
    broker: str, redis_client: redis.Redis, redis_url: str, filled: tuple[str, list[Event], list]
) -> None:
    topic, events, _ = filled
    speed_floor.exactly_once_floor(broker, topic, PARTITIONS, len(events), redis_url)
    markers = [speed_floor.marker_keys(topic, p)[1] for p in range(PARTITIONS)]
    redis_client.delete(*markers)  # only the offsets remain to tell the batches were written

    again = speed_floor.exactly_once_floor(broker, topic, PARTITIONS, len(events), redis_url)

    assert again["events"] == len(events) and again["markers"] == 0
    assert redis_client.exists(*markers) == 0


def test_the_floor_with_markers_in_memory_logs_each_first_copy_once_and_stores_the_offsets(
    broker: str,
    redis_client: redis.Redis,
    redis_url: str,
    filled: tuple[str, list[Event], list],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, events, records = filled
    expected = first_copies(records)
    monkeypatch.setattr(speed_floor, "POLL_RECORDS", 1)  # a batch a record: retries cross batches

    result = speed_floor.exactly_once_floor(broker, topic, PARTITIONS, len(events), redis_url, "memory")

    assert result["events"] == len(events)
    assert result["markers"] == sum(len(m) for m in expected.values())
    for partition, markers in expected.items():
        offset_key, log_key = speed_floor.marker_keys(topic, partition, "memory")
        blobs = [blob.split(b"\n") for blob in redis_client.lrange(log_key, 0, -1)]
        ids = [event_id for blob in blobs for event_id in blob[1:]]
        assert set(ids) == set(markers)
        assert len(ids) == len(markers)  # no id logged twice, though retries share a partition
        for blob in blobs:  # each blob is stamped with the latest ingest time of its first copies
            assert int(blob[0]) >= max(int(markers[event_id]) for event_id in blob[1:])
        assert int(redis_client.get(offset_key) or -1) == sum(1 for p, _, _ in records if p == partition) - 1
    assert redis_client.exists(speed_floor.marker_keys(topic, 0, "redis")[1]) == 0


def test_a_replayed_memory_floor_run_logs_nothing_again(
    broker: str, redis_client: redis.Redis, redis_url: str, filled: tuple[str, list[Event], list]
) -> None:
    topic, events, _ = filled
    first = speed_floor.exactly_once_floor(broker, topic, PARTITIONS, len(events), redis_url, "memory")
    logs = [speed_floor.marker_keys(topic, p, "memory")[1] for p in range(PARTITIONS)]
    lengths = [redis_client.llen(log) for log in logs]

    again = speed_floor.exactly_once_floor(broker, topic, PARTITIONS, len(events), redis_url, "memory")

    assert first["markers"] > 0 and again["markers"] == 0
    assert [redis_client.llen(log) for log in logs] == lengths


def test_the_floor_refuses_an_unknown_marker_place_by_name(broker: str, redis_url: str) -> None:
    refused = r"markers_in='disk': the floor keeps markers in one of \('redis', 'memory'\)"
    with pytest.raises(ValueError, match=refused):
        speed_floor.exactly_once_floor(broker, "any", PARTITIONS, 1, redis_url, "disk")


def test_the_plain_consumer_decodes_every_event(broker: str, filled: tuple[str, list[Event], list]) -> None:
    topic, events, _ = filled

    result = speed_layer.plain_consumer(broker, topic, PARTITIONS, len(events))

    assert result["events"] == len(events)
    assert result["events_per_s"] > 0


def test_the_benchmark_reports_every_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speed_layer, "RESULTS", tmp_path)

    result = speed_layer.main(["--events", "200000", "--videos", "200"])

    for scenario in ("uniform", "one_video"):
        figures = result["scenarios"][scenario]
        assert figures["plain_consumer"]["events"] == 200_000
        assert len(figures["plain_consumer"]["runs_events_per_s"]) == speed_layer.PLAIN_RUNS
        assert figures["floor"]["events"] == 200_000
        assert 190_000 < figures["floor"]["markers"] < 200_000  # 2 % retries share their event's marker
        assert 0 < figures["counter"]["timed_events"] < 200_000
        assert figures["plain_consumer"]["broker_cpu_us_per_event"] > 0
        assert figures["floor"]["broker_cpu_us_per_event"] > 0
        assert figures["floor_markers_in_memory"]["events"] == 200_000
        assert figures["floor_markers_in_memory"]["markers"] == figures["floor"]["markers"]
        by_command = figures["counter"]["redis_cpu_us_per_event_by_command"]
        assert by_command["evalsha"] > 0  # the commit and the sink are scripts
        by_key = figures["counter"]["redis_bytes_per_event_by_key"]
        assert by_key["tally:{}:reactions"] > 0  # the reaction histories of every video, one kind
        assert not any(char.isdigit() for kind in by_key for char in kind)
        assert "tally:{}:log" in by_key
        assert figures["ratio"] == round(
            figures["counter"]["events_per_s"] / figures["plain_consumer"]["events_per_s"], 3
        )
    state = result["scenarios"]["uniform"]["counter"]
    assert result["worker_bytes_per_event"] == state["worker_bytes_per_event"]
    assert result["restore_s"] == state["restore_max_partition_s"] > 0
    assert json.loads((tmp_path / "speed_layer.json").read_text()) == json.loads(json.dumps(result))


def test_readers_expecting_more_events_than_the_topic_holds_stop_with_an_error(
    broker: str, redis_url: str, filled: tuple[str, list[Event], list], monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, events, _ = filled
    monkeypatch.setattr(speed_floor, "IDLE_LIMIT_S", 2.0)

    with pytest.raises(RuntimeError, match=f"no record from topic '{topic}' for 2 s"):
        speed_layer.plain_consumer(broker, topic, PARTITIONS, len(events) + 1)
    with pytest.raises(RuntimeError, match="check that the broker is up"):
        speed_floor.exactly_once_floor(broker, topic, PARTITIONS, len(events) + 1, redis_url)
