"""`python -m bench.counter_cpu`: each way of setting the collector counts the same traffic to the
same counts, and a run prints and writes the figures of both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import counter_cpu

pytestmark = pytest.mark.integration


def test_both_ways_count_the_same_and_the_figures_are_written(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["--events", "4000", "--batch-records", "20", "--runs", "1", "--output", str(out)]
    result = counter_cpu.main(args)

    counted = [run[0]["counted"] for run in result["each_run"].values()]
    assert counted[0] == counted[1]
    assert counted[0]["events"] == 4000 and counted[0]["views"] > 0
    for way in counter_cpu.WAYS:
        assert result[f"{way}_counter_us_per_event"] > 0
        pauses = [result[f"{way}_plan_ms_{q}"] for q in ("p50", "p99", "max")]
        assert 0 < pauses[0] <= pauses[1] <= pauses[2], pauses
        # the state's dicts alone hold more than nothing an event, and less than the whole worker
        assert 0 < result[f"{way}_build_copies_bytes_per_event"] < 1000
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
