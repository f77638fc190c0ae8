"""The platform overview in a real browser (Debian's Chromium driven by Playwright) on the real stack:
after traffic with bots goes through the ingest API, the page shows what `/v1/overview` answered
(rates, bot share, lag per partition, top and rising videos, a chart with axes and times), and a
click on a top video opens that video's live view."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest
from playwright.sync_api import Response, sync_playwright

from counting.settings import Settings
from tally.stack import Stack
from tests.browser.test_dashboard import ARGS, CHROMIUM, SCREENSHOTS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BROWSER = "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"
SCRIPTED = "python-requests/2.31"  # refused as a scripted agent
# Views per round of each video: six rounds a second apart, so the chart has a few buckets to show.
ROUNDS = 6
PER_ROUND = {"launch-video": 3, "teaser": 2, "behind-the-scenes": 1}
BOTS_PER_ROUND = 1
WINDOW_BUCKETS = 30  # the page's default window

# Everything the overview shows, read in one go (no refresh can land between two reads).
SNAPSHOT = """() => {
  const text = (selector) => document.querySelector(selector).textContent;
  const cells = (row, names) => names.map((name) => row.querySelector(`.${name}`).textContent);
  return {
    asOf: Number(document.getElementById("overview").dataset.asOf),
    eventsRate: text("#ov-events-rate"),
    eventsSub: text("#ov-events-sub"),
    viewsRate: text("#ov-views-rate"),
    viewsSub: text("#ov-views-sub"),
    botShare: text("#ov-bot-share"),
    botSub: text("#ov-bot-sub"),
    lag: text("#ov-lag"),
    batchAge: text("#ov-batch-age"),
    bots: [...document.querySelectorAll("#ov-bots tbody tr")].map(
      (tr) => [tr.dataset.reason, ...cells(tr, ["views", "share"])]),
    partitions: [...document.querySelectorAll("#ov-partitions tbody tr")].map(
      (tr) => [Number(tr.dataset.partition), ...cells(tr, ["end", "next", "lag"])]),
    top: [...document.querySelectorAll("#ov-top li")].map(
      (li) => [li.querySelector("a").textContent, li.querySelector(".n").textContent]),
    topWindow: [...document.querySelectorAll("#ov-top li .window")].map((span) => span.textContent),
    scopes: ["ov-chart-scope", "ov-bots-scope", "ov-rising-scope", "ov-top-scope"].map(
      (id) => document.getElementById(id).textContent),
    rising: [...document.querySelectorAll("#ov-rising li a")].map((a) => a.textContent),
    lines: [...document.querySelectorAll("#ov-chart polyline")].map(
      (line) => [line.getAttribute("class"), line.getAttribute("points").split(" ").length]),
    axisTexts: [...document.querySelectorAll("#ov-chart .axis text")].map((t) => t.textContent),
  };
}"""


def _events(round_: int) -> dict[str, object]:
    now = time.time_ns() // 1_000_000
    events: list[dict[str, object]] = []
    for v, (video, views) in enumerate(PER_ROUND.items()):
        for i in range(views):
            viewer = f"r{round_}-{video}-{i}"
            events.append(_view(viewer, video, now, BROWSER, f"81.1.{v * 40 + round_}.{i + 1}"))
    for i in range(BOTS_PER_ROUND):
        events.append(_view(f"r{round_}-bot-{i}", "launch-video", now, SCRIPTED, f"81.2.{round_}.{i + 1}"))
    return {"events": events}


def _view(viewer: str, video: str, now: int, agent: str, ip: str) -> dict[str, object]:
    return {
        "event_id": viewer,
        "type": "view",
        "video_id": video,
        "ts": now,
        "session_id": viewer,
        "watch_secs": 42,
        "user_agent": agent,
        "ip": ip,
    }


def _shown(text: str, value: float) -> bool:
    """The page's rounded figure is `value` at the digits it shows."""
    digits = len(text.partition(".")[2])
    return abs(float(text.replace(",", "")) - value) <= 0.5 * 10**-digits + 1e-9


