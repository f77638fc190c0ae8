"""Each expectation group of the suites on tiny frames: clean data passes, one broken rule fails
with that rule's words."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from counting.event import MAX_AGE_MS, MAX_FUTURE_MS
from counting.rules import RULES_VERSION
from quality import ValidationFailed, ValidationReport, require_valid, suites
from quality.context import run_suite
from quality.frames import LOG_SCHEMA, qualified_views, raw_frame
from quality.report import SuiteOutcome
from quality.validate import _growth_rule
from warehouse.baseline import COUNT_COLUMNS, REJECTED_COLUMNS, Baseline

HOUR = int(datetime(2026, 11, 22, 1, tzinfo=UTC).timestamp() * 1000)
FOLDER = "ingest_date=2026-11-22/ingest_hour=01"

Row = dict[str, Any]


def _row(event_id: str, offset: int, **fields: Any) -> Row:
    row: Row = {name: None for name in LOG_SCHEMA.names}
    row.update(
        event_id=event_id,
        type="view",
        video_id="vid-1",
        session_id="s-1",
        ts=HOUR + 1_000,
        ip="81.2.69.160",
        user_agent="Mozilla/5.0",
        watch_secs=42.0,
        video_duration_secs=120.0,
        ingest_ts=HOUR + 2_000,
        kafka_partition=0,
        kafka_offset=offset,
    )
    row.update(fields)
    return row


def _clean_rows() -> list[Row]:
    return [
        _row("e-1", 0),
        _row("e-2", 1, user_id="u-1", ip="2001:db8::1", ja3="771,4865-4866"),
        _row("e-3", 2, type="like", user_id="u-1", session_id=None, watch_secs=None),
        _row("e-4", 3, type="heartbeat", watch_secs=None, video_duration_secs=None, ip=None),
        _row("e-1", 4, ingest_ts=HOUR + 9_000),  # a client retry: another record, same event id
    ]


def _write(raw_dir: Path, name: str, rows: list[Row], schema: pa.Schema = LOG_SCHEMA) -> Path:
    folder = raw_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / name)
    return folder / name


def _check_raw(context: Any, raw_dir: Path, *files: Path) -> SuiteOutcome:
    return run_suite(context, suites.raw_log_suite(), raw_frame(raw_dir, files), "test", [suites.FILE])


def test_a_clean_log_passes_with_retries_across_and_within_files(gx_context: Any, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    first = _write(raw, "events-p0-0-4.parquet", _clean_rows())
    second = _write(raw, "events-p0-5-5.parquet", [_row("e-1", 5, ingest_ts=HOUR + 60_000)])

    outcome = _check_raw(gx_context, raw, first, second)

    assert outcome.failures == ()
    assert outcome.rows == 6
    assert outcome.docs_page is not None and outcome.docs_page.exists()


def _set(index: int, **fields: Any) -> Callable[[list[Row]], None]:
    def mutate(rows: list[Row]) -> None:
        rows[index].update(fields)

    return mutate


def _duplicate(rows: list[Row]) -> None:
    rows.append(dict(rows[0]))


RAW_BREAKS: dict[str, tuple[Callable[[list[Row]], None], str]] = {
    "null event id": (_set(0, event_id=None), "event_id is present: 1 of 5 rows"),
    "long event id": (_set(0, event_id="x" * 65), "event_id is 1 to 64 characters"),
    "row twice in a file": (_duplicate, "no row appears twice in one file"),
    "unknown type": (_set(3, type="share"), "type is one of view, like"),
    "bad video id": (_set(0, video_id="vid 1!"), "video_id matches"),
    "reaction without user": (_set(2, user_id=None), "user_id is present on every reaction"),
    "view without session": (_set(0, session_id=None), "session_id is present on every view"),
    "long session id": (_set(0, session_id="s" * 65), "session_id is 1 to 64 characters"),
    "ts far in the future": (
        _set(1, ts=HOUR + 2_000 + MAX_FUTURE_MS + 1),
        "at most 24 h after its ingestion",
    ),
    "ts too old": (_set(1, ts=HOUR + 2_000 - MAX_AGE_MS - 1), "at most 30 days before it"),
    "garbage ip": (_set(0, ip="not-an-ip"), "ip is IPv4 or IPv6 text"),
    "long user agent": (_set(0, user_agent="u" * 513), "user_agent is 0 to 512 characters"),
    "negative watch time": (_set(0, watch_secs=-1.0), "watch_secs is a number of seconds >= 0"),
    "watch time off a view": (_set(3, watch_secs=12.0), "watch_secs is only set on views"),
    "zero duration": (_set(0, video_duration_secs=0.0), "video_duration_secs is > 0"),
    "long ja3": (_set(1, ja3="j" * 65), "ja3 is 0 to 64 characters"),
    "null ingest ts": (_set(3, ingest_ts=None), "ingest_ts is present"),
    "row in a later hour": (
        _set(3, ingest_ts=HOUR - 1, ts=HOUR - 10),
        "no row sits in a partition of an hour after",
    ),
    "negative offset": (_set(3, kafka_offset=-1), "kafka_offset is >= 0"),
    "null partition": (_set(3, kafka_partition=None), "kafka_partition is present"),
}


@pytest.mark.parametrize("case", sorted(RAW_BREAKS))
def test_each_broken_field_rule_fails_in_its_own_words(gx_context: Any, tmp_path: Path, case: str) -> None:
    mutate, words = RAW_BREAKS[case]
    rows = _clean_rows()
    mutate(rows)
    path = _write(tmp_path / "raw", "events-p0-0-9.parquet", rows)

    outcome = _check_raw(gx_context, tmp_path / "raw", path)

    assert len(outcome.failures) == 1, outcome.failures
    assert words in outcome.failures[0]
    assert f"file='{FOLDER}/events-p0-0-9.parquet'" in outcome.failures[0]


def test_a_file_with_the_wrong_types_fails_the_schema_rule(gx_context: Any, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    wrong = pa.schema(
        [f if f.name != "watch_secs" else pa.field("watch_secs", pa.string()) for f in LOG_SCHEMA]
    )
    rows = [dict(row, watch_secs=None if row["watch_secs"] is None else "42") for row in _clean_rows()]
    path = _write(raw, "events-p0-0-4.parquet", rows, schema=wrong)

    frame = raw_frame(raw, [path])
    outcome = _check_raw(gx_context, raw, path)

    assert set(frame[suites.SCHEMA_PROBLEM]) == {"watch_secs is string, expected double"}
    assert len(outcome.failures) == 1
    assert "every file has the log's columns with the log's types" in outcome.failures[0]


def test_an_unreadable_file_is_reported_not_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "raw" / FOLDER
    folder.mkdir(parents=True)
    (folder / "events-p0-0-1.parquet").write_bytes(b"not parquet")

    frame = raw_frame(tmp_path / "raw", [folder / "events-p0-0-1.parquet"])

    assert len(frame) == 1
    assert frame[suites.SCHEMA_PROBLEM][0].startswith("not a readable Parquet file")


def test_a_truncated_file_is_one_failure_naming_it_and_the_others_are_checked(tmp_path: Path) -> None:
    """Not one failure per rule that its missing rows break (seven 'is present' lines once)."""
    from counting.settings import Settings
    from quality.validate import validate_raw
    from warehouse.migrate import migrate

    settings = Settings(data_dir=tmp_path / "data")
    _write(settings.raw_dir, "events-p0-0-4.parquet", _clean_rows())
    broken = _write(settings.raw_dir, "events-p0-5-9.parquet", _clean_rows())
    broken.write_bytes(broken.read_bytes()[:200])
    migrate(settings.store_url)

    report = validate_raw(settings, HOUR + 3_600_000)

    assert not report.success
    [failure] = report.failures
    assert failure.startswith(f"[raw_log] not a readable Parquet file: {FOLDER}/events-p0-5-9.parquet (")
    assert report.failing == (f"{FOLDER}/events-p0-5-9.parquet",)
    assert sum(o.rows for o in report.outcomes) == len(_clean_rows())  # the readable file was checked


def test_qualified_views_keep_first_copies_below_the_cutoff(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _write(raw, "events-p0-0-4.parquet", _clean_rows())
    _write(
        raw,
        "events-p0-5-7.parquet",
        [
            _row("e-5", 5, watch_secs=3.0),  # too short to qualify
            _row("e-6", 6, video_id="vid-2", ingest_ts=HOUR + 50_000),  # after the cutoff
            _row("e-7", 7, video_id="vid-2", watch_secs=30.0),
        ],
    )

    assert qualified_views(raw, cutoff_ms=HOUR + 10_000) == {"vid-1": 2, "vid-2": 1}
    assert qualified_views(tmp_path / "nothing", cutoff_ms=HOUR) == {}


def _baseline(**overrides: list[Any]) -> pd.DataFrame:
    """Two videos whose columns agree; `overrides` replace whole columns."""
    data: dict[str, list[Any]] = {"video_id": ["vid-1", "vid-2"]}
    data |= {column: [0, 0] for column in COUNT_COLUMNS + REJECTED_COLUMNS}
    data |= {"views": [10, 4], "unique_viewers": [7, 4], "repeat_views": [2, 0], "likes": [3, 0]}
    data[REJECTED_COLUMNS[0]] = [1, 0]
    data |= {suites.JUDGED_VIEWS: [13, 4], suites.QUALIFIED_VIEWS: [13, 4]}
    data |= {suites.DAILY_VIEWS: [10, 4], suites.SERIES_VIEWS: [10, 4], suites.PREVIOUS_VIEWS: [9, 4]}
    data |= overrides
    return pd.DataFrame(data)


BASELINE_BREAKS: dict[str, tuple[pd.DataFrame, str]] = {
    "negative likes": (_baseline(likes=[-1, 0]), "likes is not negative"),
    "more uniques than views": (_baseline(unique_viewers=[11, 4]), "unique_viewers <= views"),
    "judged differ from qualified": (
        _baseline(qualified_views=[14, 4]),
        "rejected + counted (+ repeat) views",
    ),
    "daily views off": (_baseline(daily_views=[9, 4]), "the daily output's views add up to views"),
    "series views off": (_baseline(series_views=[10, 5]), "the per-bucket output's views add up"),
    "views decreased": (_baseline(previous_views=[11, 4]), "views never fall below the served baseline"),
    "video twice": (_baseline(video_id=["vid-1", "vid-1"]), "one row per video"),
}


def test_a_consistent_baseline_passes(gx_context: Any) -> None:
    outcome = run_suite(gx_context, suites.batch_baseline_suite(check_growth=True), _baseline(), "run-1")
    assert outcome.failures == ()


@pytest.mark.parametrize("case", sorted(BASELINE_BREAKS))
def test_each_broken_output_rule_fails_in_its_own_words(gx_context: Any, case: str) -> None:
    frame, words = BASELINE_BREAKS[case]
    outcome = run_suite(
        gx_context, suites.batch_baseline_suite(check_growth=True), frame, "run-1", ["video_id"]
    )
    assert len(outcome.failures) == 1, outcome.failures
    assert words in outcome.failures[0]


def test_views_may_fall_when_growth_is_not_checked(gx_context: Any) -> None:
    frame = _baseline(previous_views=[11, 4])
    outcome = run_suite(gx_context, suites.batch_baseline_suite(check_growth=False), frame, "run-1")
    assert outcome.failures == ()


def _daily(**overrides: list[Any]) -> pd.DataFrame:
    data: dict[str, list[Any]] = {"date": ["2026-11-21", "2026-11-22"], "video_id": ["vid-1", "vid-1"]}
    data |= {column: [0, 0] for column in COUNT_COLUMNS + REJECTED_COLUMNS}
    data |= {
        "views": [6, 4],
        "unique_viewers": [5, 4],
        "run_id": ["run-1"] * 2,
        "rules_version": [RULES_VERSION] * 2,
    }
    data |= overrides
    return pd.DataFrame(data)


@pytest.mark.parametrize(
    ("frame", "words"),
    [
        (_daily(), None),
        (_daily(date=["2026-11-22", "2026-11-22"]), "one row per day and video"),
        (_daily(short_views=[0, -2]), "short_views is not negative"),
        (_daily(unique_viewers=[7, 4]), "unique_viewers <= views"),
        (_daily(run_id=["run-1", "run-0"]), "run_id is 'run-1'"),
        (_daily(rules_version=["2020.1.1", RULES_VERSION]), f"rules_version is {RULES_VERSION!r}"),
    ],
    ids=["clean", "day twice", "negative", "uniques", "run id", "rules version"],
)
def test_the_daily_output_suite(gx_context: Any, frame: pd.DataFrame, words: str | None) -> None:
    outcome = run_suite(gx_context, suites.batch_daily_suite("run-1", RULES_VERSION), frame, "run-1")
    if words is None:
        assert outcome.failures == ()
    else:
        assert len(outcome.failures) == 1, outcome.failures
        assert words in outcome.failures[0]


def _served(cutoff: int, rules_version: str = RULES_VERSION) -> Baseline:
    return Baseline(run_id="interval-1", cutoff=cutoff, rules_version=rules_version, published_at=0, rows={})


def test_views_are_compared_only_with_a_served_baseline_of_the_same_rules_and_an_earlier_cutoff() -> None:
    assert _growth_rule(2_000, RULES_VERSION, _served(1_000)) == (True, None)
    assert _growth_rule(2_000, RULES_VERSION, _served(2_000)) == (True, None)
    for previous in (None, _served(1_000, "1999.1.1"), _served(3_000)):
        check, note = _growth_rule(2_000, RULES_VERSION, previous)
        assert check is False
        assert note


def test_require_valid_raises_with_the_failures_and_the_docs() -> None:
    page = Path("/data/quality/page.html")
    failed = ValidationReport(
        what="the raw log", outcomes=(SuiteOutcome("raw_log", 3, ("event_id is present: 1 of 3",), page),)
    )
    passed = ValidationReport(what="the raw log", outcomes=(SuiteOutcome("raw_log", 3),))

    assert require_valid(passed) is passed
    with pytest.raises(ValidationFailed) as caught:
        require_valid(failed)
    assert "[raw_log] event_id is present: 1 of 3" in str(caught.value)
    assert str(page) in str(caught.value)
    assert caught.value.report is failed
