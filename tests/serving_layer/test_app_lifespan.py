"""The app's lifespan ends even when the hot-video refresher's cancel is turned into a Redis error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.exceptions import TimeoutError as RedisTimeout

from counting.settings import Settings
from serving_layer import app as app_module
from serving_layer.app import create_app


def test_shutdown_ends_when_the_refreshers_cancel_comes_back_as_a_redis_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py turns a cancel that meets its socket timeout into its own TimeoutError, which the
    refresher survives; the shutdown must still end (it hung for ten minutes in CI)."""
    reads = 0

    async def read_meeting_its_timeout(*_: object) -> list[tuple[str, int]]:
        nonlocal reads
        reads += 1
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if reads > 1:
                raise  # the race comes once; later cancels pass, so a hang shows as the wait's timeout
            raise RedisTimeout("Timeout reading from 127.0.0.1:6379") from None
        return []

    monkeypatch.setattr(app_module, "top_videos", read_meeting_its_timeout)
    app = create_app(Settings(data_dir=tmp_path / "data", redis_url="redis://127.0.0.1:1/0"))

    async def run() -> None:
        async with app.router.lifespan_context(app):
            await asyncio.sleep(0.05)  # the refresher is inside its read

    asyncio.run(asyncio.wait_for(run(), 10))

    assert reads == 1
