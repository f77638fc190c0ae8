"""The two gates of a batch run: the raw partitions of an interval before the job, the job's
outputs before the baseline is published. Each keeps its results as data docs under
`settings.quality_dir`; `require_valid` turns a failed report into `ValidationFailed`."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from batch_layer.load import baseline_path, daily_path
from batch_layer.series import series_path
from counting.settings import Settings
from quality import frames, suites
from quality.context import docs_index, open_context, run_suite
from quality.errors import ValidationFailed
from quality.report import SuiteOutcome, ValidationReport
from warehouse.baseline import Baseline


def _moment(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def validate_raw(settings: Settings, cutoff_ms: int, since_ms: int) -> ValidationReport:
    """Check every file of the hour partitions overlapping the ingestion interval [since, cutoff),
    one UTC day of partitions at a time (every rule is about one row or one file)."""
    what = f"the raw log ingested in [{_moment(since_ms)}, {_moment(cutoff_ms)})"
    files = frames.raw_files(settings.raw_dir, since_ms, cutoff_ms)
    if not files:
        return ValidationReport(what=what, notes=("no raw partitions in the interval: nothing to check",))
    by_day: dict[str, list[Path]] = defaultdict(list)
    for path in files:
        by_day[path.parent.parent.name.removeprefix("ingest_date=")].append(path)
    context = open_context(settings.quality_dir)
    outcomes = [
        run_suite(
            context,
            suites.raw_log_suite(),
            frames.raw_frame(settings.raw_dir, day_files),
            run_name=f"raw-{since_ms}-{cutoff_ms}-{day}",
            index_columns=[suites.FILE],
        )
        for day, day_files in sorted(by_day.items())
    ]
    return ValidationReport(
        what=what,
        outcomes=tuple(outcomes),
        docs_index=docs_index(settings.quality_dir),
        files=tuple(path.relative_to(settings.raw_dir).as_posix() for path in files),
    )


def _growth_rule(cutoff_ms: int, rules_version: str, previous: Baseline | None) -> tuple[bool, str | None]:
    """Whether views must not fall below the served baseline's, and why not when they need not."""
    if previous is None:
        return False, "no baseline is served yet: views are not compared with a previous run"
    if previous.rules_version != rules_version:
        return False, (
            f"the served baseline counted with rules {previous.rules_version}, this run with "
            f"{rules_version}: views may fall after a rules change, so they are not compared"
        )
    if previous.cutoff > cutoff_ms:
        return False, (
            f"the served baseline's cutoff {previous.cutoff} is later than this run's {cutoff_ms}: "
            "views are not compared (and the run will not replace it)"
        )
    return True, None


def validate_outputs(
    settings: Settings, run_id: str, cutoff_ms: int, rules_version: str, previous: Baseline | None
) -> ValidationReport:
    """Check a computed, unpublished run against the log and against `previous` (the served
    baseline): no negative counts, unique viewers <= views, rejected + counted + repeat views =
    the log's qualified views, the daily and per-bucket outputs add up, views never decrease."""
    check_growth, note = _growth_rule(cutoff_ms, rules_version, previous)
    previous_views = {v: row.views for v, row in previous.rows.items()} if previous and check_growth else {}
    context = open_context(settings.quality_dir)
    baseline = frames.baseline_frame(
        baseline_path(settings, run_id),
        daily_path(settings, run_id),
        series_path(settings, run_id),
        frames.qualified_views(settings.raw_dir, cutoff_ms),
        previous_views,
    )
    outcomes: list[SuiteOutcome] = [
        run_suite(
            context,
            suites.batch_baseline_suite(check_growth),
            baseline,
            run_name=run_id,
            index_columns=["video_id"],
        ),
        run_suite(
            context,
            suites.batch_daily_suite(run_id, rules_version),
            frames.daily_frame(daily_path(settings, run_id)),
            run_name=run_id,
            index_columns=["date", "video_id"],
        ),
    ]
    return ValidationReport(
        what=f"the outputs of batch run {run_id} (cutoff {_moment(cutoff_ms)})",
        outcomes=tuple(outcomes),
        notes=(note,) if note else (),
        docs_index=docs_index(settings.quality_dir),
    )


def require_valid(report: ValidationReport) -> ValidationReport:
    """The report if it passed; else raise `ValidationFailed` carrying it."""
    if not report.success:
        raise ValidationFailed(report)
    return report
