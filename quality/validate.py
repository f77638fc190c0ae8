"""The two gates of a batch run: the raw partitions of an interval before the job, the job's
outputs before the baseline is published. Each keeps its results as data docs under
`settings.quality_dir`; `require_valid` turns a failed report into `ValidationFailed`."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from counting.batchpaths import baseline_path, daily_path, series_path
from counting.settings import Settings
from quality import corrections, frames, inputs, suites
from quality.context import docs_index, open_context, run_suite
from quality.errors import ValidationFailed
from quality.report import SuiteOutcome, ValidationReport
from warehouse.baseline import Baseline

_SHOWN = 5  # videos named in a note before "..."


def _moment(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _interval(since_ms: int, cutoff_ms: int) -> str:
    return f"[{_moment(since_ms)}, {_moment(cutoff_ms)})"


def _scope(check: inputs.InputCheck, frame_rows: int, interval_rows: int | None, interval: str) -> str:
    """What a raw validation checked, in words: the files and rows, and how many of those rows the
    run's own interval received (not the rows of whole hour partitions)."""
    checked = len(check.pending)
    text = (
        f"checked {checked} new or changed file(s) of the {check.read} the run reads "
        f"({len(check.validated)} validated before, unchanged): {frame_rows} rows"
    )
    if interval_rows is not None:
        text += f", {interval_rows} of them ingested in the run's interval {interval}"
    return text


def validate_raw(
    settings: Settings, cutoff_ms: int, since_ms: int | None = None, run_id: str = "the run"
) -> ValidationReport:
    """Check every raw file a run at `cutoff_ms` reads (rows ingested before it, in any partition)
    that is not yet validated with its current checksum: new files, files of intervals no run
    validated (skipped, paused, backfilled), and files changed since. On success they are recorded
    as validated (`validated_files` in the relational store, which must be migrated); on failure
    nothing is. `since_ms` (the run's interval start) only words the report. Rules are about one
    row or one file, so the files are checked one UTC day of partitions at a time."""
    what = f"the raw log read by run {run_id} (ingested before {_moment(cutoff_ms)})"
    check = inputs.check_inputs(settings.raw_dir, cutoff_ms, inputs.known_files(settings.store_url))
    inputs.require_present(check, run_id)
    interval = _interval(since_ms, cutoff_ms) if since_ms is not None else ""
    if not check.pending:
        if check.restated:
            inputs.record(settings.store_url, check.restated)
        scope = (
            f"no new or changed raw file: the {check.read} file(s) the run reads were validated before"
            if check.read
            else "no raw file holds a row ingested before the cutoff: nothing to check"
        )
        if since_ms is not None:
            scope += f", so none holds a row ingested in the run's interval {interval}"
        return ValidationReport(what=what, scope=scope)
    by_day: dict[str, list[Path]] = defaultdict(list)
    for pending in check.pending:
        by_day[pending.path.split("/", 1)[0].removeprefix("ingest_date=")].append(
            settings.raw_dir / pending.path
        )
    context = open_context(settings.quality_dir)
    outcomes: list[SuiteOutcome] = []
    rows_by_file: dict[str, int] = {}
    interval_rows = 0
    broken = frames.unreadable(settings.raw_dir / p.path for p in check.pending)
    if broken:
        outcomes.append(_unreadable_outcome(settings.raw_dir, broken))
    for day, day_files in sorted(by_day.items()):
        day_files = [path for path in day_files if path not in broken]
        if not day_files:
            continue
        frame = frames.raw_frame(settings.raw_dir, day_files)
        rows_by_file.update(frame.groupby(suites.FILE).size().to_dict())
        if since_ms is not None:
            ingested = frame["ingest_ts"]
            interval_rows += int(((ingested >= since_ms) & (ingested < cutoff_ms)).fillna(False).sum())
        outcomes.append(
            run_suite(
                context,
                suites.raw_log_suite(),
                frame,
                run_name=f"raw-{run_id}-{day}",
                index_columns=[suites.FILE],
            )
        )
    frame_rows = sum(o.rows for o in outcomes)
    report = ValidationReport(
        what=what,
        outcomes=tuple(outcomes),
        docs_index=docs_index(settings.quality_dir),
        files=tuple(p.path for p in check.pending),
        scope=_scope(check, frame_rows, interval_rows if since_ms is not None else None, interval),
        notes=tuple(f"{path} changed since it was validated: checked again" for path in check.changed),
    )
    if not report.success:
        report = replace(report, notes=(*report.notes, *_way_forward(report)))
    if report.success:
        now = datetime.now(UTC)
        passed = [p.validated(int(rows_by_file.get(p.path, 0)), now, run_id) for p in check.pending]
        inputs.record(settings.store_url, [*passed, *check.restated])
    return report


