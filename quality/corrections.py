"""Corrections: the views a run takes back from the served baseline by judging again what it had
counted (a bot window that a later event filled, e.g. an address's agents within the hour). With
every validated file of the log still in place, such a fall is the rules at work, not a loss: the
output gate allows it view by view and the run records which views and which rule."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq

from warehouse.baseline import Baseline
from warehouse.explanations import EXPLAINED_SCHEMA, REFUSED, explained_path

# The views taken back that a record lists by id, per video (all are counted in `taken_back_count`).
LISTED = 1_000


def _refused(batch_dir: Path, run_id: str, videos: list[str], before: int) -> dict[str, dict[str, str]]:
    """The views of `videos` ingested before `before` that the run refused: per video, event id ->
    the reason (empty when the run kept no explanations)."""
    path = explained_path(batch_dir, run_id)
    if not path.is_dir() or not videos:
        return {}
    condition = (
        ds.field("video_id").isin(videos)
        & (ds.field("verdict") == REFUSED)
        & (ds.field("ingest_ts") < before)
    )
    table = ds.dataset(path, format="parquet", schema=EXPLAINED_SCHEMA).to_table(
        columns=["video_id", "event_id", "reason"], filter=condition
    )
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for row in table.to_pylist():
        found[row["video_id"]][row["event_id"]] = row["reason"]
    return found


def taken_back(
    batch_dir: Path, previous: Baseline, run_id: str, views: Mapping[str, int]
) -> dict[str, dict[str, Any]]:
    """Per video whose `views` fell below the served baseline's: the served and new views, and the
    views ingested before the served cutoff that this run refuses and the served run did not: how
    many, by reason, and the first `LISTED` by id with their reason. A video whose fall those views
    do not explain is still listed (`unexplained` > 0): the output gate refuses it."""
    fallen = sorted(v for v, row in previous.rows.items() if views.get(v, 0) < row.views)
    now = _refused(batch_dir, run_id, fallen, previous.cutoff)
    before = _refused(batch_dir, previous.run_id, fallen, previous.cutoff)
    corrections: dict[str, dict[str, Any]] = {}
    for video in fallen:
        back = sorted((e, r) for e, r in now.get(video, {}).items() if e not in before.get(video, {}))
        fall = previous.rows[video].views - views.get(video, 0)
        by_reason: dict[str, int] = defaultdict(int)
        for _, reason in back:
            by_reason[reason] += 1
        corrections[video] = {
            "served_views": previous.rows[video].views,
            "views": views.get(video, 0),
            "taken_back_count": len(back),
            "by_reason": dict(sorted(by_reason.items())),
            "taken_back": [{"event_id": e, "reason": r} for e, r in back[:LISTED]],
            "unexplained": max(0, fall - len(back)),
        }
    return corrections


def explained_floor(previous: Baseline, corrections: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """The views each video must keep at least: the served ones less those the run took back."""
    return {
        video: row.views - int(corrections[video]["taken_back_count"]) if video in corrections else row.views
        for video, row in previous.rows.items()
    }


def summary(corrections: Mapping[str, Mapping[str, Any]], shown: int = 5) -> str:
    """The corrections in words, for the run's report."""
    views = sum(int(c["taken_back_count"]) for c in corrections.values())
    reasons: dict[str, int] = defaultdict(int)
    for correction in corrections.values():
        for reason, n in correction["by_reason"].items():
            reasons[reason] += n
    by_reason = ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
    videos = ", ".join(
        f"{v} {c['served_views']} -> {c['views']}" for v, c in list(sorted(corrections.items()))[:shown]
    )
    more = ", ..." if len(corrections) > shown else ""
    return (
        f"the rules took back {views} view(s) the served baseline counted ({by_reason}): "
        f"{len(corrections)} video(s) fell ({videos}{more}); recorded with the run"
    )


def comparable(previous: Baseline | None, cutoff_ms: int, rules_version: str) -> bool:
    """Whether a run's views are held to the served baseline's: same rules, a cutoff not earlier."""
    return previous is not None and previous.rules_version == rules_version and previous.cutoff <= cutoff_ms


def run_corrections(
    batch_dir: Path,
    baseline: Path,
    run_id: str,
    cutoff_ms: int,
    rules_version: str,
    previous: Baseline | None,
) -> dict[str, dict[str, Any]]:
    """`taken_back` for a computed run (its baseline file at `baseline`) against the served
    baseline, when the two are comparable; else none."""
    if previous is None or not comparable(previous, cutoff_ms, rules_version):
        return {}
    table = pq.read_table(baseline, columns=["video_id", "views"])
    views = dict(zip(table["video_id"].to_pylist(), table["views"].to_pylist(), strict=True))
    return taken_back(batch_dir, previous, run_id, views)
