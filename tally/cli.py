"""The `tally` command line: the local stack, load generation, batch runs and the demo."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console

from counting.errors import TallyError
from counting.settings import Settings

if TYPE_CHECKING:
    from tally.operations import Change

app = typer.Typer(help="Tally: exact view and like counters at scale.", no_args_is_help=True)
batch_app = typer.Typer(help="Batch layer runs.", no_args_is_help=True)
app.add_typer(batch_app, name="batch")
catalog_app = typer.Typer(help="The video catalog in the relational store.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
milestones_app = typer.Typer(help="Videos reaching view-count steps, announced once.", no_args_is_help=True)
app.add_typer(milestones_app, name="milestones")


def _show_version(wanted: bool) -> None:
    if wanted:
        from counting.version import VERSION

        print(f"tally {VERSION}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", help="print the version and exit", callback=_show_version, is_eager=True),
    ] = False,
) -> None:
    """Tally: exact view and like counters at scale."""


speed_app = typer.Typer(help="The speed layer's Redis state.", no_args_is_help=True)
app.add_typer(speed_app, name="speed")
warehouse_app = typer.Typer(help="The DuckDB warehouse for analysts.", no_args_is_help=True)
app.add_typer(warehouse_app, name="warehouse")
rules_app = typer.Typer(help="The bot rules file operators edit.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")
audit_app = typer.Typer(help="Re-derive figures from the raw log and prove them.", no_args_is_help=True)
app.add_typer(audit_app, name="audit")
console = Console()
P = ParamSpec("P")
R = TypeVar("R")


def _clear_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Print a Tally error as one line saying what to do, and exit with status 2."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except TallyError as exc:
            console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def _settings(data_dir: Path | None = None, **overrides: object) -> Settings:
    """The settings of the environment and the options; the secrets left unset are the local
    stack's, from `<data dir>/run/secrets.json` (created on first use)."""
    from tally.secrets import with_local_secrets

    updates = {k: v for k, v in overrides.items() if v is not None}
    if data_dir is not None:
        updates["data_dir"] = data_dir
    return with_local_secrets(Settings(**updates))  # type: ignore[arg-type]


DataDir = Annotated[Path | None, typer.Option(help="data directory (default: TALLY_DATA_DIR or ./data)")]


Worker = Annotated[
    str,
    typer.Argument(
        help="counter, archiver, ingest, serving or broker (or redis, if the stack started it); "
        "counter-2, archiver-2, ... when the stack runs several",
        show_default=False,
    ),
]
ResetBroker = Annotated[
    bool,
    typer.Option(
        help="broker only: wipe the earlier run's log, baselines and speed state (a new local broker "
        "starts with an empty log)"
    ),
]


def _say(text: str) -> None:
    console.print(text, soft_wrap=True, markup=False, highlight=False)


def _report(change: Change) -> None:
    """One line per process a command stopped, kept or started, then its notes."""
    for process in change.stopped:
        _say(f"  {process.name:<10} pid {process.pid:<7} stopped")
    for process in change.kept:
        _say(f"  {process.name:<10} pid {process.pid:<7} already running")
    for process in change.started:
        _say(f"  {process.name:<10} pid {process.pid:<7} started, log {process.log}")
    for note in change.notes:
        _say(f"note: {note}")


@app.command()
@_clear_errors
def up(
    data_dir: DataDir = None,
    reset: Annotated[bool, typer.Option(help="start with an empty log and speed state")] = False,
    ingest_workers: Annotated[
        int | None,
        typer.Option(min=1, help="ingest API processes sharing its port (TALLY_INGEST_WORKERS, default 1)"),
    ] = None,
    serving_workers: Annotated[
        int | None,
        typer.Option(min=1, help="serving API processes sharing its port (TALLY_SERVING_WORKERS, default 1)"),
    ] = None,
    counters: Annotated[
        int | None,
        typer.Option(min=1, help="counter processes: counter, counter-2, ... (TALLY_COUNTERS, default 1)"),
    ] = None,
    archivers: Annotated[
        int | None,
        typer.Option(
            min=1, help="archiver processes: archiver, archiver-2, ... (TALLY_ARCHIVERS, default 1)"
        ),
    ] = None,
) -> None:
    """Start the local stack, or what of it is not running.

    Broker, Redis, the Faust workers and both APIs; what already runs is kept, with the settings
    it was started with (to change how many processes run, stop it with 'tally down' first)."""
    from tally.operations import bring_up, command_line

    settings = _settings(
        data_dir,
        ingest_workers=ingest_workers,
        serving_workers=serving_workers,
        counters=counters,
        archivers=archivers,
    )
    change = bring_up(settings, reset=reset)
    _report(change)
    if not change.started:
        _say("nothing to start: the whole stack runs")
    running = change.stack.settings
    _say(f"ingest API  http://{running.ingest_host}:{running.ingest_port}/docs")
    _say(f"serving API http://{running.serving_host}:{running.serving_port}/docs")
    _say(f"stop it with: {command_line(settings, 'down')}")


