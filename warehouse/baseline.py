"""The batch baseline: per-video exact counts as of a cutoff, published atomically.

Each run writes `baselines/<run_id>/baseline.parquet` aside, then one `os.replace` of the
`CURRENT` pointer file switches readers to it together with its cutoff. A run that fails before
the switch leaves the previous baseline serving.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from counting.batchpaths import BASELINE_FILE
from counting.counts import COUNT_FIELDS, VideoCounts
from counting.signals import REASONS
from warehouse.errors import BaselineError

POINTER = "CURRENT"
# A run's folder under the batch directory that holds each creator's exact unique viewers as of its
# cutoff (creator_id, unique_viewers): written by the batch, read by the serving layer.
COUNT_COLUMNS: tuple[str, ...] = COUNT_FIELDS


def rejected_column(reason: str) -> str:
    """The column of a baseline or daily table that holds a reason's rejected views."""
    return f"rejected_{reason}"


REJECTED_COLUMNS: tuple[str, ...] = tuple(rejected_column(r) for r in REASONS)


@dataclass(frozen=True)
class BaselineRow(VideoCounts):
    """Exact counts of one video (`counting.counts.VideoCounts`) as of the baseline's cutoff, with
    its id: `BaselineRow(video_id, views=..., ...)`."""

    video_id: str


@dataclass(frozen=True)
class Baseline:
    """A published baseline: its run, cutoff (ms, on a bucket edge), rules version and rows."""

    run_id: str
    cutoff: int
    rules_version: str
    published_at: int
    rows: dict[str, BaselineRow]

    def get(self, video_id: str) -> BaselineRow:
        return self.rows.get(video_id) or BaselineRow(video_id)


def baseline_schema() -> pa.Schema:
    return pa.schema(
        [("video_id", pa.string())]
        + [(c, pa.int64()) for c in COUNT_COLUMNS]
        + [(c, pa.int64()) for c in REJECTED_COLUMNS]
    )


def _row_dict(row: BaselineRow) -> dict[str, object]:
    data: dict[str, object] = {"video_id": row.video_id, **row.count_fields()}
    for reason in REASONS:
        data[rejected_column(reason)] = row.rejected.get(reason, 0)
    return data


def write_table(path: Path, table: pa.Table) -> None:
    """Write a baseline table to `path` via a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    pq.write_table(table.cast(baseline_schema()), tmp)
    _fsync(tmp)
    os.replace(tmp, path)


def rows_table(rows: list[BaselineRow]) -> pa.Table:
    ordered = sorted(rows, key=lambda r: r.video_id)
    return pa.Table.from_pylist([_row_dict(r) for r in ordered], schema=baseline_schema())


def publish_baseline(
    baselines_dir: Path, run_id: str, cutoff: int, rules_version: str, published_at: int
) -> None:
    """Switch readers to the baseline already written at `baselines/<run_id>/baseline.parquet`."""
    data = baselines_dir / run_id / BASELINE_FILE
    if not data.exists():
        raise BaselineError(f"no baseline data at {data}: write it before publishing run {run_id!r}")
    pointer = {
        "run_id": run_id,
        "cutoff": cutoff,
        "rules_version": rules_version,
        "published_at": published_at,
        "path": str(data.relative_to(baselines_dir)),
    }
    tmp = baselines_dir / f".{POINTER}.{run_id}.tmp"
    tmp.write_text(json.dumps(pointer, sort_keys=True))
    _fsync(tmp)
    os.replace(tmp, baselines_dir / POINTER)


def read_pointer(baselines_dir: Path) -> dict[str, object] | None:
    pointer = baselines_dir / POINTER
    if not pointer.exists():
        return None
    loaded: dict[str, object] = json.loads(pointer.read_text())
    return loaded


def current_baseline(baselines_dir: Path) -> Baseline | None:
    """The published baseline, or None when no batch has published one yet."""
    pointer = read_pointer(baselines_dir)
    if pointer is None:
        return None
    table = pq.read_table(baselines_dir / str(pointer["path"]))
    rows: dict[str, BaselineRow] = {}
    for item in table.to_pylist():
        # A baseline of an earlier version has no column for a reason or a count added since
        # (`flagged`): none rejected for it, none flagged.
        rejected = {r: int(item[rejected_column(r)]) for r in REASONS if item.get(rejected_column(r))}
        rows[item["video_id"]] = BaselineRow(
            video_id=item["video_id"],
            rejected=rejected,
            **{c: int(item.get(c) or 0) for c in COUNT_COLUMNS},
        )
    return Baseline(
        run_id=str(pointer["run_id"]),
        cutoff=int(str(pointer["cutoff"])),
        rules_version=str(pointer["rules_version"]),
        published_at=int(str(pointer["published_at"])),
        rows=rows,
    )


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
