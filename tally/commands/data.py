"""The commands on Tally's stores and files: `tally catalog` (the relational store's videos),
`tally speed` (the speed layer's Redis state), `tally warehouse` (DuckDB) and `tally rules` (the bot
rules file)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tally.commands.common import DataDir, clear_errors, console, settings_of

catalog_app = typer.Typer(help="The video catalog in the relational store.", no_args_is_help=True)
speed_app = typer.Typer(help="The speed layer's Redis state.", no_args_is_help=True)
warehouse_app = typer.Typer(help="The DuckDB warehouse for analysts.", no_args_is_help=True)
rules_app = typer.Typer(help="The bot rules file operators edit.", no_args_is_help=True)


@catalog_app.command("load")
@clear_errors
def catalog_load(
    videos: Annotated[int, typer.Option(help="catalog size of the generated traffic")] = 50,
    seed: Annotated[int, typer.Option(help="seed of the generated traffic")] = 7,
    data_dir: DataDir = None,
) -> None:
    """Load the traffic generator's catalog (videos, creators, durations, monetized) into the store."""
    from counting.traffic import TrafficConfig, catalog_rows
    from warehouse.migrate import migrate
    from warehouse.store import open_store, upsert_catalog

    settings = settings_of(data_dir)
    migrate(settings.store_url)
    rows = catalog_rows(TrafficConfig(seed=seed, videos=videos))
    with open_store(settings.store_url) as store:
        upsert_catalog(store, rows)
    console.print(f"loaded {len(rows)} videos into {settings.store_url}")


@rules_app.command("check")
@clear_errors
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
        check_rules(settings_of(data_dir), file, picked).render(),
        soft_wrap=True,
        highlight=False,
        markup=False,
    )


@speed_app.command("rebuild")
@clear_errors
def speed_rebuild(
    data_dir: DataDir = None,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="delete the speed layer's keys first (counts another counter wrote, or a state "
            "partly lost); the ingest API's reactions and rate limits and the archiver's positions stay",
        ),
    ] = False,
) -> None:
    """Replay the Parquet log into Redis after Redis lost the speed state. Stop the counter first
    (it is fenced out otherwise); start it again afterwards: it resumes after the archive."""
    import asyncio

    from rich.progress import Progress

    from counting import redisconn
    from speed_layer.rebuild import archived_records, rebuild

    settings = settings_of(data_dir)

    async def run() -> None:
        client = redisconn.async_client(settings)
        try:
            with Progress(console=console) as progress:
                task = progress.add_task("replaying records", total=len(archived_records(settings)))
                report = await rebuild(settings, client, lambda n: progress.advance(task, n), replace)
        finally:
            await client.aclose()
        console.print(
            f"replayed {report.records} records ({report.events} events) in {report.seconds:.1f} s; "
            f"last offsets {report.last_offsets}: start the counter again"
        )

    asyncio.run(run())


@speed_app.command("migrate")
@clear_errors
def speed_migrate(data_dir: DataDir = None) -> None:
    """Rewrite the speed state an earlier Tally left in Redis into today's layouts. Stop the counter
    first (it refuses values of an earlier layout, naming this command); idempotent."""
    from counting import redisconn
    from speed_layer.migrate import migrate

    settings = settings_of(data_dir)
    client = redisconn.sync_client(settings)
    try:
        report = migrate(client)
    finally:
        client.close()
    console.print(f"{report.render()}: start the counter again")


@warehouse_app.command("build")
@clear_errors
def warehouse_build(
    data_dir: DataDir = None,
    out: Annotated[
        Path | None, typer.Option(help="the DuckDB file (default: <data dir>/warehouse.duckdb)")
    ] = None,
) -> None:
    """Build the DuckDB warehouse (staging views and marts) from the log, the batch outputs and the store."""
    from warehouse.build import build_warehouse

    report = build_warehouse(settings_of(data_dir), path=out)
    for model in report.models:
        console.print(f"  {model.name:<32} {model.materialized:<6} {model.rows:>10,} rows")
    console.print(f"wrote {report.path} in {report.seconds:.1f} s: open it with `duckdb {report.path}`")
