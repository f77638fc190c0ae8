"""The batch's commands: `tally batch run`, and what a published run leads to: `tally payouts`
(the ledger), `tally audit` (a payout proved from the raw log) and `tally milestones`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console

from counting.errors import TallyError
from counting.settings import Settings
from tally.commands.common import DataDir, clear_errors, console, print_json, settings_of

batch_app = typer.Typer(help="Batch layer runs.", no_args_is_help=True)
milestones_app = typer.Typer(help="Videos reaching view-count steps, announced once.", no_args_is_help=True)
audit_app = typer.Typer(help="Re-derive figures from the raw log and prove them.", no_args_is_help=True)
payouts_app = typer.Typer(help="The creator payout ledger.", no_args_is_help=True)


@batch_app.command("run")
@clear_errors
def batch_run(
    cutoff: Annotated[
        str, typer.Option(help="cutoff in ms on a bucket edge, or 'auto' (last closed)")
    ] = "auto",
    data_dir: DataDir = None,
    payouts: Annotated[
        bool | None,
        typer.Option(
            "--payouts/--no-payouts",
            help="write the run's payouts to the ledger once it is published (default: when the "
            "video catalog is loaded)",
            show_default=False,
        ),
    ] = None,
    allow_decrease: Annotated[
        str | None,
        typer.Option(
            "--allow-decrease",
            metavar="REASON",
            help="after a data repair: publish even if views fall below the served baseline's; "
            "the reason is recorded with the run",
        ),
    ] = None,
    skip_validation: Annotated[
        bool,
        typer.Option(
            "--skip-validation", help="publish WITHOUT the data-quality gates (recorded with the run)"
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="publish a cutoff older than the served baseline's, or one that reads no event"
        ),
    ] = False,
) -> None:
    """Validate the raw files the run reads, recompute exact counts up to a closed cutoff, validate
    the outputs, publish the baseline and write the run's payouts (when the catalog is loaded).
    Each stage is shown on stderr as it runs, with its time; the run's result is printed as JSON."""
    from dataclasses import asdict

    from rich.markup import escape

    from batch_layer.progress import stage
    from tally import pipeline
    from tally.commands.stages import StageDisplay
    from tally.traffic_run import closed_cutoff

    if allow_decrease is not None and not allow_decrease.strip():
        raise typer.BadParameter("say why in words (got an empty reason)", param_hint="--allow-decrease")
    errors = Console(stderr=True)

    def loud(text: str) -> None:
        errors.print(f"[bold red]WARNING:[/bold red] {escape(text)}", soft_wrap=True)

    settings = settings_of(data_dir)
    cutoff_ms = closed_cutoff(settings) if cutoff == "auto" else _parse_cutoff(cutoff)
    display = StageDisplay(errors)
    try:
        done = pipeline.batch_run(
            settings,
            cutoff_ms,
            payouts=payouts,
            skip_validation=skip_validation,
            allow_decrease_reason=allow_decrease,
            force=force,
            warn=loud,
            progress=display,
        )
        answer = {
            **asdict(done.result),
            "published": done.published,
            "payouts_written": done.payouts_written,
            "log_compacted": done.compaction,
        }
        if done.published:
            with stage(display, "milestones"):
                answer["milestones_announced"] = _announce_milestones(settings, loud)
    finally:
        display.close()
    for summary in (done.raw_validation, done.output_validation):
        if summary is not None:
            errors.print(summary, markup=False, highlight=False, soft_wrap=True)
    if done.payouts_note is not None:
        errors.print(done.payouts_note, markup=False, highlight=False, soft_wrap=True)
    state = "published" if done.published else "computed, not published"
    errors.print(
        f"batch: run {done.result.run_id} {state} in {display.total():.1f} s", markup=False, highlight=False
    )
    print_json(answer)


@batch_app.command("compact")
@clear_errors
def batch_compact(data_dir: DataDir = None) -> None:
    """Merge the validated files of each closed hour of the raw log into one file per partition, up
    to the served baseline's cutoff ('tally batch run' and the DAGs do it after each publish). The
    raw gate and 'tally audit payout' follow the merged files' rows."""
    from tally import pipeline
    from warehouse.baseline import read_pointer

    settings = settings_of(data_dir)
    served = read_pointer(settings.baselines_dir)
    if served is None:
        raise TallyError(
            "no baseline is published yet: compaction merges only files a run validated; run "
            "'tally batch run' first (it compacts what it validated)"
        )
    print_json(pipeline.compact_log(settings, int(str(served["cutoff"]))))


