"""`tally rules check FILE`: a bad file is refused with its line and reason; a good one is compared
with the rules in use and counts a day of the log the archiver wrote with both (a dry run)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from msgspec.structs import replace
from typer.testing import CliRunner

from counting import bots, oracle, rules
from counting.botrules import DEFAULT_RULES_FILE, parse_rules
from counting.bots import BotFilter
from counting.settings import Settings
from tally.cli import app
from tests.logfiles import write_log
from tests.rulesfiles import EDITED_VERSION, edited_rules_text, edited_rules_views, write_edited_rules
from tests.writers import writers

MINUTE_MS = 60_000


def _check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["rules", "check", *args])
    return result.exit_code, " ".join(result.output.split())  # one line: the console wraps


def test_a_bad_file_is_refused_with_its_line_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(
        DEFAULT_RULES_FILE.read_text().replace("max_replays_per_day = 12", "max_replays_per_day = 0")
    )
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "max_replays_per_day" in text)

    status, output = _check(str(path), "--data-dir", str(tmp_path / "data"))

    assert status == 2
    reason = "thresholds.max_replays_per_day: Input should be greater than or equal to 1 (got 0)"
    assert output == f"error: {path}:{line}: {reason}"


def test_a_good_file_shows_its_changes_and_a_dry_run_of_a_day(settings: Settings, tmp_path: Path) -> None:
    start = (int(time.time() * 1000) // MINUTE_MS - 10) * MINUTE_MS
    events = edited_rules_views(start)
    with writers(settings) as tally:
        tally.ingest(events)
        tally.archive()
    day = datetime.fromtimestamp(start / 1000, tz=UTC).date()
    path = write_edited_rules(tmp_path)
    edited = BotFilter(parse_rules(edited_rules_text(), path))
    before, after = oracle.count(events), oracle.count(events, bot_filter=edited)

    status, output = _check(str(path), "--day", day.isoformat(), "--data-dir", str(settings.data_dir))

    assert status == 0, output
    assert f"the rules pass the check (version {EDITED_VERSION})" in output
    assert "addresses.allow: +100.64.0.0/10, +52.1.0.0/16" in output
    assert "thresholds.max_views_per_address_minute: 30 -> 20" in output
    assert f"{len(events):,} events in the log" in output
    old, new = (sum(c.views for c in counts.values()) for counts in (before, after))
    assert f"views counted: {old:,} -> {new:,} ({new - old:+,})" in output
    flagged = [sum(c.flagged for c in counts.values()) for counts in (before, after)]
    assert flagged[0] != flagged[1]  # the edit allows vid-cloud's address: its bad JA3 alone flags
    assert f"of them flagged: {flagged[0]:,} -> {flagged[1]:,}" in output
    for video in sorted(before):
        was, now = before[video].views, after[video].views
        if was != now:
            assert f"{video}: {was:,} -> {now:,} ({now - was:+,})" in output
    velocity = [sum(c.rejected.get(bots.ADDRESS_VELOCITY, 0) for c in n.values()) for n in (before, after)]
    assert f"rejected as address_velocity: {velocity[0]:,} -> {velocity[1]:,}" in output
    # A dry run: nothing of the data directory changed but the secrets the command may create.
    assert not (settings.data_dir / "baselines").exists()


def test_the_rules_in_use_change_nothing(tmp_path: Path) -> None:
    status, output = _check(str(DEFAULT_RULES_FILE), "--data-dir", str(tmp_path / "data"))
    assert status == 0
    assert "they are the rules in use" in output and "nothing would change" in output


def test_without_a_day_the_latest_day_with_views_is_counted_and_named(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    today = int(time.time() * 1000) // rules.DAY_MS * rules.DAY_MS
    earlier = edited_rules_views(today - 3 * rules.DAY_MS + 3_600_000)
    latest = [replace(e, event_id=f"late-{e.event_id}") for e in edited_rules_views(today - 2 * rules.DAY_MS)]
    write_log(settings.raw_dir, [*earlier, *latest])
    path = write_edited_rules(tmp_path)
    edited = BotFilter(parse_rules(edited_rules_text(), path))
    before, after = oracle.count(latest), oracle.count(latest, bot_filter=edited)
    day = datetime.fromtimestamp(latest[0].ts / 1000, tz=UTC).date()

    status, output = _check(str(path), "--data-dir", str(settings.data_dir))

    assert status == 0, output
    assert (
        f"dry run on {day.isoformat()} (event time, UTC; the latest day with views in the log, pick "
        f"another with --day): {len(latest):,} events in the log" in output
    )
    old, new = (sum(c.views for c in counts.values()) for counts in (before, after))
    assert f"views counted: {old:,} -> {new:,} ({new - old:+,})" in output


def test_without_a_day_and_without_views_it_says_there_is_nothing_to_count(tmp_path: Path) -> None:
    path = write_edited_rules(tmp_path)

    status, output = _check(str(path), "--data-dir", str(tmp_path / "data"))

    assert status == 0, output
    assert output.endswith(
        "no dry run: the log holds no view to count (send traffic, or give a day with --day)"
    )


def test_a_missing_file_is_named_as_the_argument(tmp_path: Path) -> None:
    path = tmp_path / "no-such-rules.toml"

    status, output = _check(str(path), "--data-dir", str(tmp_path / "data"))

    assert status == 2
    assert output == (
        f"error: {path}: cannot be read (No such file or directory): check the FILE argument (the rules "
        "file to check)"
    )
    assert "TALLY_BOT_RULES_FILE" not in output