def test_the_overview_shows_what_the_route_answers(stack: Stack, stack_settings: Settings) -> None:
    ingest = f"http://127.0.0.1:{stack_settings.ingest_port}"
    serving = f"http://127.0.0.1:{stack_settings.serving_port}"
    collector = {"x-collector-key": stack_settings.collector_key}
    for round_ in range(ROUNDS):
        answer = httpx.post(f"{ingest}/v1/events", json=_events(round_), headers=collector)
        assert answer.status_code == 202, answer.text
        time.sleep(1.0)
    views = ROUNDS * sum(PER_ROUND.values())
    events = views + ROUNDS * BOTS_PER_ROUND

    def counted() -> dict[str, Any]:
        return httpx.get(f"{serving}/v1/overview", params={"window_buckets": WINDOW_BUCKETS}).json()

    deadline = time.monotonic() + 30
    while (now := counted())["views"] < views or now["consumer_lag"]["total"] != 0:
        assert time.monotonic() < deadline, f"the counter did not catch up: {now}"
        time.sleep(0.5)
    assert (now["events"], now["views"]) == (events, views)
    assert now["bot_share"]["by_reason"] == [
        {
            "reason": "scripted_agent",
            "views": ROUNDS * BOTS_PER_ROUND,
            "share": ROUNDS * BOTS_PER_ROUND / events,
        }
    ]
    assert [(v["video_id"], v["views"]) for v in now["top"]] == [
        (video, ROUNDS * n) for video, n in PER_ROUND.items()
    ]

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        responses: list[Response] = []
        page.on("response", lambda r: responses.append(r) if "/v1/overview" in r.url else None)
        page.goto(f"{serving}/dashboard")
        page.wait_for_selector("#overview[data-as-of]", timeout=15_000)
        page.wait_for_selector("#ov-top li a", timeout=15_000)
        shown = page.evaluate(SNAPSHOT)
        answers = {body["as_of"]: body for body in (r.json() for r in list(responses) if r.ok)}
        answer = answers[shown["asOf"]]

        assert f"window_buckets={WINDOW_BUCKETS}" in responses[0].url
        assert (answer["events"], answer["views"]) == (events, views)
        assert _shown(shown["eventsRate"], answer["events_per_sec"])
        assert _shown(shown["viewsRate"], answer["views_per_sec"])
        assert shown["eventsSub"].startswith(f"{events:,} events in the last ")
        assert shown["viewsSub"].startswith(f"{views:,} views in the last ")
        bots = answer["bot_share"]
        assert _shown(shown["botShare"], bots["share"] * 100)
        assert shown["botSub"] == f"{bots['rejected_views']:,} of {bots['judged_views']:,} judged views"
        assert [(reason, int(n.replace(",", ""))) for reason, n, _ in shown["bots"]] == [
            (row["reason"], row["views"]) for row in bots["by_reason"]
        ]
        assert all(
            _shown(pct.removesuffix(" %"), row["share"] * 100)
            for (_, _, pct), row in zip(shown["bots"], bots["by_reason"], strict=True)
        )
        lag = answer["consumer_lag"]
        assert shown["lag"] == f"{lag['total']:,}" == "0"
        assert shown["partitions"] == [
            [p["partition"], f"{p['end_offset']:,}", f"{p['next_offset']:,}", f"{p['lag']:,}"]
            for p in lag["partitions"]
        ]
        assert len(shown["partitions"]) == stack_settings.topic_partitions
        assert (answer["batch"], shown["batchAge"]) == (None, "\u2013")
        assert shown["top"] == [[v["video_id"], f"{v['views']:,} views"] for v in answer["top"]]
        assert shown["topWindow"] == [f"+{v['window_views']:,} in the window" for v in answer["top"]]
        scopes = answer["scopes"]
        assert shown["scopes"] == [scopes[part]["text"] for part in ("counts", "bot_share", "rising", "top")]
        assert shown["scopes"][1].startswith(f"speed layer, last {WINDOW_BUCKETS} buckets of 2 s")
        assert shown["rising"] == [v["video_id"] for v in answer["rising"]]
        assert shown["lines"] == [
            [f"line {kind}", len(answer["points"])] for kind in ("events", "views", "refused")
        ]
        times = [t for t in shown["axisTexts"] if re.fullmatch(r"\d\d:\d\d:\d\d", t)]
        assert len(times) >= 4, shown["axisTexts"]
        assert "per second" in shown["axisTexts"]
        assert "bucket start (UTC), buckets of 2 s" in shown["axisTexts"]

        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / "overview.png"
        page.screenshot(path=str(shot), full_page=True)

        page.locator("#ov-top li a").first.click()
        page.wait_for_url("**/dashboard?video=launch-video", timeout=10_000)
        page.wait_for_function(
            f"document.getElementById('views').textContent === '{ROUNDS * PER_ROUND['launch-video']}'",
            timeout=30_000,
        )
        assert page.locator("#status").inner_text() == "live"
        assert page.locator("#overview").is_hidden()
        assert page.locator("#corrected").is_hidden()  # no batch has corrected the count
        page.wait_for_function(
            "[...document.querySelectorAll('#chart rect.bar')].some((bar) => bar.getAttribute('height') > 0)",
            timeout=15_000,
        )
        video_times = page.locator("#chart .axis text").all_text_contents()
        assert len([t for t in video_times if re.fullmatch(r"\d\d:\d\d:\d\d", t)]) >= 4, video_times
        assert "views" in video_times
        page.screenshot(path=str(SCREENSHOTS / "video.png"), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000
