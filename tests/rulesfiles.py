"""Test helpers for the bot rules: an operator's edit of the shipped rules, views whose verdicts
the edit changes (so each layer's test fails if it ignores the file), and a day of views around
the threshold-bunching thresholds."""

from __future__ import annotations

from pathlib import Path

import msgspec

from counting.botrules import DEFAULT_RULES_FILE
from counting.event import Event
from counting.traffic import BROWSERS

BROWSER, BROWSER_JA3 = BROWSERS[0]
BAD_JA3 = "3b5074b1b5d032e5620f69f9f700ff0e"  # in the shipped rules' list
CARRIER_NAT = "100.64.0.0/10"
EDITED_VERSION = "2026.11.9-test"
EDITED_VELOCITY_LIMIT = 20  # the shipped limit is 30


def edited_rules_text() -> str:
    """The shipped rules with the edits of an operator: a lower address velocity limit, the carrier
    NAT range and one cloud range (52.1.0.0/16, inside the shipped 52.0.0.0/10) on the allow-list."""
    text = DEFAULT_RULES_FILE.read_text()
    edits = {
        "max_views_per_address_minute = 30": f"max_views_per_address_minute = {EDITED_VELOCITY_LIMIT}",
        "allow = []": f'allow = ["{CARRIER_NAT}", "52.1.0.0/16"]',
    }
    for old, new in edits.items():
        assert old in text, f"the shipped rules no longer hold {old!r}: update tests/rulesfiles.py"
        text = text.replace(old, new)
    version_line = next(line for line in text.splitlines() if line.startswith("version = "))
    return text.replace(version_line, f'version = "{EDITED_VERSION}"')


def write_edited_rules(folder: Path) -> Path:
    path = folder / "bot_rules.toml"
    path.write_text(edited_rules_text())
    return path


def _view(n: int, video: str, ts: int, ip: str, ja3: str = BROWSER_JA3, user: str | None = None) -> Event:
    return Event(
        event_id=f"rv-{n}",
        type="view",
        video_id=video,
        ts=ts,
        user_id=user or f"viewer-{n}",
        session_id=f"s-{n}",
        ip=ip,
        user_agent=BROWSER,
        ja3=ja3,
        watch_secs=95.0,
        video_duration_secs=600.0,
        ingest_ts=ts + 150,
    )


def edited_rules_views(start_ms: int) -> list[Event]:
    """Views (stamped) inside one minute from `start_ms` whose verdicts differ between the shipped
    and the edited rules, and some on which both agree:

    - vid-burst: 25 views from one home address: over the edited limit (20), under the shipped (30);
    - vid-nat: 40 views from one carrier NAT address: over both limits, allowed by the edit;
    - vid-cloud: 5 views from 52.1.2.3 with a bad TLS fingerprint: data centre + bad JA3 reject
      them by the shipped rules; the edit allows the address, and bad JA3 alone does not reject;
    - vid-plain: 5 ordinary views and 3 from 52.0.9.9 with a bad fingerprint (rejected by both).
    """
    events = []
    n = 0
    for video, ip, count, ja3 in (
        ("vid-burst", "73.20.30.40", 25, BROWSER_JA3),
        ("vid-nat", "100.64.7.8", 40, BROWSER_JA3),
        ("vid-cloud", "52.1.2.3", 5, BAD_JA3),
        ("vid-plain", None, 5, BROWSER_JA3),
        ("vid-plain", "52.0.9.9", 3, BAD_JA3),
    ):
        for i in range(count):
            n += 1
            address = ip or f"24.1.{i}.{n % 250 + 1}"
            events.append(_view(n, video, start_ms + 1_000 * (i % 50), address, ja3))
    return events


def _watching(n: int, video: str, ts: int, watch: float, duration: float) -> Event:
    return Event(
        event_id=f"gv-{n}",
        type="view",
        video_id=video,
        ts=ts,
        user_id=f"watcher-{n}",
        session_id=f"s-{n}",
        ip=f"73.{n // 250 % 250}.{n % 250}.9",
        user_agent=BROWSER,
        ja3=BROWSER_JA3,
        watch_secs=watch,
        video_duration_secs=duration,
        ingest_ts=ts + 150,
    )


