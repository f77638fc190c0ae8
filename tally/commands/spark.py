"""`tally spark`: a Spark standalone cluster on loopback to run the batch on."""

from __future__ import annotations

from typing import Annotated

import typer

from tally.commands.common import DataDir, clear_errors, say, say_stopped, settings_of

spark_app = typer.Typer(help="A Spark standalone cluster on loopback for the batch.", no_args_is_help=True)


@spark_app.command("up")
@clear_errors
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
    from tally.launch import command_line
    from tally.spark_cluster import start_cluster

    settings = settings_of(data_dir)
    cluster, started = start_cluster(settings, port, workers, cores, memory)
    state = "started" if started else "already running"
    for process in cluster.processes:
        say(f"  {process.name:<14} pid {process.pid:<7} {state}, log {process.log}")
    say(f"master {cluster.master_url}, web UI {cluster.web_ui}")
    say(f"{cluster.workers} worker(s) of {cluster.cores} core(s) and {cluster.memory} each")
    say("run 'tally batch run' (or Airflow) on it with:")
    say(cluster.export_line)
    say(f"stop it with: {command_line(settings, 'spark down')}")


@spark_app.command("down")
@clear_errors
def spark_down(data_dir: DataDir = None) -> None:
    """Stop the Spark cluster 'tally spark up' started under the data directory (workers first)."""
    from tally.spark_cluster import stop_cluster

    settings = settings_of(data_dir)
    stopped, exited = stop_cluster(settings)
    say_stopped(stopped, exited, f"nothing to stop: no Spark cluster is recorded under {settings.data_dir}")
