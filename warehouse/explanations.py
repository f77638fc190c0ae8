"""Why a batch run refused or flagged each view: its score and the signals that fired, kept per run
(`batch/<run>/explained/`) and read here without Spark (the admin routes, the warehouse)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

EXPLAINED_DIR = "explained"
REFUSED = "rejected"  # not counted: the score reached the rules' reject threshold
FLAGGED = "flagged"  # counted, with a score in the soft band

EXPLAINED_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("video_id", pa.string()),
        ("ts", pa.int64()),
        ("ingest_ts", pa.int64()),
        ("viewer", pa.string()),
        ("verdict", pa.string()),
        ("reason", pa.string()),
        ("score", pa.float64()),
        ("signals", pa.list_(pa.string())),
        ("reject_score", pa.float64()),
        ("soft_score", pa.float64()),
        ("rules_version", pa.string()),
    ]
)


def explained_path(batch_dir: Path, run_id: str) -> Path:
    return batch_dir / run_id / EXPLAINED_DIR


def _read(batch_dir: Path, run_id: str, condition: ds.Expression) -> list[dict[str, Any]] | None:
    """The explained views of a run that meet `condition`, or None if the run kept none (a run of
    a version before explanations, or a run whose outputs were removed)."""
    path = explained_path(batch_dir, run_id)
    if not path.is_dir():
        return None
    dataset = ds.dataset(path, format="parquet", schema=EXPLAINED_SCHEMA)
    return dataset.to_table(filter=condition).to_pylist()


def explanation_of(batch_dir: Path, run_id: str, event_id: str) -> dict[str, Any] | None:
    """The run's explanation of one view (None: the run neither refused nor flagged it); raises
    `FileNotFoundError` when the run kept no explanations."""
    found = _read(batch_dir, run_id, ds.field("event_id") == event_id)
    if found is None:
        raise FileNotFoundError(explained_path(batch_dir, run_id))
    return found[0] if found else None


def explanations_of_video(batch_dir: Path, run_id: str, video_id: str) -> list[dict[str, Any]] | None:
    """The run's explained views of one video, newest ingestion first (None: no explanations kept)."""
    found = _read(batch_dir, run_id, ds.field("video_id") == video_id)
    if found is None:
        return None
    return sorted(found, key=lambda row: (row["ingest_ts"] or 0, row["event_id"]), reverse=True)
