"""Milestones on the real broker, store, counter and batch: a step is announced once, only when a
published baseline reaches it (never on a speed count the batch then lowers), killed announcers
neither double nor miss one, and the webhook is signed, retried and dead-lettered."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from counting import oracle
from counting.event import Event
from counting.settings import Settings, settings_env
from serving_layer.app import create_app
from tally.cli import app
from tally.milestones import ID_HEADER, SIGNATURE_HEADER, announce, in_topic
from tally.topics import milestones_dead_letter_topic
from tests.serving_layer.conftest import Events, _burst
from tests.writers import Writers, closed_bucket, writers

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ms_settings(settings: Settings, broker: str) -> Settings:
    topic = f"milestones-{uuid.uuid4().hex[:8]}"
    return settings.model_copy(
        update={"kafka_bootstrap": broker, "milestones_topic": topic, "milestone_steps": [5, 10, 20]}
    )


@pytest.fixture
def tally(ms_settings: Settings, spark: object) -> Iterator[Writers]:
    with writers(ms_settings, spark=lambda: spark) as running:
        yield running


def _ids(settings: Settings, topic: str | None = None) -> list[str]:
    return [str(m["milestone_id"]) for m in in_topic(settings, topic)]


def _expected(events: list[Event], cutoffs: list[int], steps: list[int]) -> list[str]:
    return sorted(f"{video}:{step}" for video, step in oracle.milestones(events, cutoffs, steps))


def test_a_step_is_announced_once_and_only_from_a_published_baseline(
    ms_settings: Settings, tally: Writers, redis_client: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = ms_settings
    e = Events(settings.bucket_ms, prefix="ms")
    c = closed_bucket(settings) - 2
    # "burst": 31 views from one address within a minute. The speed layer counts the first 30 as
    # they come (past the step of 20); the batch, seeing the whole minute, refuses all 31.
    events = [*e.views("a", c, *(f"a{i}" for i in range(12))), *_burst(e, "burst", c, "81.2.3.4")]
    tally.ingest(events)
    tally.count()
    with TestClient(create_app(settings)) as api:
        assert api.get("/v1/videos/burst/stats").json()["views"] >= 20
    tally.archive()
    first = (c + 1) * settings.bucket_ms
    tally.batch(first)

    done = announce(settings)

    assert sorted(done.sent) == _expected(events, [first], settings.milestone_steps) == ["a:10", "a:5"]
    assert sorted(_ids(settings)) == ["a:10", "a:5"]
    assert announce(settings).sent == []  # again: nothing new, nothing twice
    more = e.views("a", c + 1, *(f"late{i}" for i in range(9)))
    events += more
    tally.ingest(more)
    tally.count()
    tally.archive()
    second = (c + 2) * settings.bucket_ms
    tally.batch(second)

    assert announce(settings).sent == ["a:20"]
    assert sorted(_ids(settings)) == _expected(events, [first, second], settings.milestone_steps)
    with TestClient(create_app(settings)) as api:
        answer = api.get("/v1/videos/a/milestones").json()
        assert [(m["step"], m["announced"], m["webhook"]) for m in answer["milestones"]] == [
            (5, True, "off"),
            (10, True, "off"),
            (20, True, "off"),
        ]
        assert api.get("/v1/videos/burst/milestones").json()["milestones"] == []
    for name, value in settings_env(settings).items():  # the command reads the settings as a user's shell
        monkeypatch.setenv(name, value)
    listed = CliRunner().invoke(app, ["milestones", "list", "--video", "a"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [(r["step"], r["webhook_state"]) for r in rows] == [(5, "off"), (10, "off"), (20, "off")]
    for row in rows:  # times in ISO 8601, as the API gives them
        assert "T" in row["recorded_at"] and "T" in row["announced_at"], row
        assert datetime.fromisoformat(row["announced_at"]).utcoffset() == timedelta(0)


def test_killed_announcers_neither_send_a_milestone_twice_nor_miss_one(
    ms_settings: Settings, tally: Writers, redis_client: object
) -> None:
    settings = ms_settings.model_copy(update={"milestone_steps": list(range(1, 13))})
    e = Events(settings.bucket_ms, prefix="kill")
    c = closed_bucket(settings) - 1
    events = [view for n in range(150) for view in e.views(f"v{n}", c, *(f"u{n}-{i}" for i in range(12)))]
    tally.ingest(events)
    tally.archive()
    cutoff = (c + 1) * settings.bucket_ms
    tally.batch(cutoff)
    env = {**settings_env(settings), "PYTHONPATH": str(PROJECT_ROOT)}
    command = [sys.executable, "-m", "tally.milestones"]
    rng = random.Random(5)
    killed = 0
    for _ in range(6):  # killed at random moments: starting, reading the topic, sending, marking
        process = subprocess.Popen(
            command, env=env, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            process.wait(timeout=rng.uniform(0.05, 1.2))
        except subprocess.TimeoutExpired:
            process.kill()
            killed += 1
        process.wait()  # reaped: its lock is seen as abandoned
    before_last = _ids(settings)
    final = subprocess.run(command, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr

    ids = _ids(settings)
    assert len(ids) == len(set(ids)), "a milestone sent twice"
    assert sorted(ids) == _expected(events, [cutoff], settings.milestone_steps)
    assert len(ids) == 150 * 12
    assert killed >= 3 and len(before_last) < len(ids), (killed, len(before_last))


class _Receiver(BaseHTTPRequestHandler):
    """A webhook receiver that refuses the first `refusals` tries of each milestone."""

    refusals = 0
    seen: list[tuple[dict[str, str], bytes]] = []
    tries: dict[str, int] = {}

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        key = self.headers[ID_HEADER]
        self.tries[key] = self.tries.get(key, 0) + 1
        self.seen.append((dict(self.headers), body))
        self.send_response(500 if self.tries[key] <= self.refusals else 204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _receiver(refusals: int) -> tuple[ThreadingHTTPServer, type[_Receiver]]:
    handler = type("Receiver", (_Receiver,), {"refusals": refusals, "seen": [], "tries": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


@pytest.mark.parametrize("refusals", [2, 99])
def test_the_webhook_is_signed_retried_with_backoff_and_dead_lettered(
    ms_settings: Settings, tally: Writers, redis_client: object, refusals: int
) -> None:
    server, receiver = _receiver(refusals)
    secret = "webhook-secret-0123456789"
    settings = ms_settings.model_copy(
        update={
            "milestone_webhook_url": f"http://127.0.0.1:{server.server_port}/hook",
            "milestone_webhook_secret": secret,
            "milestone_webhook_attempts": 3,
            "milestone_steps": [5],
        }
    )
    e = Events(settings.bucket_ms, prefix="hook")
    c = closed_bucket(settings) - 1
    tally.ingest(e.views("w", c, *(f"w{i}" for i in range(6))))
    tally.archive()
    tally.batch((c + 1) * settings.bucket_ms)
    now = datetime.now(UTC)
    try:
        reports = []
        for hour in range(4):  # each call an hour later: past any backoff
            reports.append(announce(settings, clock=lambda hour=hour: now + timedelta(hours=hour)))
        early = announce(settings, clock=lambda: now)  # nothing due again before its backoff
    finally:
        server.shutdown()
        server.server_close()

    assert reports[0].sent == ["w:5"] and early.delivered == early.retrying == 0
    assert receiver.tries == {"w:5": 3}
    for headers, body in receiver.seen:
        assert (
            headers[SIGNATURE_HEADER]
            == "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        )
        assert json.loads(body)["milestone_id"] == "w:5"
    if refusals == 2:
        assert [(r.delivered, r.retrying, r.dead) for r in reports] == [
            (0, 1, 0),
            (0, 1, 0),
            (1, 0, 0),
            (0, 0, 0),
        ]
        assert _ids(settings, milestones_dead_letter_topic(settings)) == []
    else:
        assert [(r.delivered, r.retrying, r.dead) for r in reports] == [
            (0, 1, 0),
            (0, 1, 0),
            (0, 0, 1),
            (0, 0, 0),
        ]
        assert _ids(settings, milestones_dead_letter_topic(settings)) == ["w:5"]
