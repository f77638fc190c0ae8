"""The bot rules file: the shipped rules, files refused with their line and reason, the allow-list,
a file edited while a worker runs, and the oracle counting with the edited rules."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from counting import bots, oracle
from counting.botrules import DEFAULT_RULES_FILE, RulesError, load_rules, parse_rules
from counting.bots import BotFilter, RulesInUse, filter_of
from tests.rulesfiles import (
    BROWSER,
    EDITED_VELOCITY_LIMIT,
    EDITED_VERSION,
    edited_rules_text,
    edited_rules_views,
)

MINUTE = 1_780_272_000_000  # a minute edge
SHIPPED_TEXT = DEFAULT_RULES_FILE.read_text()
VERSION_LINE = f'version = "{bots.SHIPPED.rules.version}"'


def _line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_the_shipped_rules_are_the_default_filter_and_carry_their_version() -> None:
    rules = load_rules(DEFAULT_RULES_FILE)
    assert bots.SHIPPED.rules == rules
    assert filter_of(None) is bots.SHIPPED
    assert bots.SHIPPED.version.endswith(f"+{rules.version}")
    assert set(bots.SHIPPED.signals) == set(bots.REASONS)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "max_replays_per_day = 12",
            'max_replays_per_day = "many"',
            "thresholds.max_replays_per_day: Input should",
        ),
        ("reject = 1.0", "reject = 0", "score.reject: Input should be greater than 0 (got 0)"),
        (
            "watch_anomaly = 0.5",
            "watch_anomaly = 0.5\nwatch_anomally = 1",
            "weights.watch_anomally: is not a rule",
        ),
        ("bad_ja3 = 0.6\n", "", "weights.bad_ja3: is missing"),
        (
            '"13.64.0.0/11"',
            '"13.64.0.1/11"',
            "item 1 is not an address range (13.64.0.1/11 has host bits set)",
        ),
        ('"e7d705a3286e19ea42f587b344ee6865"', '"E7D7"', "tls.bad_ja3: item 3 is not a JA3 fingerprint"),
        (
            "scripted_pattern = '(?i)(",
            "scripted_pattern = '(?i)((",
            "agents.scripted_pattern: not a regular expression",
        ),
        (VERSION_LINE, 'version = "2026 11"', "version: String should match pattern"),
        (VERSION_LINE, VERSION_LINE[:-1], "not TOML"),
    ],
)
def test_a_bad_file_is_refused_with_its_line_and_reason(
    old: str, new: str, expected: str, tmp_path: Path
) -> None:
    assert old in SHIPPED_TEXT
    text = SHIPPED_TEXT.replace(old, new)
    path = tmp_path / "rules.toml"
    path.write_text(text)

    with pytest.raises(RulesError) as refused:
        load_rules(path)

    assert expected in refused.value.reason
    line = _line_of(text, new.split("\n")[-1]) if new else _line_of(text, "[weights]")
    assert (refused.value.path, refused.value.line) == (path, line)
    assert str(refused.value).startswith(f"{path}:{line}: ")


def test_a_missing_file_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match=r"cannot be read .*TALLY_BOT_RULES_FILE"):
        filter_of(tmp_path / "nowhere.toml")


def test_the_allow_list_silences_the_address_signals_only() -> None:
    edited = BotFilter(parse_rules(edited_rules_text(), Path("edited.toml")))
    limit = EDITED_VELOCITY_LIMIT
    assert bots.SHIPPED.is_datacenter_ip("52.1.2.3") and not edited.is_datacenter_ip("52.1.2.3")
    assert edited.is_datacenter_ip("52.0.9.9")  # the rest of the cloud range still counts
    nat = edited.client_mask(BROWSER, "100.64.7.8", None)
    home = edited.client_mask(BROWSER, "73.20.30.40", None)
    assert edited.signals_of(edited.view_mask(nat, 95.0, 600.0, limit + 1, 1)) == []
    assert edited.signals_of(edited.view_mask(home, 95.0, 600.0, limit + 1, 1)) == [
        edited.signals[bots.ADDRESS_VELOCITY]
    ]
    # An allowed address does not hide what the client or the viewer shows.
    scripted = edited.client_mask("python-requests/2.31", "100.64.7.8", None)
    found = edited.signals_of(edited.view_mask(scripted, 95.0, 600.0, 0, edited.max_replays_per_day + 1))
    assert [s.name for s in found] == [bots.SCRIPTED_AGENT, bots.REPLAY_RATE]


def test_the_oracle_counts_with_the_rules_it_is_given() -> None:
    events = edited_rules_views(MINUTE)
    edited = BotFilter(parse_rules(edited_rules_text(), Path("edited.toml")))

    shipped = oracle.count(events)
    counted = oracle.count(events, bot_filter=edited)

    assert {v: c.views for v, c in shipped.items()} == {
        "vid-burst": 25,
        "vid-nat": 0,
        "vid-cloud": 0,
        "vid-plain": 5,
    }
    assert {v: c.views for v, c in counted.items()} == {
        "vid-burst": 0,
        "vid-nat": 40,
        "vid-cloud": 5,
        "vid-plain": 5,
    }
    assert counted["vid-burst"].rejected == {bots.ADDRESS_VELOCITY: 25}
    assert shipped["vid-nat"].rejected == {bots.ADDRESS_VELOCITY: 40}
    assert shipped["vid-cloud"].rejected == {bots.DATACENTER_IP: 5}
    assert counted["vid-plain"].rejected == shipped["vid-plain"].rejected == {bots.DATACENTER_IP: 3}


def test_a_worker_takes_an_edited_file_and_keeps_its_rules_when_an_edit_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(SHIPPED_TEXT)
    in_use = RulesInUse(path)
    assert in_use.current().rules == bots.SHIPPED.rules

    path.write_text(edited_rules_text())
    _touch_later(path)
    assert in_use.current().rules.version == EDITED_VERSION

    path.write_text(edited_rules_text().replace("reject = 1.0", "reject = -2"))
    _touch_later(path)
    with caplog.at_level(logging.ERROR, logger="counting.bots"):
        kept = in_use.current()
        assert in_use.current() is kept  # the refusal is logged once
    assert kept.rules.version == EDITED_VERSION
    [refusal] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert f"{path}:" in refusal and "score.reject" in refusal and EDITED_VERSION in refusal


def test_a_worker_refuses_to_start_on_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text("version = 1\n")
    with pytest.raises(RulesError, match="version: Input should be a valid string"):
        RulesInUse(path)


def _touch_later(path: Path) -> None:
    """Give the file a newer modification time (a rewrite within the clock's tick keeps it)."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def _with_files(tmp_path: Path, *names: str) -> Path:
    listed = ", ".join(f'"{name}"' for name in names)
    path = tmp_path / "rules.toml"
    path.write_text(SHIPPED_TEXT.replace("datacenter_files = []", f"datacenter_files = [{listed}]"))
    return path


def test_the_providers_published_lists_add_data_centre_ranges(tmp_path: Path) -> None:
    aws = {
        "syncToken": "1",
        "prefixes": [{"ip_prefix": "44.192.0.0/10", "region": "us-east-1", "service": "AMAZON"}],
        "ipv6_prefixes": [{"ipv6_prefix": "2406:da00::/24", "service": "AMAZON"}],
    }
    google = {
        "prefixes": [{"ipv4Prefix": "34.80.0.0/15", "scope": "asia-east1"}, {"ipv6Prefix": "2600:1900::/28"}]
    }
    (tmp_path / "aws.json").write_text(json.dumps(aws))
    (tmp_path / "cloud.json").write_text(json.dumps(google))
    (tmp_path / "extra.txt").write_text("# our own list\n203.0.113.0/24\n\n198.51.100.0/24  # a lab\n")

    rules = load_rules(_with_files(tmp_path, "aws.json", "cloud.json", "extra.txt"))
    found = BotFilter(rules)

    assert rules.addresses.datacenter[: len(bots.SHIPPED.rules.addresses.datacenter)] == list(
        bots.SHIPPED.rules.addresses.datacenter
    )
    added = [
        "44.192.0.0/10",
        "2406:da00::/24",
        "34.80.0.0/15",
        "2600:1900::/28",
        "203.0.113.0/24",
        "198.51.100.0/24",
    ]
    assert rules.addresses.datacenter[len(bots.SHIPPED.rules.addresses.datacenter) :] == added
    assert all(
        found.is_datacenter_ip(ip) for ip in ("44.200.1.2", "2406:da00::9", "34.81.0.1", "198.51.100.7")
    )
    assert not bots.SHIPPED.is_datacenter_ip("44.200.1.2") and not found.is_datacenter_ip("44.128.0.1")


@pytest.mark.parametrize(
    ("name", "content", "line", "reason"),
    [
        (
            "bad.txt",
            "203.0.113.0/24\n203.0.113.7/24\n",
            2,
            "not an address range: 203.0.113.7/24 has host bits set",
        ),
        ("bad.json", '{"prefixes": [\n  {"ip_prefix": "1.2.3.0/24",}\n]}', 2, "not JSON"),
        ("empty.json", '{"prefixes": []}', 0, "holds no address range under any of the keys"),
        ("wide.txt", "2000::/3\n", 1, "2000::/3 is wider than /16"),
    ],
)
def test_a_bad_range_file_is_refused_naming_it_and_the_rules_line(
    tmp_path: Path, name: str, content: str, line: int, reason: str
) -> None:
    (tmp_path / name).write_text(content)
    path = _with_files(tmp_path, name)

    with pytest.raises(RulesError) as refused:
        load_rules(path)

    assert refused.value.line == _line_of(path.read_text(), "datacenter_files = [")
    where = f"{tmp_path / name}:{line}" if line else str(tmp_path / name)
    assert refused.value.reason.startswith(f"addresses.datacenter_files: {where}: ")
    assert reason in refused.value.reason


def test_a_missing_range_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match=r"datacenter_files: .*nowhere\.txt: cannot be read"):
        load_rules(_with_files(tmp_path, "nowhere.txt"))
