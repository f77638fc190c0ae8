"""`python -m bench.batch_stages`: the batch job's actions and stages, read from a real Spark run.

It runs as its own process: the job builds and stops a SparkSession of its own, which must not be
the session other tests in this process share.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.batch_traffic import BenchTraffic, write_bench_log

pytestmark = [pytest.mark.slow, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]


def _run(data_dir: Path, output: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "bench.batch_stages", "--data-dir", str(data_dir)]
    command += ["--output", str(output)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_every_action_and_stage_of_the_job_is_reported(tmp_path: Path) -> None:
    write_bench_log(tmp_path / "raw", BenchTraffic(events=3_000, seed=5))
    output = tmp_path / "stages.json"

    run = _run(tmp_path, output)

    assert run.returncode == 0, run.stderr[-2_000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == json.loads(output.read_text())
    names = [name for name, _ in result["actions"]]
    # The job: distinct values, kept log, retries, busy pairs, baseline, then the two writes.
    assert names.count("toArrow") == 2 and names.count("parquet") == 2
    assert names.count("localCheckpoint") >= 3
    assert 0 < result["actions_seconds"] <= result["job_seconds"]
    stages = result["stages"]
    assert len(stages) >= len(names)
    assert all(s["tasks"] >= 1 and s["wall_s"] >= 0 and 0 <= s["cpu_s"] <= s["run_s"] + 1 for s in stages)
    assert result["task_cpu_seconds"] > 0
    assert "action toArrow" in run.stderr


def test_without_a_log_it_says_how_to_write_one(tmp_path: Path) -> None:
    run = _run(tmp_path, tmp_path / "stages.json")

    assert run.returncode == 2
    assert f"python -m bench.batch_layer --data-dir {tmp_path}" in run.stderr
    assert not (tmp_path / "stages.json").exists()
