"""The dashboard in a real browser (Debian's Chromium driven by Playwright) on the real stack:
the live counter changes after events are posted through the ingest API."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import sync_playwright

from counting.settings import Settings
from tally.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "data" / "screenshots"


def _views(session: str, count: int) -> dict[str, object]:
    now = time.time_ns() // 1_000_000
    return {
        "events": [
            {
                "event_id": f"{session}-{i}",
                "type": "view",
                "video_id": "launch-video",
                "ts": now,
                "session_id": f"{session}-{i}",
                "watch_secs": 42,
                "user_agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
            }
            for i in range(count)
        ]
    }


def test_live_counter_changes_when_events_arrive(stack: Stack, stack_settings: Settings) -> None:
    ingest = f"http://127.0.0.1:{stack_settings.ingest_port}"
    serving = f"http://127.0.0.1:{stack_settings.serving_port}"
    collector = {"x-collector-key": stack_settings.collector_key}
    assert httpx.post(f"{ingest}/v1/events", json=_views("first", 3), headers=collector).status_code == 202

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(f"{serving}/dashboard?video=launch-video")
        counter = page.locator("#views")
        page.wait_for_function("document.getElementById('views').textContent === '3'", timeout=30_000)
        assert counter.inner_text() == "3"

        assert (
            httpx.post(f"{ingest}/v1/events", json=_views("second", 4), headers=collector).status_code == 202
        )
        page.wait_for_function("document.getElementById('views').textContent === '7'", timeout=30_000)
        assert page.locator("#status").inner_text() == "live"
        page.wait_for_selector("#trending li", timeout=15_000)
        assert page.locator("#trending li").first.inner_text().startswith("launch-video")

        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000
