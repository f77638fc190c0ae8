"""The raw gate validates every file a run reads that is not yet validated with its current
checksum, whatever interval it belongs to, records what passed, and words its verdict with the
rows of the run's own interval; a file that appears or changes after validation stops the run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from counting.settings import Settings
from quality import UnvalidatedInputs, require_validated_inputs, validate_raw
from quality.frames import LOG_SCHEMA
from quality.inputs import may_hold_rows_before, run_inputs
from tests.quality.test_suites import HOUR, _row
from warehouse.migrate import migrate
from warehouse.store import open_store, validated_files
from warehouse.tables import file_digest

H = 3_600_000
CUTOFF = HOUR + 2 * H  # the run reads the hours 01:00 and 02:00 of 2026-11-22
SINCE = HOUR + H  # its own interval is [02:00, 03:00)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    settings = Settings(data_dir=tmp_path / "data")
    migrate(settings.store_url)
    return settings


def _write(settings: Settings, hour_start: int, name: str, rows: list[dict[str, Any]]) -> Path:
    hour = (hour_start - HOUR) // H + 1
    folder = settings.raw_dir / "ingest_date=2026-11-22" / f"ingest_hour={hour:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=LOG_SCHEMA), folder / name)
    return folder / name


def _rows(hour_start: int, prefix: str, count: int, offset: int = 0) -> list[dict[str, Any]]:
    return [
        _row(f"{prefix}-{i}", offset + i, ts=hour_start + 1_000 + i, ingest_ts=hour_start + 2_000 + i)
        for i in range(count)
    ]


def _recorded(settings: Settings) -> dict[str, str]:
    with open_store(settings.store_url) as store:
        return {path: record.sha256 for path, record in validated_files(store).items()}


def _relative(settings: Settings, path: Path) -> str:
    return path.relative_to(settings.raw_dir).as_posix()


def test_each_file_is_validated_once_until_it_changes(settings: Settings) -> None:
    older = _write(settings, HOUR, "events-p0-0-3.parquet", _rows(HOUR, "a", 4))
    own = _write(settings, SINCE, "events-p0-4-5.parquet", _rows(SINCE, "b", 2, offset=4))

    first = validate_raw(settings, CUTOFF, SINCE, "run-1")

    assert first.success
    assert sorted(first.files) == sorted(_relative(settings, p) for p in (older, own))
    assert _recorded(settings) == {_relative(settings, p): file_digest(p) for p in (older, own)}
    assert first.summary().splitlines()[0] == (
        "validation of the raw log read by run run-1 (ingested before 2026-11-22 03:00:00 UTC): passed; "
        "checked 2 new or changed file(s) of the 2 the run reads (0 validated before, unchanged): 6 rows, "
        "2 of them ingested in the run's interval [2026-11-22 02:00:00 UTC, 2026-11-22 03:00:00 UTC)"
    )

    again = validate_raw(settings, CUTOFF, SINCE, "run-2")

    assert again.success and again.outcomes == () and again.files == ()
    assert "no new or changed raw file: the 2 file(s) the run reads were validated before" in again.summary()

    os.utime(older)  # touched, not changed: its bytes are the validated ones
    touched = validate_raw(settings, CUTOFF, SINCE, "run-3")

    assert touched.files == ()
    _write(settings, HOUR, older.name, _rows(HOUR, "c", 3))  # rewritten with other (valid) rows

    rewritten = validate_raw(settings, CUTOFF, SINCE, "run-4")

    assert rewritten.success and rewritten.files == (_relative(settings, older),)
    assert f"{_relative(settings, older)} changed since it was validated: checked again" in rewritten.notes
    assert "0 of them ingested in the run's interval" in rewritten.summary()  # 3 rows, none of 02:00
    assert _recorded(settings)[_relative(settings, older)] == file_digest(older)


def test_a_bad_file_of_an_earlier_interval_fails_the_run_and_is_not_recorded(settings: Settings) -> None:
    own = _write(settings, SINCE, "events-p0-0-1.parquet", _rows(SINCE, "a", 2))
    validate_raw(settings, CUTOFF, SINCE, "run-1")
    # A file of an hour no run's interval covered (a skipped interval), with a row without event_id.
    bad_rows = _rows(HOUR, "b", 3, offset=10)
    bad_rows[1]["event_id"] = None
    bad = _write(settings, HOUR, "events-p1-10-12.parquet", bad_rows)

    report = validate_raw(settings, CUTOFF, SINCE, "run-2")

    assert not report.success
    assert report.files == (_relative(settings, bad),)
    assert "event_id is present: 1 of 3 rows break it" in report.failures[0]
    assert _relative(settings, bad) in report.failures[0]
    assert set(_recorded(settings)) == {_relative(settings, own)}
    assert report.summary().startswith("validation of the raw log read by run run-2")
    assert "FAILED (1 expectations); checked 1 new or changed file(s)" in report.summary().splitlines()[0]


def test_a_run_reads_only_the_files_holding_rows_before_its_cutoff(settings: Settings) -> None:
    before = _write(settings, SINCE, "events-p0-0-1.parquet", _rows(SINCE, "a", 2))
    straddling = _write(
        settings, SINCE, "events-p0-2-3.parquet", _rows(CUTOFF - 2_001, "b", 2, offset=2)
    )  # one row before the cutoff, one after
    after = _write(settings, SINCE, "events-p0-4-5.parquet", _rows(CUTOFF, "c", 2, offset=4))
    broken = settings.raw_dir / "ingest_date=2026-11-22" / "ingest_hour=02" / "events-p0-9-9.parquet"
    broken.write_bytes(b"PAR1 not really parquet")

    assert [may_hold_rows_before(p, CUTOFF) for p in (before, straddling, after, broken)] == [
        True,
        True,
        False,
        True,  # unreadable: read (and reported by validation), never skipped
    ]
    assert run_inputs(settings.raw_dir, CUTOFF) == sorted([before, broken, straddling])


def test_a_file_that_appears_or_changes_after_validation_stops_the_run(settings: Settings) -> None:
    own = _write(settings, SINCE, "events-p0-0-1.parquet", _rows(SINCE, "a", 2))
    validate_raw(settings, CUTOFF, SINCE, "run-1")
    # Filed under an hour the run reads, but ingested at or after its cutoff: not read.
    _write(settings, SINCE, "events-p0-2-3.parquet", _rows(CUTOFF, "b", 2, offset=2))

    assert require_validated_inputs(settings.raw_dir, settings.store_url, CUTOFF, "run-1").pending == ()

    late = _write(settings, HOUR, "events-p0-7-7.parquet", _rows(HOUR, "c", 1, offset=7))
    with pytest.raises(UnvalidatedInputs, match=r"run 'run-1' read 1 raw file\(s\) that are not validated"):
        require_validated_inputs(settings.raw_dir, settings.store_url, CUTOFF, "run-1")
    late.unlink()
    _write(settings, SINCE, own.name, _rows(SINCE, "d", 2))
    with pytest.raises(UnvalidatedInputs, match=r"events-p0-0-1\.parquet"):
        require_validated_inputs(settings.raw_dir, settings.store_url, CUTOFF, "run-1")