def _unreadable_outcome(raw_dir: Path, broken: dict[Path, str]) -> SuiteOutcome:
    """One failure per file that is no Parquet file, instead of one per rule its missing rows break."""
    named = {path.relative_to(raw_dir).as_posix(): reason for path, reason in sorted(broken.items())}
    return SuiteOutcome(
        suite=suites.RAW_LOG,
        rows=0,
        failures=tuple(f"not a readable Parquet file: {path} ({reason})" for path, reason in named.items()),
        failing=tuple(named),
    )


def _way_forward(report: ValidationReport) -> tuple[str, ...]:
    """What an operator can do about a failed raw gate: repair the files, or quarantine them."""
    files = report.failing
    if not files:
        return ()
    return (
        f"files with failing rows: {', '.join(files)}",
        "nothing was published; repair the file(s), or take each out of the log so that runs go on "
        "without it (recorded with every run, its events counted again once released): "
        "tally batch quarantine FILE --reason '…' (then 'tally batch release FILE --reason …')",
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


def _fallen(frame: pd.DataFrame) -> str:
    """How far views fell below the served baseline's, in words (for the note of an allowed fall)."""
    fell = frame[frame["views"] < frame[suites.PREVIOUS_VIEWS]]
    if fell.empty:
        return "no video's views fell"
    lost = int((fell[suites.PREVIOUS_VIEWS] - fell["views"]).sum())
    shown = ", ".join(
        f"{row.video_id} {getattr(row, suites.PREVIOUS_VIEWS)} -> {row.views}"
        for row in fell.head(_SHOWN).itertuples()
    )
    more = ", ..." if len(fell) > _SHOWN else ""
    return f"{len(fell)} video(s) fell by {lost} views in all ({shown}{more})"


def validate_outputs(
    settings: Settings,
    run_id: str,
    cutoff_ms: int,
    rules_version: str,
    previous: Baseline | None,
    allow_decrease_reason: str | None = None,
) -> ValidationReport:
    """Check a computed, unpublished run against the log and against `previous` (the served
    baseline): no negative counts, unique viewers <= views, rejected + counted + repeat views =
    the log's qualified views, the daily and per-bucket outputs add up, views never fall below the
    served ones but by the views the rules took back (`quality.corrections`).

    With `allow_decrease_reason` (an operator's words, after a data repair) views may fall below
    the served ones: the report notes the reason and how far they fell instead of failing."""
    check_growth, note = _growth_rule(cutoff_ms, rules_version, previous)
    reason = (allow_decrease_reason or "").strip()
    allowed = check_growth and bool(reason)
    check_growth = check_growth and not allowed
    taken: dict[str, dict[str, Any]] = {}
    previous_views: dict[str, int] = {}
    if previous is not None and allowed:  # held to nothing: the fall is only reported
        previous_views = {video: row.views for video, row in previous.rows.items()}
    elif previous is not None and check_growth:
        taken = corrections.run_corrections(
            settings.batch_dir, baseline_path(settings, run_id), run_id, cutoff_ms, rules_version, previous
        )
        previous_views = corrections.explained_floor(previous, taken)
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
    if taken:
        note = corrections.summary(taken)
    if allowed:
        note = (
            f"views may fall below the served baseline's, allowed by the operator: {reason!r}; "
            f"{_fallen(baseline)}"
        )
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