@app.command()
@_clear_errors
def down(data_dir: DataDir = None) -> None:
    """Stop every process the stack recorded, even after a partial start, and remove its record."""
    from tally.operations import bring_down

    settings = _settings(data_dir)
    stopped, exited = bring_down(settings)
    if not stopped and not exited:
        _say(f"nothing to stop: no stack is recorded under {settings.data_dir}")
    if stopped:
        _say(f"stopped {', '.join(p.name for p in stopped)}")
    if exited:
        _say(f"already exited: {', '.join(p.name for p in exited)}")


@app.command()
@_clear_errors
def status(data_dir: DataDir = None) -> None:
    """List the processes of the local stack and whether they run."""
    from tally.operations import command_line, stack_status

    settings = _settings(data_dir)
    rows = stack_status(settings)
    if rows is None:
        _say(f"no stack recorded under {settings.data_dir}; start one with '{command_line(settings, 'up')}'")
        return
    for name, process, state in rows:
        pid = f"pid {process.pid:<7}" if process is not None else " " * 11
        _say(f"{name:<10} {pid} {state}")


@app.command()
@_clear_errors
def start(worker: Worker, data_dir: DataDir = None, reset: ResetBroker = False) -> None:
    """Start one process of the local stack (a no-op if it runs).

    It runs with the settings the stack was started with; the command waits until it listens on
    its port. The local broker keeps nothing across restarts (memory storage): a new one starts
    with an empty log, its topics are created again and the running workers restart on it;
    --reset is needed when an earlier run left state behind."""
    from tally.operations import start_one

    _report(start_one(_settings(data_dir), worker, reset))


@app.command()
@_clear_errors
def stop(worker: Worker, data_dir: DataDir = None) -> None:
    """Stop one process of the local stack; the others keep running.

    The local broker keeps nothing across restarts (memory storage): stopping it loses its log."""
    from tally.operations import stop_one

    _report(stop_one(_settings(data_dir), worker))


@app.command()
@_clear_errors
def restart(worker: Worker, data_dir: DataDir = None, reset: ResetBroker = False) -> None:
    """Stop one process of the local stack and start it again.

    The command waits until it listens on its port (see 'tally start'). The local broker keeps
    nothing across restarts (memory storage): a restarted one starts with an empty log."""
    from tally.operations import restart_one

    _report(restart_one(_settings(data_dir), worker, reset))


@app.command()
@_clear_errors
def loadgen(
    events: Annotated[int, typer.Option(help="how many events to generate")] = 10_000,
    rate: Annotated[float, typer.Option(help="events per second")] = 500.0,
    seed: Annotated[int, typer.Option(help="random seed")] = 7,
    videos: Annotated[int, typer.Option(help="catalog size")] = 50,
    bots: Annotated[bool, typer.Option(help="add labelled bot traffic")] = True,
    out: Annotated[Path | None, typer.Option(help="write JSONL here (and a ground truth beside it)")] = None,
    post: Annotated[str | None, typer.Option(help="post to this ingest API base URL")] = None,
    data_dir: DataDir = None,
) -> None:
    """Generate realistic traffic (humans and labelled bots) to a file or the ingest API.

    Posts carry the collector key of TALLY_COLLECTOR_KEY, else of the local stack under the data
    directory."""
    from tally.traffic_run import generate_items, post_with_progress, write_jsonl

    items = generate_items(events=events, rate=rate, seed=seed, videos=videos, bots=bots)
    if out is None and post is None:
        raise typer.BadParameter("give --out FILE or --post URL (or both)", param_hint="--out/--post")
    if out is not None:
        truth = write_jsonl(items, out)
        console.print(f"wrote {len(items)} events to {out} and the ground truth to {truth}")
    if post is not None:
        sent = post_with_progress(items, post, _settings(data_dir).collector_key, console)
        console.print(f"acknowledged {len(sent.events)} events, refused {len(sent.refused)}")


