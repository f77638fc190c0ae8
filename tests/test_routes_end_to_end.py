"""Every route of both APIs on the real local stack, as their users call them, after real traffic
(collector batches and single-event routes with user tokens), a real batch and a real payout run;
each answer is compared with the oracle over what the ingest API acknowledged. Then Redis loses
the speed state, the counter is stopped, `tally speed rebuild` replays the log, the counter starts
again, and every answer is checked once more."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import httpx
import pyarrow.dataset as ds
import pytest
import redis

from counting import bots, oracle, rules
from counting.catalog import CatalogRow
from counting.event import Event
from counting.logschema import EVENT_COLUMNS
from counting.settings import Settings
from counting.traffic import TrafficConfig, catalog_rows
from ingest.auth import issue_token
from tally import pipeline
from tally.loadgen import post_traffic
from tally.speedview import counter_caught_up, wait_until, watermark
from tally.stack import Stack, settings_env
from tally.traffic_run import generate_items
from tests.rulesfiles import BAD_JA3, IMPOSSIBLE_AGENT
from warehouse.migrate import migrate
from warehouse.store import open_store, upsert_catalog

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0 Safari/537.36"
SEED, VIDEOS = 5, 12
SOLO = "solo-video"  # a video only the single-event routes write to
# The reactions each user sends to SOLO, in order, through the user routes: every final state.
REACTIONS: dict[str, list[tuple[str, str]]] = {
    "alice": [("POST", "like")],
    "bob": [("POST", "dislike")],
    "carol": [("POST", "like"), ("DELETE", "like")],
    "dave": [("POST", "dislike"), ("POST", "like")],
}
NEVER = "erin"  # reacted to nothing


def _user_route(
    api: httpx.Client, secret: str, method: str, path: str, user: str, body: dict[str, Any]
) -> str:
    token = issue_token(secret, user, 600)
    headers = {"Authorization": f"Bearer {token}", "User-Agent": BROWSER}
    event_id = f"{user}-{uuid.uuid4().hex[:12]}"
    answer = api.request(method, path, json={"event_id": event_id, **body}, headers=headers)
    assert answer.status_code == 202, answer.text
    return event_id


def _single_route_traffic(settings: Settings) -> list[str]:
    """Views, a heartbeat and every reaction state through the user routes; their event ids."""
    now = int(time.time() * 1000)
    ids: list[str] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.ingest_port}", timeout=10) as api:
        for user in [*REACTIONS, NEVER]:
            body = {"ts": now, "session_id": f"s-{user}", "watch_secs": 45.0, "video_duration_secs": 300.0}
            ids.append(
                _user_route(api, settings.user_token_secret, "POST", f"/v1/videos/{SOLO}/view", user, body)
            )
        beat = {"ts": now, "session_id": "s-alice"}
        ids.append(
            _user_route(
                api, settings.user_token_secret, "POST", f"/v1/videos/{SOLO}/heartbeat", "alice", beat
            )
        )
        # erin watches, then leaves at once: she is not watching any more.
        for method in ("POST", "DELETE"):
            path = f"/v1/videos/{SOLO}/heartbeat"
            left = {"ts": now, "session_id": "s-erin"}
            ids.append(_user_route(api, settings.user_token_secret, method, path, NEVER, left))
        for user, steps in REACTIONS.items():
            for step, (method, kind) in enumerate(steps):
                body = {"ts": now + step}
                path = f"/v1/videos/{SOLO}/{kind}"
                ids.append(_user_route(api, settings.user_token_secret, method, path, user, body))
    return ids


def _logged(settings: Settings) -> list[Event]:
    """Every event the archiver wrote to the Parquet log (retried copies included)."""
    table = ds.dataset(settings.raw_dir, format="parquet", partitioning="hive").to_table(
        columns=list(EVENT_COLUMNS)
    )
    return [Event(**{k: v for k, v in row.items() if v is not None}) for row in table.to_pylist()]


def _edge_after(events: list[Event], bucket_ms: int) -> int:
    return (max(e.ingest_ts or 0 for e in events) // bucket_ms + 1) * bucket_ms


def _settle(settings: Settings, client: redis.Redis, cutoff: int) -> None:
    wait_until(lambda: counter_caught_up(client, settings), 90, "the counter reaching the end of the log")
    wait_until(lambda: watermark(client) >= cutoff, 90, f"the archiver closing cutoff {cutoff}")


def _stats(api: httpx.Client, video: str, **params: str) -> dict[str, Any]:
    answer = api.get(f"/v1/videos/{video}/stats", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _check_explanations(
    api: httpx.Client, settings: Settings, events: list[Event], raw: dict[str, Any], run_id: str
) -> None:
    """The admin routes' verdicts of SOLO's views, the other events and an unknown id, against the
    oracle: refused and flagged views with their reason, signals and score, the others accepted."""
    admin = {"x-admin-key": settings.admin_key}
    judged = [j for j in oracle.judged_views(oracle.dedup(events)) if j.event.video_id == SOLO]
    explained = {j.event.event_id for j in judged if j.outcome == oracle.REJECTED or j.flagged}
    assert {"bot-1", "bot-2", "flag-1"} <= explained
    assert {v["event_id"] for v in raw["explained"]["views"]} == explained
    assert raw["flagged"] == oracle.count(events)[SOLO].flagged == 1
    for j in judged:
        body = api.get(f"/v1/admin/events/{j.event.event_id}", headers=admin)
        assert body.status_code == 200, body.text
        answer = body.json()
        assert answer["batch_run_id"] == run_id and answer["event"]["event_id"] == j.event.event_id
        signals = bots.SHIPPED.signals_of(j.mask)
        if j.event.event_id in explained:
            verdict = "rejected" if j.outcome == oracle.REJECTED else "flagged"
            assert (answer["verdict"], answer["reason"]) == (verdict, j.reason), j
            assert answer["signals"] == [s.name for s in signals]
            assert answer["score"] == bots.score(signals)
        else:
            assert answer["verdict"] == "accepted", j
    beat = next(e for e in events if e.video_id == SOLO and e.type == "heartbeat")
    assert api.get(f"/v1/admin/events/{beat.event_id}", headers=admin).json()["verdict"] == "not_judged"
    assert api.get("/v1/admin/events/bot-1").status_code == 401
    missing = api.get("/v1/admin/events/no-such-event", headers=admin)
    assert missing.status_code == 404 and missing.json()["errors"][0]["field"] == "event_id"


def _check_reads(settings: Settings, events: list[Event], expect_degraded: bool = False) -> None:
    """Stats (with and without user_id), timeseries and trending against the oracle."""
    truth = oracle.count(events)
    states = oracle.reactions(events)
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}", timeout=10) as api:
        for video, counts in truth.items():
            body = _stats(api, video)
            got = (body["views"], body["likes"], body["dislikes"], body["unique_viewers"], body["rejected"])
            want = (counts.views, counts.likes, counts.dislikes, counts.unique_viewers, counts.rejected)
            assert got == want, video
            assert body["degraded"] == [] or expect_degraded, body["degraded"]
        for user in [*REACTIONS, NEVER]:
            body = _stats(api, SOLO, user_id=user)
            state = states.get((user, SOLO), rules.NONE)
            assert (body["user_liked"], body["user_disliked"]) == (
                state == rules.LIKED,
                state == rules.DISLIKED,
            ), user
            assert body["degraded"] == [], body["degraded"]

        first_bucket = min(e.ingest_ts or 0 for e in events) // settings.bucket_ms
        span = _edge_after(events, settings.bucket_ms) // settings.bucket_ms - first_bucket
        for video, counts in truth.items():
            series = api.get(
                f"/v1/videos/{video}/timeseries",
                params={"start": first_bucket * settings.bucket_ms, "buckets": span},
            )
            assert series.status_code == 200, series.text
            points = series.json()["points"]
            assert [p["bucket"] for p in points] == list(range(first_bucket, first_bucket + span))
            assert sum(p["views"] for p in points) == counts.views, video

        window = int(time.time() * 1000) // settings.bucket_ms - first_bucket + 2
        trending = api.get("/v1/trending", params={"window_buckets": window, "limit": 100})
        assert trending.status_code == 200, trending.text
        ranked = [(row["video_id"], row["views"]) for row in trending.json()["videos"]]
        want_ranked = sorted(((v, c.views) for v, c in truth.items() if c.views), key=lambda r: (-r[1], r[0]))
        assert ranked == want_ranked


def _payouts_by_oracle(
    events: list[Event], cutoff: int, catalog: list[CatalogRow], rate: Decimal
) -> dict[tuple[str, str], tuple[int, str]]:
    """(creator, day) -> (monetizable views, amount) from the oracle's counted views."""
    monetized = {row.video_id: row.creator_id for row in catalog if row.monetized}
    views: dict[tuple[str, str], int] = defaultdict(int)
    for event in oracle.counted_views(events, cutoff):
        if event.video_id in monetized:
            day = datetime.fromtimestamp(event.ts / 1000, UTC).date().isoformat()
            views[(monetized[event.video_id], day)] += 1
    cent = Decimal("0.000001")
    return {k: (n, str((Decimal(n) * rate / 1000).quantize(cent, ROUND_HALF_EVEN))) for k, n in views.items()}


