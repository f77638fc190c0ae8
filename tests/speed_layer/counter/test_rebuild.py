"""Redis loses the speed state: `tally speed rebuild` replays the Parquet log and the broker's
records past it, the counter resumes after them, and the served counts equal the oracle again."""

from __future__ import annotations

import re
import signal

import httpx
import pytest
import redis
from typer.testing import CliRunner

from counting import oracle
from counting.settings import Settings
from tally.cli import app
from tally.loadgen import post_traffic
from tally.speedview import counter_caught_up, wait_until, watermark
from tally.stack import Stack, settings_env
from tally.traffic_run import generate_items

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _served(settings: Settings, videos: list[str]) -> dict[str, tuple[int, int, int]]:
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}") as api:
        answers = {v: api.get(f"/v1/videos/{v}/stats").json() for v in videos}
    return {v: (a["views"], a["likes"], a["unique_viewers"]) for v, a in answers.items()}


def test_rebuild_after_a_flush_restores_the_oracle(
    stack: Stack, stack_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Part of what the counter counted is not archived yet when Redis is flushed (here the archiver
    is stopped; live, it writes a flush interval behind): the rebuild reads it from the broker."""
    settings = stack_settings
    ingest = f"http://127.0.0.1:{settings.ingest_port}"
    first = post_traffic(generate_items(1_500, 1_000.0, 41, 12, False), ingest, settings.collector_key)
    last_ingest = max(e.ingest_ts or 0 for e in first.events)
    wait_until(lambda: watermark(redis_client) > last_ingest, 90, "the archiver writing everything")
    _stop(stack, "archiver")
    second = post_traffic(generate_items(500, 1_000.0, 43, 12, False), ingest, settings.collector_key)
    wait_until(lambda: counter_caught_up(redis_client, settings), 90, "the counter catching up")

    _stop(stack, "counter")
    redis_client.flushdb()
    counted = first.events + second.events
    expected = {v: (c.views, c.likes, c.unique_viewers) for v, c in oracle.count(counted).items()}
    assert _served(settings, sorted(expected)) != expected, "the flush must have lost the counts"

    for name, value in settings_env(settings).items():
        if name.startswith("TALLY_"):
            monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["speed", "rebuild"])
    assert result.exit_code == 0, result.output
    from_broker = re.search(r"(\d+) records from the broker past the archive", result.output)
    assert from_broker is not None and int(from_broker.group(1)) > 0, result.output
    assert _served(settings, sorted(expected)) == expected

    stack.start_worker("counter")
    stack.start_worker("archiver")
    third = post_traffic(generate_items(500, 1_000.0, 42, 12, False), ingest, settings.collector_key)
    wait_until(lambda: counter_caught_up(redis_client, settings), 120, "the restarted counter catching up")
    everything = counted + third.events
    expected = {v: (c.views, c.likes, c.unique_viewers) for v, c in oracle.count(everything).items()}
    assert _served(settings, sorted(expected)) == expected


def _stop(stack: Stack, name: str) -> None:
    process = stack.get(name)
    process.signal(signal.SIGTERM)
    assert process.popen is not None
    process.popen.wait(30)