@batch_app.command("run")
@_clear_errors
def batch_run(
    cutoff: Annotated[
        str, typer.Option(help="cutoff in ms on a bucket edge, or 'auto' (last closed)")
    ] = "auto",
    data_dir: DataDir = None,
    payouts: Annotated[
        bool, typer.Option("--payouts", help="write the run's payouts to the ledger once it is published")
    ] = False,
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
    the outputs and publish the baseline; with --payouts, write the run's payouts too."""
    from dataclasses import asdict

    from rich.markup import escape

    from tally import pipeline
    from tally.traffic_run import closed_cutoff

    if allow_decrease is not None and not allow_decrease.strip():
        raise typer.BadParameter("say why in words (got an empty reason)", param_hint="--allow-decrease")
    errors = Console(stderr=True)

    def loud(text: str) -> None:
        errors.print(f"[bold red]WARNING:[/bold red] {escape(text)}", soft_wrap=True)

    settings = _settings(data_dir)
    cutoff_ms = closed_cutoff(settings) if cutoff == "auto" else _parse_cutoff(cutoff)
    done = pipeline.batch_run(
        settings,
        cutoff_ms,
        payouts=payouts,
        skip_validation=skip_validation,
        allow_decrease_reason=allow_decrease,
        force=force,
        warn=loud,
    )
    for summary in (done.raw_validation, done.output_validation):
        if summary is not None:
            errors.print(summary, markup=False, highlight=False, soft_wrap=True)
    answer = {**asdict(done.result), "published": done.published, "payouts_written": done.payouts_written}
    if done.published:
        answer["milestones_announced"] = _announce_milestones(settings, loud)
    console.print_json(json.dumps(answer, default=str))


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


@milestones_app.command("announce")
@_clear_errors
def milestones_announce(data_dir: DataDir = None) -> None:
    """Record the milestones the served baseline reached, send the new ones to the milestones topic
    and deliver the due webhooks (the DAG and 'tally batch run' do it after each publish)."""
    from tally.milestones import announce

    console.print_json(json.dumps(announce(_settings(data_dir)).__dict__))


@milestones_app.command("list")
@_clear_errors
def milestones_list(
    video: Annotated[str, typer.Option(help="the video id")],
    data_dir: DataDir = None,
) -> None:
    """A video's milestones and the state of their announcements."""
    from warehouse.migrate import migrate
    from warehouse.milestones import milestones_of
    from warehouse.store import open_store

    settings = _settings(data_dir)
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        rows = [m.__dict__ for m in milestones_of(store, video)]
    console.print_json(json.dumps(rows, default=str))


@catalog_app.command("load")
@_clear_errors
def catalog_load(
    videos: Annotated[int, typer.Option(help="catalog size of the generated traffic")] = 50,
    seed: Annotated[int, typer.Option(help="seed of the generated traffic")] = 7,
    data_dir: DataDir = None,
) -> None:
    """Load the traffic generator's catalog (videos, creators, durations, monetized) into the store."""
    from counting.traffic import TrafficConfig, catalog_rows
    from warehouse.migrate import migrate
    from warehouse.store import open_store, upsert_catalog

    settings = _settings(data_dir)
    migrate(settings.store_url)
    rows = catalog_rows(TrafficConfig(seed=seed, videos=videos))
    with open_store(settings.store_url) as store:
        upsert_catalog(store, rows)
    console.print(f"loaded {len(rows)} videos into {settings.store_url}")


@audit_app.command("payout")
@_clear_errors
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
    settings = _settings(data_dir)
    migrate(settings.store_url)
    report = audit_payout(settings, creator, day, run_id=run_id)
    console.print(report.render(files=files), soft_wrap=True, markup=False, highlight=False)
    raise typer.Exit(0 if report.matches else 1)


payouts_app = typer.Typer(help="The creator payout ledger.", no_args_is_help=True)
app.add_typer(payouts_app, name="payouts")


@payouts_app.command("write")
@_clear_errors
def payouts_write(
    run_id: Annotated[
        str | None, typer.Option(help="the run (default: the one whose baseline is served)")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Write a published run's payouts (computed with the run) to the ledger, replacing its rows."""
    from tally import pipeline

    run, rows = pipeline.write_run_payouts(_settings(data_dir), run_id)
    console.print(f"wrote {rows} payout rows of run {run} to the ledger")


@rules_app.command("check")
@_clear_errors
def rules_check(
    file: Annotated[Path, typer.Argument(help="the bot rules file to check (TOML)", show_default=False)],
    day: Annotated[
        str | None,
        typer.Option(
            help="the day of the log to count with both rules, YYYY-MM-DD (default: yesterday, UTC)"
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Check a bot rules file (a bad one is refused with its line and the reason), say what it changes
    from the rules in use, and count a day of the log with both: a dry run, nothing is written."""
    from datetime import date

    from tally.rules_check import check_rules

    try:
        picked = None if day is None else date.fromisoformat(day)
    except ValueError:
        raise typer.BadParameter(f"--day must be a date YYYY-MM-DD (got {day!r})") from None
    console.print(
        check_rules(_settings(data_dir), file, picked).render(), soft_wrap=True, highlight=False, markup=False
    )


@speed_app.command("rebuild")
@_clear_errors
def speed_rebuild(data_dir: DataDir = None) -> None:
    """Replay the Parquet log into Redis after Redis lost the speed state. Stop the counter first
    (it is fenced out otherwise); start it again afterwards: it resumes after the archive."""
    import asyncio

    import redis.asyncio as aioredis
    from rich.progress import Progress

    from speed_layer.rebuild import archived_records, rebuild

    settings = _settings(data_dir)

    async def run() -> None:
        client = aioredis.Redis.from_url(settings.redis_url)
        try:
            with Progress(console=console) as progress:
                task = progress.add_task("replaying records", total=len(archived_records(settings)))
                report = await rebuild(settings, client, lambda n: progress.advance(task, n))
        finally:
            await client.aclose()
        console.print(
            f"replayed {report.records} records ({report.events} events) in {report.seconds:.1f} s; "
            f"last offsets {report.last_offsets}: start the counter again"
        )

    asyncio.run(run())


@speed_app.command("migrate")
@_clear_errors
def speed_migrate(data_dir: DataDir = None) -> None:
    """Rewrite the speed state an earlier Tally left in Redis into today's layouts. Stop the counter
    first (it refuses values of an earlier layout, naming this command); idempotent."""
    import redis

    from speed_layer.migrate import migrate

    settings = _settings(data_dir)
    client = redis.Redis.from_url(settings.redis_url)
    try:
        report = migrate(client)
    finally:
        client.close()
    console.print(f"{report.render()}: start the counter again")


@warehouse_app.command("build")
@_clear_errors
def warehouse_build(
    data_dir: DataDir = None,
    out: Annotated[
        Path | None, typer.Option(help="the DuckDB file (default: <data dir>/warehouse.duckdb)")
    ] = None,
) -> None:
    """Build the DuckDB warehouse (staging views and marts) from the log, the batch outputs and the store."""
    from warehouse.build import build_warehouse

    report = build_warehouse(_settings(data_dir), path=out)
    for model in report.models:
        console.print(f"  {model.name:<32} {model.materialized:<6} {model.rows:>10,} rows")
    console.print(f"wrote {report.path} in {report.seconds:.1f} s: open it with `duckdb {report.path}`")


@app.command()
def token(
    user: Annotated[str, typer.Option(help="the user id the token proves (1-64 characters)")],
    ttl: Annotated[int, typer.Option(help="lifetime in seconds")] = 3600,
) -> None:
    """Print a signed user token for the single-event routes ('Authorization: Bearer <token>')."""
    from ingest.auth import issue_token

    if not 1 <= len(user) <= 64:
        raise typer.BadParameter(f"must be 1-64 characters (got {len(user)})", param_hint="--user")
    print(issue_token(_settings().user_token_secret, user, ttl))


@app.command()
@_clear_errors
def airflow(
    data_dir: DataDir = None,
    port: Annotated[int, typer.Option(help="port of the Airflow UI")] = 8080,
    executor: Annotated[
        str | None,
        typer.Option(
            envvar="TALLY_AIRFLOW_EXECUTOR",
            show_default=False,
            help="Airflow's executor: local (the LocalExecutor; default: Airflow's, also local)",
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            envvar="TALLY_AIRFLOW_DB_URL",
            show_default=False,
            help="Airflow's metadata database, postgresql+psycopg://user@host:port/dbname (created "
            "beforehand); default: SQLite under the data dir",
        ),
    ] = None,
) -> None:
    """Start Airflow locally (standalone) with Tally's DAGs and a metadata database under the data
    dir, or in PostgreSQL (--db) with the LocalExecutor (--executor local)."""
    from tally.airflow import run_airflow

    raise typer.Exit(run_airflow(_settings(data_dir), port, db_url=db, executor=executor))


spark_app = typer.Typer(help="A Spark standalone cluster on loopback for the batch.", no_args_is_help=True)
app.add_typer(spark_app, name="spark")


@spark_app.command("up")
@_clear_errors
def spark_up(
    data_dir: DataDir = None,
    port: Annotated[int, typer.Option(help="port of the master: spark://127.0.0.1:PORT")] = 7077,
    workers: Annotated[int, typer.Option(min=1, help="how many workers")] = 2,
    cores: Annotated[int, typer.Option(min=1, help="cores of each worker")] = 1,
    memory: Annotated[str, typer.Option(help="memory of each worker, at least 1g (e.g. 1g, 1536m)")] = "1g",
) -> None:
    """Start a Spark standalone cluster on loopback (a master and its workers) to run the batch on.

    It waits until every worker has registered; the logs are <data dir>/run/logs/spark-*.log. A
    cluster already running under the data directory is kept."""
    from tally.operations import command_line
    from tally.spark_cluster import start_cluster

    settings = _settings(data_dir)
    cluster, started = start_cluster(settings, port, workers, cores, memory)
    state = "started" if started else "already running"
    for process in cluster.processes:
        _say(f"  {process.name:<14} pid {process.pid:<7} {state}, log {process.log}")
    _say(f"master {cluster.master_url}, web UI {cluster.web_ui}")
    _say(f"{cluster.workers} worker(s) of {cluster.cores} core(s) and {cluster.memory} each")
    _say("run 'tally batch run' (or Airflow) on it with:")
    _say(cluster.export_line)
    _say(f"stop it with: {command_line(settings, 'spark down')}")


@spark_app.command("down")
@_clear_errors
def spark_down(data_dir: DataDir = None) -> None:
    """Stop the Spark cluster 'tally spark up' started under the data directory (workers first)."""
    from tally.spark_cluster import stop_cluster

    settings = _settings(data_dir)
    stopped, exited = stop_cluster(settings)
    if not stopped and not exited:
        _say(f"nothing to stop: no Spark cluster is recorded under {settings.data_dir}")
    if stopped:
        _say(f"stopped {', '.join(p.name for p in stopped)}")
    if exited:
        _say(f"already exited: {', '.join(p.name for p in exited)}")


def _parse_cutoff(text: str) -> int:
    if not text.isdigit():
        raise typer.BadParameter(f"must be milliseconds since the epoch or 'auto' (got {text!r})")
    return int(text)


@app.command()
@_clear_errors
def demo(
    data_dir: Annotated[Path, typer.Option(help="where the demo keeps its data")] = Path("data/demo"),
    seconds: Annotated[int, typer.Option(help="how long to send traffic")] = 120,
    rate: Annotated[float, typer.Option(help="events per second")] = 400.0,
    keep_running: Annotated[bool, typer.Option(help="leave the stack up at the end")] = True,
) -> None:
    """Start the stack, send generated traffic, run a batch and compare every layer with the oracle."""
    from tally.demo import run_demo

    run_demo(_settings(data_dir, bucket_ms=10_000), seconds, rate, keep_running, console)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