def test_every_route_answers_the_oracle_before_and_after_redis_loss(
    stack: Stack, stack_settings: Settings, redis_client: redis.Redis
) -> None:
    settings = stack_settings
    items = generate_items(events=1_500, rate=1_000.0, seed=SEED, videos=VIDEOS, bots=False)
    sent = post_traffic(
        items, f"http://127.0.0.1:{settings.ingest_port}", settings.collector_key, batch_size=100
    )
    assert not sent.refused
    bot = {
        "event_id": "bot-1",
        "type": "view",
        "video_id": SOLO,
        "ts": int(time.time() * 1000),
        "session_id": "bot-session",
        "watch_secs": 40.0,
        "user_agent": "HeadlessChrome/120",
    }
    # A view from a browser that does not exist (refused) and one with a bad TLS fingerprint alone
    # (counted, flagged): what the admin routes explain.
    impossible = {**bot, "event_id": "bot-2", "session_id": "bot-2", "user_agent": IMPOSSIBLE_AGENT}
    flagged = {**bot, "event_id": "flag-1", "session_id": "flag-1", "user_agent": BROWSER, "ja3": BAD_JA3}
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.ingest_port}", timeout=10) as api:
        answer = api.post(
            "/v1/events",
            json={"events": [bot, impossible, flagged]},
            headers={"x-collector-key": settings.collector_key},
        )
        assert answer.status_code == 202, answer.text
    single_ids = _single_route_traffic(settings)

    acknowledged = {e.event_id for e in sent.events} | set(single_ids) | {"bot-1", "bot-2", "flag-1"}
    cutoff = int(time.time() * 1000) // settings.bucket_ms * settings.bucket_ms + settings.bucket_ms
    _settle(settings, redis_client, cutoff)
    events = _logged(settings)
    assert {e.event_id for e in events} == acknowledged, "the log must hold every acknowledged event"
    assert max(e.ingest_ts or 0 for e in events) < cutoff

    # Before any batch: the speed layer alone.
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}", timeout=10) as api:
        answer = _stats(api, SOLO)
        assert answer["watching_now"] == oracle.watching_now(events, answer["as_of"])[SOLO] == 1  # alice
    _check_reads(settings, events)

    # A real batch and a real payout run over the catalog of the traffic.
    catalog = catalog_rows(TrafficConfig(seed=SEED, videos=VIDEOS))
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, catalog)
    result = pipeline.batch_run(settings, cutoff, payouts=True).result
    _check_reads(settings, events)

    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}", timeout=10) as api:
        body = _stats(api, SOLO)
        assert body["batch_cutoff"] == cutoff and body["batch_run_id"] == result.run_id

        expected_payouts = _payouts_by_oracle(events, cutoff, catalog, settings.payout_rate_per_1000_views)
        assert expected_payouts, "the traffic must reach monetized videos"
        creators = {creator for creator, _ in expected_payouts}
        for creator in sorted(creators):
            answer = api.get(f"/v1/creators/{creator}/payouts")
            assert answer.status_code == 200, answer.text
            rows = answer.json()["payouts"]
            got = {(creator, r["day"]): (r["monetizable_views"], r["amount"]) for r in rows}
            want = {k: v for k, v in expected_payouts.items() if k[0] == creator}
            assert got == want, creator
            assert all(r["run_id"] == result.run_id and r["current"] for r in rows)
        assert api.get("/v1/creators/bad id!/payouts").status_code == 422

        assert api.get(f"/v1/admin/videos/{SOLO}/raw").status_code == 401
        raw = api.get(f"/v1/admin/videos/{SOLO}/raw", headers={"x-admin-key": settings.admin_key})
        assert raw.status_code == 200, raw.text
        solo = [e for e in events if e.video_id == SOLO]
        assert raw.json()["distinct_events"] == len({e.event_id for e in solo})
        truth = oracle.count(events)[SOLO]
        assert raw.json()["rejected"] == truth.rejected == {"scripted_agent": 1, "impossible_agent": 1}
        _check_explanations(api, settings, events, raw.json(), result.run_id)

        with api.stream("GET", f"/v1/videos/{SOLO}/live") as live:
            assert live.headers["content-type"].startswith("text/event-stream")
            lines = live.iter_lines()
            assert next(lines) == "event: stats"
            pushed = json.loads(next(lines).removeprefix("data: "))
        assert pushed["views"] == oracle.count(events)[SOLO].views

        page = api.get("/dashboard")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert api.get("/healthz").json() == {"status": "ok"}
        ready = api.get("/readyz").json()
        assert ready == {
            "ready": True,
            "redis": True,
            "baseline_run_id": result.run_id,
            "process": stack.get("serving").pid,
        }
        metrics = api.get("/metrics")
        assert metrics.status_code == 200 and "tally_" in metrics.text
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.ingest_port}", timeout=10) as api:
        assert api.get("/healthz").json() == {"status": "ok"}

    # Redis loses everything: the answers say so until the speed state is rebuilt. (The test's own
    # database: on a Redis shared with other workers, TALLY_TEST_REDIS_URL, the rest is theirs.)
    redis_client.flushdb()
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}", timeout=10) as api:
        time.sleep(settings.serving_cache_ms / 1000 + 1.2)
        body = _stats(api, SOLO, user_id="alice")
        assert body["degraded"] and body["approx"] is True
    counter = stack.get("counter")
    counter.signal(15)
    wait_until(lambda: not counter.alive(), 30, "the counter stopping")
    env = settings_env(settings)
    rebuilt = subprocess.run(
        [sys.executable, "-m", "tally.cli", "speed", "rebuild"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    stack.start_worker("counter")
    wait_until(lambda: counter_caught_up(redis_client, settings), 90, "the restarted counter catching up")
    time.sleep(settings.serving_cache_ms / 1000 + 1.2)
    _check_reads(settings, events)
