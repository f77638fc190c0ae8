"""`python -m bench.batch_stages`: the batch job's actions and stages, read from a real Spark run.

It runs as its own process: the job builds and stops a SparkSession of its own, which must not be
the session other tests in this process share.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench.batch_stages import idle_seconds
from bench.batch_traffic import BenchTraffic, write_bench_log
from tests.bench.processes import run_bench

# Not serial: the test checks that every action and stage is reported and sampled, not how long
# they took, so it runs beside the others (the figures of record come from `python -m bench.…` alone).


def _run(data_dir: Path, output: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return run_bench(
        "batch_stages", "--data-dir", str(data_dir), "--output", str(output), *options, timeout=300
    )


@pytest.mark.slow
@pytest.mark.integration
def test_every_action_and_stage_of_the_job_is_reported_with_its_hottest_methods(tmp_path: Path) -> None:
    write_bench_log(tmp_path / "raw", BenchTraffic(events=3_000, seed=5))
    output = tmp_path / "stages.json"

    run = _run(tmp_path, output, "--profile")

    assert run.returncode == 0, run.stderr[-2_000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == json.loads(output.read_text())
    names = [name for name, _ in result["actions"]]
    # The job: distinct values, kept log, retries, busy pairs, baseline, then the three writes
    # (daily rows, per-bucket series, explanations).
    assert names.count("toArrow") == 2 and names.count("parquet") == 3
    assert names.count("localCheckpoint") >= 3
    assert 0 < result["actions_seconds"] <= result["job_seconds"]
    assert 0 <= result["idle_seconds"] < result["job_seconds"]
    stages = result["stages"]
    assert len(stages) >= len(names)
    assert all(s["tasks"] >= 1 and s["wall_s"] >= 0 and 0 <= s["cpu_s"] <= s["run_s"] + 1 for s in stages)
    assert result["task_cpu_seconds"] > 0
    assert "action toArrow" in run.stderr
    # The recording's task samples, by stage: each stage's top methods hold at most its samples.
    assert result["profiled"] is True
    profiled = [s["hot"] for s in stages if s["hot"]["samples"] > 0]
    assert profiled, "no stage got a task sample"
    for hot in profiled:
        assert 0 < sum(n for _, n in hot["methods"]) <= hot["samples"]
        assert all("." in method for method, _ in hot["methods"])


@pytest.mark.slow
@pytest.mark.integration
def test_without_a_log_it_says_how_to_write_one(tmp_path: Path) -> None:
    run = _run(tmp_path, tmp_path / "stages.json")

    assert run.returncode == 2
    assert f"python -m bench.batch_layer --data-dir {tmp_path}" in run.stderr
    assert not (tmp_path / "stages.json").exists()


def _stage(start_ms: float, wall_s: float) -> dict[str, Any]:
    return {"start_ms": start_ms, "wall_s": wall_s}


def test_idle_time_is_the_time_between_stages_when_none_runs() -> None:
    # 0-1 s and 0.5-2 s overlap; then nothing until 3 s; 3-4 s; nothing until 4.5 s.
    found = [_stage(3_000, 1.0), _stage(0, 1.0), _stage(500, 1.5), _stage(4_500, 0.5)]

    assert idle_seconds(found) == 1.5
    assert idle_seconds([]) == 0.0
