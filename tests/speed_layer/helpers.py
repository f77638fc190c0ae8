"""Helpers of the speed-layer tests: a traffic factory, records packed like the ingest API packs
them, readers of the speed layer's Redis state, producing to the broker, worker subprocesses."""

from __future__ import annotations

import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
from confluent_kafka import Producer

from counting import bots, keys, rules
from counting.event import Event
from counting.oracle import VideoCounts
from counting.redisconn import SyncRedis
from counting.settings import Settings
from counting.wire import decode_events, encode_events, partition_for, record_key
from ingest.publisher import shard_of
from speed_layer.deadletter import DeadLetter
from speed_layer.records import Record
from tally.services import stop_process
from tally.stack import settings_env

ROOT = Path(__file__).resolve().parents[2]
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0 Safari/537.36"


@dataclass
class Traffic:
    """Makes stamped events: clean views, short views, window repeats, reactions with churn,
    heartbeats, scripted-agent bots, and retries (the same event_id ingested again later)."""

    seed: int = 7
    now_ms: int = 0
    step_ms: int = 3

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.clock = self.now_ms or int(time.time() * 1000)
        self.serial = 0

    def _next_id(self) -> str:
        self.serial += 1
        return f"e{self.seed}-{self.serial:06d}"

    def _stamp(self) -> int:
        self.clock += self.rng.randint(0, self.step_ms)
        return self.clock

    def event(self, type_: str, video: str, **fields: object) -> Event:
        fields.setdefault("ts", self.clock - self.rng.randint(0, 3 * rules.VIEW_WINDOW_MS))
        return Event(event_id=self._next_id(), type=type_, video_id=video, ingest_ts=self._stamp(), **fields)  # type: ignore[arg-type]

    def view(self, video: str, user: str | None, watch: float = 95.0, **fields: object) -> Event:
        session = fields.pop("session_id", f"s-{user or self.rng.randint(0, 10**6)}")
        fields.setdefault(
            "ip", f"81.{self.rng.randint(0, 255)}.{self.rng.randint(0, 255)}.{self.rng.randint(1, 254)}"
        )
        fields.setdefault("user_agent", BROWSER)
        return self.event(
            "view",
            video,
            user_id=user,
            session_id=session,
            watch_secs=watch,
            video_duration_secs=600.0,
            **fields,
        )

    @staticmethod
    def decode(record: Record) -> list[Event]:
        return decode_events(record.value or b"")

    def retry(self, event: Event) -> Event:
        """The same event sent again (the client did not get the answer): a later ingest_ts."""
        return Event(**{**_as_dict(event), "ingest_ts": self._stamp()})

    def mixed(self, videos: int = 4, users: int = 25, n: int = 400) -> list[Event]:
        names = [f"vid{i}" for i in range(videos)]
        people = [f"u{i}" for i in range(users)]
        out: list[Event] = []
        for _ in range(n):
            video = self.rng.choice(names)
            user = self.rng.choice(people)
            roll = self.rng.random()
            if roll < 0.40:
                out.append(self.view(video, user))
            elif roll < 0.47:
                out.append(self.view(video, None, session_id=f"anon{self.rng.randint(0, 9)}"))
            elif roll < 0.55:
                out.append(self.view(video, user, watch=self.rng.uniform(0, 29.9)))
            elif roll < 0.60:
                out.append(self.view(video, user, user_agent="python-requests/2.31"))
            elif roll < 0.85:
                kind = self.rng.choice(["like", "like", "unlike", "dislike", "undislike"])
                out.append(self.event(kind, video, user_id=user, ts=self.clock - self.rng.randint(0, 10**6)))
            elif roll < 0.93:
                out.append(self.event("heartbeat", video, session_id=f"s-{user}"))
            elif out:
                out.append(self.retry(self.rng.choice(out)))
        return out

    def clean(self, videos: int = 4, users: int = 1_000, n: int = 400) -> list[Event]:
        """Clean traffic (no bot signal fires, even when windows are counted twice): counted,
        short and repeated views, reactions with churn, heartbeats and retries, from logged-in and
        anonymous viewers."""
        rng = self.rng
        names = [f"vid{i}" for i in range(videos)]
        out: list[Event] = []
        for _ in range(n):
            video = rng.choice(names)
            user = f"u{rng.randint(0, users - 1)}"
            roll = rng.random()
            if roll < 0.45:
                out.append(self.view(video, user))
            elif roll < 0.55:
                out.append(self.view(video, None, session_id=f"anon{rng.randint(0, users // 2)}"))
            elif roll < 0.62:
                out.append(self.view(video, user, watch=rng.uniform(0, 29)))
            elif roll < 0.82:
                kind = rng.choice(["like", "like", "unlike", "dislike", "undislike"])
                out.append(self.event(kind, video, user_id=user, ts=self.clock - rng.randint(0, 10**6)))
            elif roll < 0.92:
                out.append(self.event("heartbeat", video, session_id=f"s-{user}"))
            elif out:
                out.append(self.retry(rng.choice(out)))
        return out


