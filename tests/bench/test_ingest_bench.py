"""The ingest benchmark in its quickest mode against a real stack of its own: its figures are there
for one and two ingest processes, and no acknowledged write was lost or counted unlike the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import ingest

# Not serial: the test checks what the benchmark counts and that its figures are there, not their
# values, so it runs beside the others (the figures of record come from `python -m bench.…` alone).
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_quick_ingest_bench_reports_its_figures_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    result = ingest.main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    for field in (
        "like_p99_ms",
        "like_requests_per_s",
        "single_event_p99_ms",
        "batch_events_per_s",
        "like_ingest_cpu_us",
        "batch_ingest_cpu_us_per_event",
        "broker_cpu_us_per_event",
    ):
        assert result[field] > 0, field
    assert set(result["per_workers"]) == {"1", "2"}
    for figures in result["per_workers"].values():
        assert figures["like_requests_per_s"] > 0
        assert figures["batch_events_per_s"] > 0
    assert result["machine"]["cpus"] >= 1
    assert result["machine"]["cpu_model"]
    for run in result["runs"].values():
        check = run["check"]
        assert check["acknowledged_likes_missing_from_log"] == 0
        assert check["acknowledged_batch_events_missing_from_log"] == 0
        assert check["acknowledged_single_events_missing_from_log"] == 0
        assert check["videos_counted_unlike_oracle"] == 0
        assert check["events_archived"] >= check["events_acknowledged"] > 0
    assert result["lost_acknowledged_writes"] == 0
    assert result["ok"] is True
