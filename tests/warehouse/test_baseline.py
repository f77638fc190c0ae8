"""The baseline contract: written aside, switched atomically, read back with its cutoff."""

from __future__ import annotations

from pathlib import Path

import pytest

from warehouse.baseline import (
    BaselineRow,
    current_baseline,
    publish_baseline,
    rows_table,
    write_table,
)
from warehouse.errors import BaselineError


def _write(root: Path, run_id: str, rows: list[BaselineRow]) -> None:
    write_table(root / run_id / "baseline.parquet", rows_table(rows))


def test_no_baseline_before_the_first_publish(tmp_path: Path) -> None:
    assert current_baseline(tmp_path) is None


def test_publish_then_read_back(tmp_path: Path) -> None:
    rows = [
        BaselineRow("v2", views=3, likes=1, rejected={"scripted_agent": 4}),
        BaselineRow("v1", views=9, unique_viewers=5, short_views=2, repeat_views=1, dislikes=2),
    ]
    _write(tmp_path, "run-1", rows)
    publish_baseline(tmp_path, "run-1", 7_200_000, "2026.11.1", 7_300_000)

    baseline = current_baseline(tmp_path)

    assert baseline is not None
    assert (baseline.run_id, baseline.cutoff, baseline.rules_version) == ("run-1", 7_200_000, "2026.11.1")
    assert baseline.rows == {"v1": rows[1], "v2": rows[0]}
    assert baseline.get("unknown") == BaselineRow("unknown")


def test_written_but_unpublished_run_does_not_serve(tmp_path: Path) -> None:
    _write(tmp_path, "run-1", [BaselineRow("v1", views=1)])
    publish_baseline(tmp_path, "run-1", 3_600_000, "r", 1)
    _write(tmp_path, "run-2", [BaselineRow("v1", views=2)])

    baseline = current_baseline(tmp_path)

    assert baseline is not None
    assert (baseline.run_id, baseline.get("v1").views) == ("run-1", 1)


def test_publishing_a_run_without_data_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="run-9"):
        publish_baseline(tmp_path, "run-9", 0, "r", 0)