def _as_dict(event: Event) -> dict[str, object]:
    return {f: getattr(event, f) for f in event.__struct_fields__}


def pack(
    events: list[Event], partitions: int, topic: str = "t", per_record: int = 5, shards: int = 1
) -> list[Record]:
    """Records as the ingest API makes them: events of one partition packed (in ingest order),
    offsets counted per partition; with `shards`, keyed `video#k` as for a hot video (k by viewer)."""
    pending: dict[int, list[Event]] = {}
    offsets: dict[int, int] = {}
    records: list[Record] = []

    def flush(partition: int) -> None:
        batch = pending.pop(partition, [])
        if batch:
            offset = offsets.get(partition, 0)
            offsets[partition] = offset + 1
            records.append(Record(topic, partition, offset, encode_events(batch)))

    for event in sorted(events, key=lambda e: e.ingest_ts or 0):
        partition = partition_for(record_key(event.video_id, shard_of(event, shards)), partitions)
        pending.setdefault(partition, []).append(event)
        if len(pending[partition]) >= per_record:
            flush(partition)
    for partition in list(pending):
        flush(partition)
    return records


def speed_counts(
    client: redis.Redis, video: str, below_bucket: int | None = None, uniques: str = "uniques"
) -> VideoCounts:
    """The sum of a video's bucket hashes (all, or those below a bucket), as the oracle shapes counts
    (`uniques`: the field of the unique viewers, `g_uniques` with several regions)."""
    totals: Counter[str] = Counter()
    for member in client.zrange(keys.buckets_index(video), 0, -1):
        bucket = int(member)
        if below_bucket is not None and bucket >= below_bucket:
            continue
        fields = client.hgetall(keys.bucket_counts(video, bucket))
        totals.update({k.decode(): int(v) for k, v in fields.items()})
    return VideoCounts(
        views=totals["views"],
        likes=totals["likes"],
        dislikes=totals["dislikes"],
        unique_viewers=totals[uniques],
        rejected={r: totals[f"rejected:{r}"] for r in bots.REASONS if totals[f"rejected:{r}"]},
        short_views=totals["short_views"],
        repeat_views=totals["repeat_views"],
        flagged=totals["flagged"],
    )


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    """Produce (partition, key, value) with acks=all and wait for every acknowledgement."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for partition, key, value in records:
        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert not failures, failures


def produce_events(
    bootstrap: str, settings: Settings, events: list[Event], per_record: int = 5
) -> dict[int, int]:
    """Produce events packed per partition; return the number of records per partition."""
    records = pack(events, settings.topic_partitions, settings.events_topic, per_record)
    produce(bootstrap, settings.events_topic, [(r.partition, b"", r.value or b"") for r in records])
    counts: dict[int, int] = {}
    for r in records:
        counts[r.partition] = counts.get(r.partition, 0) + 1
    return counts


def worker_env(settings: Settings) -> dict[str, str]:
    return settings_env(settings)


@dataclass(frozen=True)
class OnRedis:
    """One kind of Redis for a test: its URL, whether it is a Redis Cluster, and a blocking client."""

    url: str
    cluster: bool
    client: SyncRedis

    def apply(self, settings: Settings) -> Settings:
        """`settings` pointed at this Redis."""
        return settings.model_copy(update={"redis_url": self.url, "redis_cluster": self.cluster})


@dataclass
class WorkerProcess:
    """A `python -m speed_layer <worker>` subprocess and its log file."""

    process: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 30.0) -> int:
        return stop_process(self.process, timeout)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, worker: WorkerProcess | None = None
) -> None:
    """Poll until `condition()`; fail early, with the worker's log, when the worker died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if worker is not None and worker.process.poll() is not None:
            log = worker.text()[-4000:]
            raise AssertionError(f"the worker exited ({worker.process.returncode}) before {what}:\n{log}")
        time.sleep(0.2)
    detail = f"\n--- worker log ---\n{worker.text()[-4000:]}" if worker else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")


async def no_dead_letters(letter: DeadLetter) -> None:
    """A dead-letter sink for tests whose records must all be counted."""
    raise AssertionError(f"unexpected dead letter {letter}")
