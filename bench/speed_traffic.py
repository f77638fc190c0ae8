"""The speed-layer benchmarks' traffic: a fixed mix of stamped events, one ingest time per request
of REQUEST_EVENTS, packed into records as the ingest API packs them.

The mix is fixed on purpose (counted-length, short and scripted views, heartbeats, reactions and
retries at set shares, over Zipf-popular videos): the counter's throughput is compared across runs
and with one video taking all traffic, and `counting.traffic`'s simulation makes about 40,000
events a second where these benchmarks need millions. Who sends (home addresses, browser and
scripted agents) and the videos' popularity come from `counting.traffic` and its catalog."""

from __future__ import annotations

import random
from dataclasses import dataclass

import msgspec
from confluent_kafka import Producer

from counting.catalog import make_catalog
from counting.event import Event
from counting.traffic import BROWSERS, HEADLESS_AGENTS
from counting.traffic_clients import HOME_V4, ipv4, mix
from counting.wire import encode_events, partition_for, record_key
from ingest.publisher import shard_of

REQUEST_EVENTS = 500
ZIPF_EXPONENT = 1.05
VIDEO_DURATION_SECS = 900.0  # every view watched within it: no watch anomaly in the mix


@dataclass(frozen=True)
class Mix:
    """The share of each kind of event (the rest are counted-length views)."""

    short_views: float = 0.08
    heartbeats: float = 0.25
    reactions: float = 0.12
    scripted_views: float = 0.03
    retries: float = 0.02


def generate(
    n: int, videos: int, viewers: int, seed: int, start_ms: int, rate: float, mix_of: Mix = Mix()
) -> list[Event]:
    """`n` stamped events in ingest order: one ingest time per request of REQUEST_EVENTS events,
    requests spaced to reach `rate` events a second, videos drawn with a Zipf-like skew."""
    rng = random.Random(seed)
    catalog = make_catalog(seed, videos, zipf_exponent=ZIPF_EXPONENT)
    names = [row.video_id for row in catalog.rows]
    users = [f"u{i}" for i in range(viewers)]
    addresses = [ipv4(HOME_V4, mix(seed, i, 0xADD)) for i in range(viewers)]
    agents = [agent for agent, _ in BROWSERS]
    out: list[Event] = []
    serial = 0
    cut_short = mix_of.short_views
    cut_beat = cut_short + mix_of.heartbeats
    cut_react = cut_beat + mix_of.reactions
    cut_bot = cut_react + mix_of.scripted_views
    cut_retry = cut_bot + mix_of.retries
    reactions = ("like", "like", "like", "unlike", "dislike")
    while len(out) < n:
        ingest_ts = start_ms + int(len(out) / rate * 1000)
        batch_videos = rng.choices(names, cum_weights=catalog.cumulative, k=REQUEST_EVENTS)
        for video in batch_videos:
            if len(out) >= n:
                break
            roll = rng.random()
            serial += 1
            event_id = f"b{seed}-{serial}"
            person = int(rng.random() * viewers)
            user = users[person]
            ts = ingest_ts - rng.randint(0, 20_000)
            ip = addresses[person]
            if roll < cut_short or cut_react <= roll < cut_bot or roll >= cut_retry:
                watch = rng.uniform(0, 29) if roll < cut_short else rng.uniform(30, 600)
                scripted = cut_react <= roll < cut_bot
                agent = (
                    HEADLESS_AGENTS[serial % len(HEADLESS_AGENTS)]
                    if scripted
                    else agents[person % len(agents)]
                )
                anonymous = rng.random() < 0.3
                out.append(
                    Event(
                        event_id=event_id,
                        type="view",
                        video_id=video,
                        ts=ts,
                        user_id=None if anonymous else user,
                        session_id=f"s-{user}",
                        ip=ip,
                        user_agent=agent,
                        watch_secs=watch,
                        video_duration_secs=VIDEO_DURATION_SECS,
                        ingest_ts=ingest_ts,
                    )
                )
            elif roll < cut_beat:
                out.append(
                    Event(
                        event_id=event_id,
                        type="heartbeat",
                        video_id=video,
                        ts=ts,
                        session_id=f"s-{user}",
                        ingest_ts=ingest_ts,
                    )
                )
            elif roll < cut_react:
                out.append(
                    Event(
                        event_id=event_id,
                        type=rng.choice(reactions),  # type: ignore[arg-type]
                        video_id=video,
                        ts=ts,
                        user_id=user,
                        ingest_ts=ingest_ts,
                    )
                )
            elif out:
                again = out[rng.randrange(max(0, len(out) - 5_000), len(out))]
                out.append(msgspec.structs.replace(again, ingest_ts=ingest_ts))
    return out


def pack(events: list[Event], partitions: int, shards: dict[str, int]) -> list[tuple[int, bytes, bytes]]:
    """(partition, key, value) records as the ingest API writes them: per request, per partition."""
    records: list[tuple[int, bytes, bytes]] = []
    start = 0
    while start < len(events):
        stamp = events[start].ingest_ts
        end = start
        while end < len(events) and events[end].ingest_ts == stamp:
            end += 1
        grouped: dict[int, tuple[bytes, list[Event]]] = {}
        for event in events[start:end]:
            key = record_key(event.video_id, shard_of(event, shards.get(event.video_id, 1)))
            partition = partition_for(key, partitions)
            grouped.setdefault(partition, (key, []))[1].append(event)
        for partition, (key, batch) in sorted(grouped.items()):
            records.append((partition, key, encode_events(batch)))
        start = end
    return records


def fill(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    """Produce the records to `topic` (acks=all) and wait until the broker has every one."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for partition, key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError("the broker did not acknowledge every benchmark record")
