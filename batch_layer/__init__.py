"""The batch layer: Spark jobs that recompute exact counts from the Parquet log and publish a baseline."""

from __future__ import annotations

from counting.requires import require

require("pyspark", "batch", __name__)

from batch_layer.errors import (
    BatchError,
    CutoffNotClosed,
    CutoffNotOnBucketEdge,
    InvalidRunId,
    WatermarkUnavailable,
)
from batch_layer.job import BatchResult, compute_batch, publish_batch, run_batch
from batch_layer.progress import Progress, Stage, log_progress
from batch_layer.session import build_session
from batch_layer.transform import transform

__all__ = [
    "BatchError",
    "BatchResult",
    "CutoffNotClosed",
    "CutoffNotOnBucketEdge",
    "InvalidRunId",
    "Progress",
    "Stage",
    "WatermarkUnavailable",
    "build_session",
    "compute_batch",
    "log_progress",
    "publish_batch",
    "run_batch",
    "transform",
]
