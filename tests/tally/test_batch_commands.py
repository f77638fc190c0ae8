"""`tally batch run`, `tally payouts write` and `tally audit payout` through the real batch (Spark,
Great Expectations, the store) on generated traffic: the README's sequence pays and the audit
proves it; a cutoff that would move serving back, or read nothing, is refused unless forced; a
repair that lowers the counts publishes only with a reason, recorded with the run. Each run shows
its stages with their times, and says what to run when it wrote no payouts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from counting.settings import Settings
from counting.traffic import catalog_rows
from tally.cli import app
from tests.batch_layer.test_batch_payouts import CUTOFF, TRAFFIC, oracle_views, traffic_events
from tests.logfiles import write_log
from tests.writers import archived_until
from warehouse.baseline import current_baseline, read_pointer
from warehouse.store import get_run, ledger_rows, open_store
from warehouse.tables import files_digest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"),
]

BUCKET_MS = 60_000
runner = CliRunner()


@pytest.fixture
def data_dir(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A data directory holding the generated traffic's log, closed up to CUTOFF; the command
    reads Redis and the bucket width from the environment, as it would on a machine."""
    monkeypatch.setenv("TALLY_REDIS_URL", redis_url)
    monkeypatch.setenv("TALLY_BUCKET_MS", str(BUCKET_MS))
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "False")
    folder = tmp_path / "data"
    write_log(Settings(data_dir=folder).raw_dir, traffic_events(TRAFFIC))
    archived_until(_settings(folder), CUTOFF)
    return folder


def _tally(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def _batch(data_dir: Path, *args: str) -> tuple[int, str]:
    return _tally("batch", "run", "--data-dir", str(data_dir), *args)


def _answer(output: str) -> dict[str, object]:
    """The JSON the command prints last (warnings and validation summaries come before it)."""
    decoded: dict[str, object] = json.loads(output[output.rfind("\n{") + 1 :])
    return decoded


def _settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, bucket_ms=BUCKET_MS)


def _stages(output: str, outcome: str = "done in") -> list[str]:
    """The stages the command said ended so (`done in`, or `FAILED after`), in order."""
    return re.findall(rf"^batch: (\S.*?) +{outcome} +\d+\.\d s", output, re.MULTILINE)


def test_the_readme_sequence_pays_and_the_audit_proves_it(data_dir: Path) -> None:
    code, output = _tally("catalog", "load", "--videos", "30", "--seed", "5", "--data-dir", str(data_dir))
    assert code == 0, output

    code, output = _batch(data_dir, "--cutoff", str(CUTOFF))  # the catalog is loaded: it pays

    assert code == 0, output
    answer = _answer(output)
    assert answer["published"] is True and answer["cutoff"] == CUTOFF
    assert "validation of the raw log read by run" in output and "passed" in output
    assert _stages(output) == [
        "validate inputs",
        "spark session",
        "read",
        "classify",
        "counts",
        "outputs",
        "validate outputs",
        "publish",
        "payouts",
        "compact log",
        "milestones",
    ]
    assert all(f"batch: {name} ..." in output for name in _stages(output))  # said as each started
    compacted = answer["log_compacted"]  # the hour before midnight is closed: its files are merged
    assert compacted["merged"] > compacted["written"] >= 1 and compacted["left"] == []
    assert re.search(
        rf"^batch: compact log +done in .*\({compacted['merged']:,} files into {compacted['written']:,}\)$",
        output,
        re.M,
    )
    assert re.search(rf"^batch: read +done in .*\({answer['events_read']:,} events\)$", output, re.M)
    assert re.search(
        rf"^batch: payouts +done in .*\({answer['payouts_written']:,} ledger rows\)$", output, re.M
    )
    assert f"batch: run {answer['run_id']} published in " in output
    assert "tally catalog load" not in output
    settings = _settings(data_dir)
    expected = oracle_views(traffic_events(TRAFFIC), CUTOFF, catalog_rows(TRAFFIC))
    with open_store(settings.store_url) as store:
        ledger = [r for creator in sorted({c for c, _ in expected}) for r in ledger_rows(store, creator)]
    assert answer["payouts_written"] == len(ledger) == len(expected)
    assert {(r.creator_id, r.day): r.monetizable_views for r in ledger} == expected
    assert {r.run_id for r in ledger} == {answer["run_id"]}
    row = max(ledger, key=lambda r: r.monetizable_views)

    code, output = _tally(
        "audit",
        "payout",
        "--creator",
        row.creator_id,
        "--date",
        row.day.isoformat(),
        "--data-dir",
        str(data_dir),
    )

    assert code == 0, output
    assert "MATCH: the ledger figure re-derives exactly from the raw log" in output
    assert f"input files: {len(row.input_files)}, list digest {files_digest(row.input_files)}" in output

    code, listed = _tally(
        "audit", "payout", "--creator", row.creator_id, "--date", row.day.isoformat(), "--files",
        "--data-dir", str(data_dir),
    )  # fmt: skip

    assert code == 0, listed
    assert all(f"{path}  {sha}" in listed for path, sha in row.input_files.items())

    code, output = _tally("payouts", "write", "--data-dir", str(data_dir))  # again: the same rows

    assert code == 0, output
    assert f"wrote {len(ledger)} payout rows of run {answer['run_id']}" in output
    with open_store(settings.store_url) as store:
        again = [r for creator in sorted({c for c, _ in expected}) for r in ledger_rows(store, creator)]
    assert [r.payout() for r in again] == [r.payout() for r in ledger]