def threshold_gamed_views(day_start_ms: int) -> list[Event]:
    """A day (event time from `day_start_ms`) of views around the shipped rules' bunching
    thresholds (10 views, 20 % of the day's views long enough to count, within 1 s past 30 s):

    - vid-gamed: 40 human views of a 20-minute video, then 12 stopping at 30.2-30.9 s (12 of 52
      views: bunched; they also watched under 5 % of the video);
    - vid-nine: 9 views stopping at 30.5 s (one fewer than the minimum: not bunched);
    - vid-share-in: 10 near views among 50 (20 % exactly: bunched); vid-share-out: 10 among 51;
    - vid-short: 20 views watching a 30.5-second video to its end (not near: they finished it);
    - vid-late: 12 views stopping at 31.0 s, just past the window (not near).
    The views are an hour apart per video, in ingestion order; humans come first.
    """
    events: list[Event] = []
    n = 0

    def add(video: str, watches: list[float], duration: float) -> None:
        nonlocal n
        for watch in watches:
            n += 1
            at = day_start_ms + (n * 97_000) % (20 * 3_600_000)
            events.append(_watching(n, video, at, watch, duration))

    human = [45.0 + 13.0 * i for i in range(40)]
    add("vid-gamed", human, 1_200.0)
    add("vid-gamed", [30.2 + 0.06 * i for i in range(12)], 1_200.0)
    add("vid-nine", [30.5] * 9, 1_200.0)
    add("vid-share-in", human[:40], 600.0)
    add("vid-share-in", [30.3] * 10, 600.0)
    add("vid-share-out", [*human[:40], 200.0], 600.0)
    add("vid-share-out", [30.3] * 10, 600.0)
    add("vid-short", [30.5] * 20, 30.5)
    add("vid-late", [31.0] * 12, 1_200.0)
    return sorted(events, key=lambda e: e.ingest_ts or 0)


# A Chrome that does not exist (the shipped rules refuse Chrome 150 and later).
IMPOSSIBLE_AGENT = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/312.0.0.0 Safari/537.36"
)


def agent_and_velocity_views(hour_start_ms: int) -> list[Event]:
    """An hour (event time from `hour_start_ms`, an hour's start) of views around the shipped
    rules' address and agent signals (30 views in 60 s, 8 agents an hour):

    - vid-edge: 60 views from one address in 6 s across a minute's edge, 30 in each minute: fixed
      minutes would count them all, the sliding 60 s refuse them all;
    - vid-slide: 31 views 1.9 s apart (over the limit within 60 s: all refused), and from another
      address 31 views 2 s apart (30 in any 60 s: all counted);
    - vid-agents: from one address 8 agents (counted), from another 9 (all refused), and from a
      third 9 agents of which one is blank and one missing (7 agents: counted);
    - vid-missing: 4 views without an agent (counted: 0.5), 3 of them with a bad TLS fingerprint too
      (0.5 + 0.6: refused);
    - vid-impossible: 3 views with an agent of a Chrome that does not exist (refused).
    The views are in ingestion order.
    """
    events: list[Event] = []
    n = 0
    edge = hour_start_ms + 20 * 60_000

    def add(video: str, ts: int, ip: str, agent: str | None = BROWSER, ja3: str = BROWSER_JA3) -> None:
        nonlocal n
        n += 1
        view = msgspec.structs.replace(_view(n, video, ts, ip, ja3), event_id=f"av-{n}", user_agent=agent)
        events.append(view)

    for i in range(60):
        add("vid-edge", edge - 3_000 + i * 100, "73.50.1.1")
    for i in range(31):
        add("vid-slide", edge + 120_000 + i * 1_900, "73.50.1.2")
        add("vid-slide", edge + 120_000 + i * 2_000, "73.50.1.3")
    for count, ip in ((8, "73.50.2.1"), (9, "73.50.2.2")):
        for i in range(count):
            add("vid-agents", hour_start_ms + i * 300_000, ip, f"{BROWSER} Build/{i}")
    for i, agent in enumerate([f"{BROWSER} Build/{i}" for i in range(7)] + ["", None]):
        add("vid-agents", hour_start_ms + i * 300_000 + 7, "73.50.2.3", agent)
    for i in range(4):
        add(
            "vid-missing", hour_start_ms + i * 60_000, f"73.50.3.{i + 1}", None, BAD_JA3 if i else BROWSER_JA3
        )
    for i in range(3):
        add("vid-impossible", hour_start_ms + i * 60_000, f"73.50.4.{i + 1}", IMPOSSIBLE_AGENT)
    return sorted(events, key=lambda e: e.ingest_ts or 0)
