"""Announce milestones (`counting.milestones`): record the steps a published baseline reached, then
send each recorded milestone to the milestones topic exactly once and, when a webhook is set, POST
it there (signed, retried with backoff, to the dead-letter topic after the last try).

The table in the relational store is the outbox. The topic is sent to at least once and read back
before each send: a milestone already in the topic (a send whose acknowledgement or bookkeeping a
crash cut off) is marked, not sent again, so the topic holds each milestone once. One announcer
runs at a time (a lock in Redis). Webhook receivers get the milestone id in `X-Tally-Milestone-Id`
and may see a delivery twice (a crash between the answer and the bookkeeping): they dedupe by it.

`python -m tally.milestones` runs one announcement (what `tally milestones announce` does).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import socket
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from counting import redisconn
from counting.milestones import milestone_id, reached
from counting.settings import Settings
from tally.errors import StackError
from tally.topics import ensure_topics, milestones_dead_letter_topic
from warehouse.baseline import Baseline, current_baseline
from warehouse.migrate import migrate
from warehouse.milestones import (
    DEAD,
    DELIVERED,
    OFF,
    PENDING,
    Milestone,
    mark_announced,
    record_milestones,
    set_webhook,
    unannounced,
    webhook_due,
)
from warehouse.store import Store, open_store

log = logging.getLogger(__name__)
LOCK_KEY = "tally:milestones:lock"
LOCK_MS = 120_000
BACKOFF_FIRST_S = 2.0
BACKOFF_MAX_S = 3_600.0
WEBHOOK_TIMEOUT_S = 5.0
SIGNATURE_HEADER = "X-Tally-Signature"
ID_HEADER = "X-Tally-Milestone-Id"


@dataclass
class Announced:
    """What one announcement did."""

    recorded: int = 0
    sent: list[str] = field(default_factory=list)  # milestone ids sent to the topic now
    found_in_topic: int = 0  # sent by an earlier, interrupted announcement: marked, not sent again
    delivered: int = 0
    retrying: int = 0
    dead: int = 0


def message(m: Milestone) -> dict[str, object]:
    """A milestone as the topic and the webhook carry it."""
    return {
        "milestone_id": milestone_id(m.video_id, m.step),
        "video_id": m.video_id,
        "step": m.step,
        "views": m.views,
        "run_id": m.run_id,
        "cutoff": m.cutoff,
    }


def signature(secret: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 of the body with the webhook secret (what a receiver checks)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def record_reached(settings: Settings, baseline: Baseline, now: datetime) -> list[Milestone]:
    """Record every (video, step) the baseline reached and no run recorded before; returns them."""
    webhook = PENDING if settings.milestone_webhook_url else OFF
    found = [
        Milestone(video_id, step, row.views, baseline.run_id, baseline.cutoff, now, webhook_state=webhook)
        for video_id, row in baseline.rows.items()
        for step in reached(row.views, settings.milestone_steps)
    ]
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        return record_milestones(store, found)


def announce(
    settings: Settings,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    post: Callable[[str, bytes, dict[str, str]], int] | None = None,
) -> Announced:
    """Record what the served baseline reached, send the unannounced milestones to the topic, and
    deliver the due webhooks (`post(url, body, headers)` -> status; default: httpx)."""
    lock = redisconn.sync_client(settings)
    token = f"{socket.gethostname()}|{os.getpid()}|{uuid.uuid4().hex}"
    try:
        if not lock.set(LOCK_KEY, token, nx=True, px=LOCK_MS) and not _take_abandoned(lock, token):
            raise StackError(
                f"another announcement of milestones runs (the lock {LOCK_KEY} in Redis at "
                f"{settings.redis_url}): wait for it, or delete the key if its process is gone"
            )
        report = Announced()
        baseline = current_baseline(settings.baselines_dir)
        if baseline is not None:
            report.recorded = len(record_reached(settings, baseline, clock()))
        migrate(settings.store_url)
        with open_store(settings.store_url) as store:
            waiting = unannounced(store)
            if waiting:
                _to_topic(settings, store, waiting, clock(), report)
            if settings.milestone_webhook_url:
                _to_webhook(settings, store, clock, post or _http_post, report)
        return report
    finally:
        if lock.get(LOCK_KEY) == token.encode():
            lock.delete(LOCK_KEY)
        lock.close()


def _take_abandoned(lock: redis.Redis, token: str) -> bool:
    """Take the lock of an announcer of this host whose process is gone (killed: its lock would
    otherwise hold for LOCK_MS); one of another host is waited for."""
    held = lock.get(LOCK_KEY)
    if held is None:
        return bool(lock.set(LOCK_KEY, token, nx=True, px=LOCK_MS))
    text = held.decode() if isinstance(held, bytes) else str(held)
    host, _, rest = text.partition("|")
    pid = rest.partition("|")[0]
    if host != socket.gethostname() or not pid.isdigit() or _alive(int(pid)):
        return False
    with lock.pipeline() as pipe:  # replace exactly the abandoned value
        try:
            pipe.watch(LOCK_KEY)
            if pipe.get(LOCK_KEY) != held:
                return False
            pipe.multi()
            pipe.set(LOCK_KEY, token, px=LOCK_MS)
            pipe.execute()
            return True
        except redis.WatchError:
            return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def in_topic(settings: Settings, topic: str | None = None, timeout: float = 10.0) -> list[dict[str, object]]:
    """Every message in the milestones topic (or `topic`, e.g. its dead letters), in order: read to
    the end of each partition (the end the broker signals, not its high watermark, which the local
    broker reports late after a batch of records)."""
    name = topic or settings.milestones_topic
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"tally-milestones-read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        found: list[dict[str, object]] = []
        described = consumer.list_topics(name, timeout=timeout).topics.get(name)
        if described is None or described.error is not None:
            return found
        for partition in described.partitions:
            consumer.assign([TopicPartition(name, partition, OFFSET_BEGINNING)])
            while True:
                record = consumer.poll(timeout)
                if record is None:
                    raise StackError(
                        f"the topic {name!r} at {settings.kafka_bootstrap} did not answer within "
                        f"{timeout:.0f} s: check the broker, then announce again"
                    )
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    continue
                found.append(json.loads(record.value() or b"{}"))
        return found
    finally:
        consumer.close()


def _to_topic(
    settings: Settings, store: Store, waiting: list[Milestone], now: datetime, report: Announced
) -> None:
    """Mark what an earlier announcement already sent, send the rest (acks=all), mark them."""
    ensure_topics(settings)
    there = {str(m.get("milestone_id")) for m in in_topic(settings)}
    already = [m for m in waiting if milestone_id(m.video_id, m.step) in there]
    if already:
        mark_announced(store, [(m.video_id, m.step) for m in already], now)
        report.found_in_topic = len(already)
    to_send = [m for m in waiting if milestone_id(m.video_id, m.step) not in there]
    if not to_send:
        return
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "acks": "all"})
    failures: list[str] = []

    def delivered(error: object, record: object) -> None:
        if error is not None:
            failures.append(str(error))

    for m in to_send:
        key = milestone_id(m.video_id, m.step)
        producer.produce(
            settings.milestones_topic, json.dumps(message(m)).encode(), key.encode(), on_delivery=delivered
        )
    left = producer.flush(30)
    if left or failures:
        raise StackError(
            f"the broker at {settings.kafka_bootstrap} did not take {left or len(failures)} milestone(s) "
            f"({'; '.join(failures[:3]) or 'timeout'}): nothing is lost, announce again"
        )
    mark_announced(store, [(m.video_id, m.step) for m in to_send], now)
    report.sent = [milestone_id(m.video_id, m.step) for m in to_send]
    for key in report.sent:
        log.info("milestone_announced id=%s topic=%s", key, settings.milestones_topic)


def _http_post(url: str, body: bytes, headers: dict[str, str]) -> int:
    try:
        return httpx.post(url, content=body, headers=headers, timeout=WEBHOOK_TIMEOUT_S).status_code
    except httpx.HTTPError:
        return 0


def _to_webhook(
    settings: Settings,
    store: Store,
    clock: Callable[[], datetime],
    post: Callable[[str, bytes, dict[str, str]], int],
    report: Announced,
) -> None:
    """POST each due milestone; a refusal is tried again after a doubling wait, and after the last
    try it goes to the dead-letter topic."""
    url = settings.milestone_webhook_url
    assert url is not None
    dead_letters: list[Milestone] = []
    for m in webhook_due(store, clock()):
        body = json.dumps(message(m), sort_keys=True).encode()
        headers = {
            "Content-Type": "application/json",
            ID_HEADER: milestone_id(m.video_id, m.step),
            SIGNATURE_HEADER: signature(settings.milestone_webhook_secret, body),
        }
        status = post(url, body, headers)
        attempts = m.webhook_attempts + 1
        if 200 <= status < 300:
            set_webhook(store, m, DELIVERED, attempts, None, None)
            report.delivered += 1
            continue
        error = f"answered {status}" if status else "no answer"
        if attempts >= settings.milestone_webhook_attempts:
            set_webhook(store, m, DEAD, attempts, None, error)
            dead_letters.append(m)
            report.dead += 1
            log.warning(
                "milestone_webhook_dead id=%s attempts=%s error=%s", headers[ID_HEADER], attempts, error
            )
        else:
            wait = min(BACKOFF_FIRST_S * 2 ** (attempts - 1), BACKOFF_MAX_S)
            set_webhook(store, m, PENDING, attempts, clock() + timedelta(seconds=wait), error)
            report.retrying += 1
    if dead_letters:
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "acks": "all"})
        for m in dead_letters:
            body = json.dumps({**message(m), "error": "webhook refused every try"}).encode()
            producer.produce(
                milestones_dead_letter_topic(settings), body, milestone_id(m.video_id, m.step).encode()
            )
        if producer.flush(30):
            raise StackError(
                f"the broker at {settings.kafka_bootstrap} did not take the milestones' dead letters"
            )


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        report = announce(Settings())
    except (StackError, KafkaException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.__dict__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