def test_payouts_need_a_published_run(data_dir: Path) -> None:
    code, output = _tally("payouts", "write", "--data-dir", str(data_dir))
    assert code == 2
    assert "no baseline is published yet" in output
    code, output = _tally("payouts", "write", "--run-id", "nope", "--data-dir", str(data_dir))
    assert code == 2
    assert "'nope' is not a recorded batch run" in output


def test_a_cutoff_that_reads_nothing_is_refused_unless_forced(data_dir: Path) -> None:
    code, output = _batch(data_dir, "--cutoff", "0")

    assert code == 2, output
    assert "cutoff 0 reads no event" in output and "--force" in output
    assert read_pointer(_settings(data_dir).baselines_dir) is None


def test_serving_never_moves_back_without_force_and_a_fall_needs_a_reason(data_dir: Path) -> None:
    settings = _settings(data_dir)
    code, output = _batch(data_dir, "--cutoff", str(CUTOFF))
    assert code == 0, output
    served = _answer(output)["run_id"]
    assert _answer(output)["payouts_written"] is None
    assert f"no payouts: the video catalog is empty, so run {served} computed none" in output
    assert "'tally catalog load', then run 'tally batch run' again" in output
    older = CUTOFF - 10 * BUCKET_MS

    for cutoff in (older, 0):
        code, output = _batch(data_dir, "--cutoff", str(cutoff))

        assert code == 2, output
        assert f"cutoff {cutoff} is older than the served baseline's {CUTOFF}" in output
        assert "--force" in output
        pointer = read_pointer(settings.baselines_dir)
        assert pointer is not None and pointer["run_id"] == served

    # A repair: a raw file turns out not to belong in the log, and is removed.
    removed = sorted(settings.raw_dir.rglob("*.parquet"))[0]
    relative = removed.relative_to(settings.raw_dir).as_posix()
    removed.unlink()

    code, output = _batch(data_dir, "--cutoff", str(CUTOFF))

    assert code == 2, output  # a validated file gone: its views would drop out unseen
    assert "validated raw file(s) are gone from the log" in output and relative in output
    reason = f"removed {removed.name}, replayed by a load test"
    code, recorded = _tally("batch", "quarantine", relative, "--reason", reason, "--data-dir", str(data_dir))
    assert code == 0, recorded

    code, output = _batch(data_dir, "--cutoff", str(CUTOFF))

    assert code == 2, output  # recorded, but the views it held fell with no rule to take them back
    assert "views never fall below the served baseline's but by views the rules took back" in output
    assert len(_stages(output, "FAILED after")) == 1 and "batch: publish" not in output
    pointer = read_pointer(settings.baselines_dir)
    assert pointer is not None and pointer["run_id"] == served

    code, output = _batch(data_dir, "--cutoff", str(CUTOFF), "--allow-decrease", reason)

    assert code == 0, output
    repaired = str(_answer(output)["run_id"])
    assert "allowed by the operator" in output and reason in output
    with open_store(settings.store_url) as store:
        record = get_run(store, repaired)
    assert record is not None and record.published_at is not None
    assert (record.allow_decrease_reason, record.skip_validation, record.forced) == (reason, False, False)
    assert record.excluded_files == {relative: reason}

    code, output = _batch(data_dir, "--cutoff", str(older), "--force")

    assert code == 0, output
    assert "WARNING" in output and "serving moves back" in output
    forced = str(_answer(output)["run_id"])
    baseline = current_baseline(settings.baselines_dir)
    assert baseline is not None and (baseline.run_id, baseline.cutoff) == (forced, older)
    with open_store(settings.store_url) as store:
        record = get_run(store, forced)
    assert record is not None and record.forced is True

    code, output = _tally("catalog", "load", "--videos", "30", "--seed", "5", "--data-dir", str(data_dir))
    assert code == 0, output

    code, output = _batch(data_dir, "--cutoff", str(CUTOFF), "--skip-validation", "--no-payouts")

    assert code == 0, output
    assert "published WITHOUT validating" in output
    assert "validation of" not in output
    assert "validate" not in " ".join(_stages(output))
    unpaid = str(_answer(output)["run_id"])
    with open_store(settings.store_url) as store:
        record = get_run(store, unpaid)
    assert record is not None and record.skip_validation is True
    assert _answer(output)["payouts_written"] is None and "payouts" not in _stages(output)
    assert f"'tally payouts write --run-id {unpaid}' writes them to the ledger" in output

    code, output = _tally("payouts", "write", "--run-id", unpaid, "--data-dir", str(data_dir))

    assert code == 0, output
    assert re.search(rf"wrote [1-9]\d* payout rows of run {unpaid}", output)
