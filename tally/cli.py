"""The `tally` command line: the local stack, load generation, batch runs and the demo."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console

from counting.errors import TallyError
from counting.settings import Settings

app = typer.Typer(help="Tally: exact view and like counters at scale.", no_args_is_help=True)
batch_app = typer.Typer(help="Batch layer runs.", no_args_is_help=True)
app.add_typer(batch_app, name="batch")
catalog_app = typer.Typer(help="The video catalog in the relational store.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
speed_app = typer.Typer(help="The speed layer's Redis state.", no_args_is_help=True)
app.add_typer(speed_app, name="speed")
warehouse_app = typer.Typer(help="The DuckDB warehouse for analysts.", no_args_is_help=True)
app.add_typer(warehouse_app, name="warehouse")
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
    updates = {k: v for k, v in overrides.items() if v is not None}
    if data_dir is not None:
        updates["data_dir"] = data_dir
    return Settings(**updates)  # type: ignore[arg-type]


DataDir = Annotated[Path | None, typer.Option(help="data directory (default: TALLY_DATA_DIR or ./data)")]


@app.command()
@_clear_errors
def up(
    data_dir: DataDir = None,
    reset: Annotated[bool, typer.Option(help="start with an empty log and speed state")] = False,
) -> None:
    """Start the local stack: broker, Redis, the Faust workers and both APIs."""
    from tally.stack import start_stack

    settings = _settings(data_dir)
    stack = start_stack(settings, reset=reset)
    for process in stack.processes:
        console.print(f"  {process.name:<9} pid {process.pid:<7} log {process.log}")
    console.print(f"ingest API  http://{settings.ingest_host}:{settings.ingest_port}/docs")
    console.print(f"serving API http://{settings.serving_host}:{settings.serving_port}/docs")
    console.print("stop it with: tally down")


@app.command()
def down(data_dir: DataDir = None) -> None:
    """Stop what `tally up` started."""
    from tally.stack import load_stack

    stack = load_stack(_settings(data_dir))
    if not stack.processes:
        console.print("nothing to stop: no stack is recorded under this data directory")
        return
    names = ", ".join(p.name for p in stack.processes)
    stack.stop()
    console.print(f"stopped {names}")


@app.command()
def status(data_dir: DataDir = None) -> None:
    """List the processes of the local stack and whether they run."""
    from tally.stack import load_stack

    stack = load_stack(_settings(data_dir))
    for process in stack.processes:
        state = "running" if process.alive() else "stopped"
        console.print(f"{process.name:<9} pid {process.pid:<7} {state}")


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
) -> None:
    """Generate realistic traffic (humans and labelled bots) to a file or the ingest API."""
    from tally.traffic_run import generate_items, post_with_progress, write_jsonl

    items = generate_items(events=events, rate=rate, seed=seed, videos=videos, bots=bots)
    if out is None and post is None:
        raise typer.BadParameter("give --out FILE or --post URL (or both)", param_hint="--out/--post")
    if out is not None:
        truth = write_jsonl(items, out)
        console.print(f"wrote {len(items)} events to {out} and the ground truth to {truth}")
    if post is not None:
        sent = post_with_progress(items, post, _settings().collector_key, console)
        console.print(f"acknowledged {len(sent.events)} events, refused {len(sent.refused)}")


@batch_app.command("run")
@_clear_errors
def batch_run(
    cutoff: Annotated[
        str, typer.Option(help="cutoff in ms on a bucket edge, or 'auto' (last closed)")
    ] = "auto",
    data_dir: DataDir = None,
) -> None:
    """Recompute exact counts from the Parquet log up to a closed cutoff and publish the baseline."""
    from batch_layer import run_batch
    from tally.traffic_run import closed_cutoff

    settings = _settings(data_dir)
    cutoff_ms = closed_cutoff(settings) if cutoff == "auto" else _parse_cutoff(cutoff)
    result = run_batch(settings, cutoff_ms)
    console.print_json(json.dumps(result.__dict__, default=str))


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
    report = audit_payout(settings, creator, day)
    console.print(report.render(), soft_wrap=True)
    raise typer.Exit(0 if report.matches else 1)


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
def airflow(
    data_dir: DataDir = None,
    port: Annotated[int, typer.Option(help="port of the Airflow UI")] = 8080,
) -> None:
    """Start Airflow locally (standalone) with Tally's DAGs and a metadata database under the data dir."""
    from tally.airflow import run_airflow

    raise typer.Exit(run_airflow(_settings(data_dir), port))


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
