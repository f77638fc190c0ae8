"""The `tally` command line: the local stack, load generation, batch runs and the demo. The groups of
commands are in `tally.commands`, registered here in the order `tally --help` lists them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tally.commands import batch, data, redis_cluster, spark, stack
from tally.commands.common import DataDir, clear_errors, console, settings_of

app = typer.Typer(help="Tally: exact view and like counters at scale.", no_args_is_help=True)


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


for command in (stack.up, stack.down, stack.status, stack.start, stack.stop, stack.restart):
    app.command()(command)


@app.command()
@clear_errors
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
    directory. Posted events' ids end with this run's tag, so running it again (with the same
    seed too) sends new events, not copies the platform would drop; retries within a run stay
    copies. With --out as well, the file holds the ids as posted."""
    from tally.traffic_run import generate_items, post_with_progress, run_tagged, write_jsonl

    items = generate_items(events=events, rate=rate, seed=seed, videos=videos, bots=bots)
    if out is None and post is None:
        raise typer.BadParameter("give --out FILE or --post URL (or both)", param_hint="--out/--post")
    if post is not None:
        items = run_tagged(items)
    if out is not None:
        truth = write_jsonl(items, out)
        console.print(f"wrote {len(items)} events to {out} and the ground truth to {truth}")
    if post is not None:
        sent = post_with_progress(items, post, settings_of(data_dir).collector_key, console)
        console.print(f"acknowledged {len(sent.events)} events, refused {len(sent.refused)}")


@app.command()
@clear_errors
def token(
    user: Annotated[str, typer.Option(help="the user id the token proves (1-64 characters)")],
    ttl: Annotated[int, typer.Option(help="lifetime in seconds (more than 0)")] = 3600,
    data_dir: DataDir = None,
) -> None:
    """Print a signed user token for the single-event routes ('Authorization: Bearer <token>').

    It is signed with TALLY_USER_TOKEN_SECRET, else with the secret of the local stack under the
    data directory (the one 'tally up' generated): without either the command refuses, as the
    running stack would refuse a token signed with any other."""
    from counting.settings import Settings
    from ingest.auth import issue_token
    from tally.secrets import stack_secret

    if not 1 <= len(user) <= 64:
        raise typer.BadParameter(f"must be 1-64 characters (got {len(user)})", param_hint="--user")
    if ttl <= 0:
        raise typer.BadParameter(
            f"must be a lifetime of more than 0 seconds (got {ttl}): such a token is expired when issued",
            param_hint="--ttl",
        )
    settings = Settings() if data_dir is None else Settings(data_dir=data_dir)
    print(issue_token(stack_secret(settings, "user_token_secret"), user, ttl))


@app.command()
@clear_errors
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

    raise typer.Exit(run_airflow(settings_of(data_dir), port, db_url=db, executor=executor))


@app.command()
@clear_errors
def demo(
    data_dir: Annotated[Path, typer.Option(help="where the demo keeps its data")] = Path("data/demo"),
    seconds: Annotated[int, typer.Option(help="how long to send traffic")] = 120,
    rate: Annotated[float, typer.Option(help="events per second")] = 400.0,
    keep_running: Annotated[bool, typer.Option(help="leave the stack up at the end")] = True,
) -> None:
    """Start the stack, send generated traffic, run a batch and compare every layer with the oracle."""
    from tally.demo import run_demo

    run_demo(settings_of(data_dir, bucket_ms=10_000), seconds, rate, keep_running, console)


app.add_typer(batch.batch_app, name="batch")
app.add_typer(data.catalog_app, name="catalog")
app.add_typer(batch.milestones_app, name="milestones")
app.add_typer(data.speed_app, name="speed")
app.add_typer(data.warehouse_app, name="warehouse")
app.add_typer(data.rules_app, name="rules")
app.add_typer(batch.audit_app, name="audit")
app.add_typer(batch.payouts_app, name="payouts")
app.add_typer(spark.spark_app, name="spark")
app.add_typer(redis_cluster.redis_cluster_app, name="redis-cluster")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
