"""`python -m bench.interval_run`: logs of two spans as the local stack leaves them (closed hours
compacted, the last as the archiver wrote it), the batch job's time on each, and their ratio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.processes import run_bench

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_closed_hours_are_one_file_a_partition_and_each_log_is_timed(tmp_path: Path) -> None:
    output = tmp_path / "interval_run.json"
    args = ("--hours", "1", "3", "--rate", "1", "--flush-ms", "600000", "--repeat", "1")
    run = run_bench("interval_run", *args, "--output", str(output))
    assert run.returncode == 0, run.stderr[-2_000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == json.loads(output.read_text())
    short, long = result["per_log"]
    assert (short["hours"], long["hours"]) == (1, 3)
    assert short["files_compacted_hours"] == 0  # one hour: the last, as written
    assert long["files_compacted_hours"] == 2 * 4  # two closed hours, a file per partition each
    # A file per partition a flush of the last hour: 6 flushes of 600 events over 4 partitions.
    assert 4 * 6 <= short["files_last_hour"] == short["files"] <= 4 * 7
    assert long["files"] == long["files_compacted_hours"] + long["files_last_hour"]
    assert all(log["job_seconds"] > 0 and len(log["job_runs_seconds"]) == 1 for log in (short, long))
    assert result["job_seconds_ratio"] == round(long["job_seconds"] / short["job_seconds"], 2)