@batch_app.command("quarantine")
@clear_errors
def batch_quarantine(
    file: Annotated[
        str, typer.Argument(help="the raw file, as the failed validation names it (or its full path)")
    ],
    reason: Annotated[str, typer.Option(help="why it is taken out of the log (recorded)")],
    data_dir: DataDir = None,
) -> None:
    """Take a raw file that fails validation out of the log: runs go on without its events (each
    run records the files it left out) until it is released."""
    from quality.quarantine import quarantine

    record = quarantine(settings_of(data_dir), file, reason)
    print_json(record.__dict__)


@batch_app.command("release")
@clear_errors
def batch_release(
    file: Annotated[str, typer.Argument(help="the quarantined file's log path")],
    reason: Annotated[str, typer.Option(help="why it goes back (e.g. what was repaired; recorded)")],
    data_dir: DataDir = None,
) -> None:
    """Put a quarantined file (as it now lies in the quarantine directory) back into the log: the
    next run validates it before counting its events again."""
    from quality.quarantine import release

    record = release(settings_of(data_dir), file, reason)
    print_json(record.__dict__)


@batch_app.command("quarantined")
@clear_errors
def batch_quarantined(
    data_dir: DataDir = None,
    released: Annotated[bool, typer.Option("--released", help="list the released files too")] = False,
) -> None:
    """The raw files in quarantine: path, rows, reason and when (with --released, those put back)."""
    from warehouse.migrate import migrate
    from warehouse.store import open_store, quarantined_files

    settings = settings_of(data_dir)
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        rows = [q.__dict__ for q in quarantined_files(store, active_only=not released).values()]
    print_json(rows)


def _announce_milestones(settings: Settings, warn: Callable[[str], None]) -> list[str] | None:
    """Announce what the published run reached; a failure is a warning (the run is published and
    the milestones wait in the store): the ids sent, or None."""
    from confluent_kafka import KafkaException
    from redis.exceptions import RedisError

    from tally.milestones import announce

    try:
        return announce(settings).sent
    except (TallyError, KafkaException, RedisError) as exc:
        warn(f"milestones not announced now ({exc}): run 'tally milestones announce'")
        return None


def _parse_cutoff(text: str) -> int:
    if not text.isdigit():
        raise typer.BadParameter(f"must be milliseconds since the epoch or 'auto' (got {text!r})")
    return int(text)


@milestones_app.command("announce")
@clear_errors
def milestones_announce(data_dir: DataDir = None) -> None:
    """Record the milestones the served baseline reached, send the new ones to the milestones topic
    and deliver the due webhooks (the DAG and 'tally batch run' do it after each publish)."""
    from tally.milestones import announce

    print_json(announce(settings_of(data_dir)).__dict__)


@milestones_app.command("list")
@clear_errors
def milestones_list(
    video: Annotated[str, typer.Option(help="the video id")],
    data_dir: DataDir = None,
) -> None:
    """A video's milestones and the state of their announcements."""
    from warehouse.migrate import migrate
    from warehouse.milestones import milestones_of
    from warehouse.store import open_store

    settings = settings_of(data_dir)
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        rows = [m.__dict__ for m in milestones_of(store, video)]
    print_json(rows)


@audit_app.command("payout")
@clear_errors
def audit_payout_command(
    creator: Annotated[str, typer.Option(help="creator id")],
    date: Annotated[str, typer.Option(help="UTC day, YYYY-MM-DD")],
    data_dir: DataDir = None,
    run_id: Annotated[
        str | None,
        typer.Option(help="audit this run's row (default: the current one, of the latest published run)"),
    ] = None,
    files: Annotated[
        bool, typer.Option("--files", help="list every input file of the row with its sha256")
    ] = False,
) -> None:
    """Re-derive a creator's payout for a day from the raw log and say whether the ledger holds."""
    import datetime as dt

    from batch_layer.audit import audit_payout
    from warehouse.migrate import migrate

    try:
        day = dt.date.fromisoformat(date)
    except ValueError:
        raise typer.BadParameter(f"must be a day as YYYY-MM-DD (got {date!r})", param_hint="--date") from None
    settings = settings_of(data_dir)
    migrate(settings.store_url)
    report = audit_payout(settings, creator, day, run_id=run_id)
    console.print(report.render(files=files), soft_wrap=True, markup=False, highlight=False)
    raise typer.Exit(0 if report.matches else 1)


@payouts_app.command("write")
@clear_errors
def payouts_write(
    run_id: Annotated[
        str | None, typer.Option(help="the run (default: the one whose baseline is served)")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Write a published run's payouts (computed with the run) to the ledger, replacing its rows."""
    from tally import pipeline

    run, rows = pipeline.write_run_payouts(settings_of(data_dir), run_id)
    console.print(f"wrote {rows} payout rows of run {run} to the ledger")
