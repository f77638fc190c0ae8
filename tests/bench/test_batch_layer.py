"""`python -m bench.batch_layer`: Spark against the DuckDB rules query on one generated log, run as
its own process (each Spark run starts a JVM of its own)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.batch_layer import in_new_process
from tests.bench.processes import run_bench

# Not serial: the test checks what the benchmark counts and that its figures are there, not their
# values, so it runs beside the others (the figures of record come from `python -m bench.…` alone).
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("batch_layer", *args)


def test_both_engines_run_alternately_and_agree_on_every_video(tmp_path: Path) -> None:
    output = tmp_path / "batch_layer.json"

    options = ["--events", "3000", "--seed", "3", "--repeat", "2"]
    run = _run(*options, "--data-dir", str(tmp_path), "--output", str(output))

    assert run.returncode == 0, run.stderr[-2_000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == json.loads(output.read_text())
    assert result["per_video_equal"] and result["videos_differing"] == 0
    assert result["events"] == 3000 and result["videos"] > 0 and result["counted_views"] > 0
    assert len(result["duckdb_runs_seconds"]) == len(result["spark_runs_seconds"]) == 2
    assert min(result["spark_runs_seconds"]) <= result["spark_seconds"] <= max(result["spark_runs_seconds"])
    assert run.stderr.count("counting with Spark") == 2


def test_a_repeat_below_one_is_refused_with_the_value() -> None:
    run = _run("--repeat", "0")

    assert run.returncode == 2
    assert "--repeat must be a whole number, at least 1 (got '0')" in run.stderr


def test_each_run_is_a_process_of_its_own() -> None:
    first, second = in_new_process(os.getpid), in_new_process(os.getpid)

    assert os.getpid() not in (first, second) and first != second
