"""The commands on Tally's stores and files: `tally catalog` (the relational store's videos),
`tally speed` (the speed layer's Redis state), `tally warehouse` (DuckDB) and `tally rules` (the bot
rules file)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tally.commands.common import DataDir, clear_errors, console, say, settings_of

if TYPE_CHECKING:
    from counting.catalog import CatalogRow

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


@catalog_app.command("list")
@clear_errors
def catalog_list(
    data_dir: DataDir = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print JSON: each creator with its videos (duration, monetized)"),
    ] = False,
) -> None:
    """List the creators of the catalog in the relational store and their videos."""
    from rich.table import Table
    from sqlalchemy import make_url

    from tally.launch import command_line
    from warehouse.catalog import creators
    from warehouse.store import open_store

    settings = settings_of(data_dir)
    with open_store(settings.store_url) as store:
        found = creators(store)
    if as_json:
        listed = [
            {"creator_id": creator, "videos": [_video_fields(v) for v in videos]}
            for creator, videos in found.items()
        ]
        print(json.dumps(listed))
        return
    if not found:
        where = make_url(settings.store_url).render_as_string(hide_password=True)
        say(f"the catalog in {where} is empty: load one with '{command_line(settings, 'catalog load')}'")
        return
    table = Table("creator", "videos", "monetized", "video ids", box=None)
    for creator, videos in found.items():
        ids = ", ".join(v.video_id for v in videos)
        table.add_row(creator, str(len(videos)), str(sum(v.monetized for v in videos)), ids)
    console.print(table, soft_wrap=False, markup=False, highlight=False)
    say(f"{len(found)} creators, {sum(len(vs) for vs in found.values())} videos")


def _video_fields(video: CatalogRow) -> dict[str, object]:
    return {"video_id": video.video_id, "duration_secs": video.duration_secs, "monetized": video.monetized}


@rules_app.command("check")
@clear_errors
def rules_check(
    file: Annotated[Path, typer.Argument(help="the bot rules file to check (TOML)", show_default=False)],
    day: Annotated[
        str | None,
        typer.Option(
            help="the day of the log to count with both rules, YYYY-MM-DD, UTC (default: the latest "
            "day with views in the log)"
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Check a bot rules file (a bad one is refused with its line and the reason), say what it changes
    from the rules in use, and count a day of the log with both (--day, else the latest day with
    views in the log, which it names): a dry run, nothing is written."""
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
    from speed_layer.counter.rebuild import rebuild

    settings = settings_of(data_dir)

    async def run() -> None:
        client = redisconn.async_client(settings)
        try:
            with Progress(console=console) as progress:
                task = progress.add_task("replaying records", total=None)
                report = await rebuild(
                    settings,
                    client,
                    lambda done, total: progress.update(task, completed=done, total=total),
                    replace,
                )
        finally:
            await client.aclose()
        skipped = f"; {report.undecodable} undecodable skipped" if report.undecodable else ""
        console.print(
            f"replayed {report.records} records ({report.events} events; {report.from_broker} records "
            f"from the broker past the archive{skipped}) in {report.seconds:.1f} s; "
            f"last offsets {report.last_offsets}: start the counter again",
            soft_wrap=True,
        )

    asyncio.run(run())


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
    say(f"wrote {report.path} in {report.seconds:.1f} s")
    for line in _how_to_open(report.path):
        say(line)


def _how_to_open(path: Path) -> list[str]:
    """How to open the warehouse read-only: with this Python's DuckDB package, which Tally installs,
    or with DuckDB's command line, which it does not."""
    import duckdb

    opened = f"duckdb.connect({json.dumps(str(path))}, read_only=True)"
    code = f'import duckdb; db = {opened}; db.sql("show tables").show()'
    return [
        "open it read-only with the DuckDB Python package Tally installed, then db.sql('...').show():",
        f"  {shlex.quote(sys.executable)} -i -c {shlex.quote(code)}",
        f"or with DuckDB's command line, a separate install (not part of Tally; a version that reads "
        f"files of DuckDB {duckdb.__version__}):",
        f"  duckdb -readonly {shlex.quote(str(path))}",
    ]
