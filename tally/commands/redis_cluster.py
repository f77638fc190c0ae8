"""`tally redis-cluster`: a Redis Cluster on loopback, the kind of Redis production runs at scale."""

from __future__ import annotations

from typing import Annotated

import typer

from tally.commands.common import DataDir, clear_errors, say, say_stopped, settings_of

redis_cluster_app = typer.Typer(help="A local Redis Cluster (masters on loopback).", no_args_is_help=True)


@redis_cluster_app.command("up")
@clear_errors
def redis_cluster_up(
    data_dir: DataDir = None,
    port: Annotated[int, typer.Option(help="port of the first master; the others follow it")] = 7101,
    masters: Annotated[int, typer.Option(min=3, help="how many masters (slots spread evenly)")] = 3,
) -> None:
    """Start a Redis Cluster on loopback: masters of the machine's redis-server in cluster mode,
    joined with 'redis-cli --cluster create'; it waits until every node says cluster_state:ok.
    Nothing is persisted. A cluster already running under the data directory is kept."""
    from tally.launch import command_line
    from tally.redis_cluster import start_cluster

    settings = settings_of(data_dir)
    cluster, started = start_cluster(settings, port, masters)
    state = "started" if started else "already running"
    for process in cluster.processes:
        say(f"  {process.name:<14} pid {process.pid:<7} {state}, log {process.log}")
    say(f"{len(cluster.ports)} masters, 16,384 slots spread over them; point Tally at it with:")
    for line in cluster.export_lines:
        say(line)
    say(f"stop it with: {command_line(settings, 'redis-cluster down')}")


@redis_cluster_app.command("down")
@clear_errors
def redis_cluster_down(data_dir: DataDir = None) -> None:
    """Stop the Redis Cluster 'tally redis-cluster up' started under the data directory."""
    from tally.redis_cluster import stop_cluster

    settings = settings_of(data_dir)
    stopped, exited = stop_cluster(settings)
    say_stopped(stopped, exited, f"nothing to stop: no Redis Cluster is recorded under {settings.data_dir}")
