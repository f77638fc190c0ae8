"""`python -m bench.log_files`: one log written as two flush intervals split it, the batch job's
Spark work on each, the same counts from both."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.bench.processes import run_bench

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("log_files", *args)


def test_a_longer_flush_writes_a_tenth_of_the_files_and_the_job_counts_the_same(tmp_path: Path) -> None:
    output = tmp_path / "log_files.json"
    run = _run("--events", "2000", "--repeat", "1", "--output", str(output))
    assert run.returncode == 0, run.stderr[-2_000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == json.loads(output.read_text())
    short, long = result["per_flush"]
    assert (short["flush_ms"], long["flush_ms"]) == (1_000, 10_000)
    assert 8 * long["files"] <= short["files"] <= 12 * long["files"]  # a file per partition a flush
    assert short["files_per_hour"] == pytest.approx(short["files"] / result["hours_of_ingest"], rel=0.01)
    assert result["per_video_equal"] is True
    assert all(f["job_seconds"] > 0 and len(f["job_runs_seconds"]) == 1 for f in (short, long))
    assert result["job_seconds_ratio"] == round(short["job_seconds"] / long["job_seconds"], 2)


def test_a_count_below_one_is_refused_with_the_value() -> None:
    run = _run("--repeat", "0")
    assert run.returncode == 2
    assert "must be a whole number, at least 1 (got '0')" in run.stderr
