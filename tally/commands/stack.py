"""The local stack's commands: `tally up`, `down`, `status`, `start`, `stop` and `restart` (`tally.cli`
registers them at the top level)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tally.commands.common import DataDir, clear_errors, say, say_stopped, settings_of

if TYPE_CHECKING:
    from counting.settings import Settings
    from tally.launch import Change

Worker = Annotated[
    str,
    typer.Argument(
        help="counter, archiver, ingest, serving or broker (or redis, if the stack started it); "
        "counter-2, archiver-2, ... when the stack runs several",
        show_default=False,
    ),
]
NOT_RUNNING = 1  # `tally status`'s exit status when a process of the stack does not run
ResetBroker = Annotated[
    bool,
    typer.Option(
        help="broker only: wipe the earlier run's log, baselines and speed state (a new local broker "
        "starts with an empty log)"
    ),
]


def _report(change: Change) -> None:
    """One line per process a command stopped, kept or started, then its notes."""
    for process in change.stopped:
        say(f"  {process.name:<10} pid {process.pid:<7} stopped")
    for process in change.kept:
        say(f"  {process.name:<10} pid {process.pid:<7} already running")
    for process in change.started:
        say(f"  {process.name:<10} pid {process.pid:<7} started, log {process.log}")
    for note in change.notes:
        say(f"note: {note}")


@clear_errors
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
    redis_cluster: Annotated[
        bool,
        typer.Option(
            "--redis-cluster",
            help="run on a local Redis Cluster of 3 masters (started like 'tally redis-cluster up', on "
            "free ports)",
        ),
    ] = False,
) -> None:
    """Start the local stack, or what of it is not running.

    Broker, Redis, the Faust workers and both APIs; what already runs is kept, with the settings
    it was started with (to change how many processes run, stop it with 'tally down' first)."""
    from tally.launch import command_line
    from tally.operations import bring_up

    settings = settings_of(
        data_dir,
        ingest_workers=ingest_workers,
        serving_workers=serving_workers,
        counters=counters,
        archivers=archivers,
    )
    if redis_cluster:
        settings = _on_local_cluster(settings)
    change = bring_up(settings, reset=reset)
    _report(change)
    if not change.started:
        say("nothing to start: the whole stack runs")
    running = change.stack.settings
    say(f"ingest API  http://{running.ingest_host}:{running.ingest_port}/docs")
    say(f"serving API http://{running.serving_host}:{running.serving_port}/docs")
    say(f"stop it with: {command_line(settings, 'down')}")


def _on_local_cluster(settings: Settings) -> Settings:
    """The settings of a stack on the Redis Cluster recorded under the data directory, started first
    when none runs (its first port the default one when free, else a free one)."""
    from tally.redis_cluster import DEFAULT_FIRST_PORT, free_first_port, load_cluster, start_cluster
    from tally.services import is_listening

    cluster = load_cluster(settings)
    if cluster is None or not all(p.alive() for p in cluster.processes):
        wanted = [DEFAULT_FIRST_PORT + i for i in range(3)]
        free = not any(is_listening(p, "127.0.0.1") or is_listening(p + 10_000, "127.0.0.1") for p in wanted)
        cluster, _ = start_cluster(settings, DEFAULT_FIRST_PORT if free else free_first_port())
        for process in cluster.processes:
            say(f"  {process.name:<10} pid {process.pid:<7} started, log {process.log}")
    return settings.model_copy(update={"redis_url": cluster.url, "redis_cluster": True})


@clear_errors
def down(data_dir: DataDir = None) -> None:
    """Stop every process the stack recorded, even after a partial start, and remove its record; and
    the local Redis Cluster, when the stack ran on it ('tally up --redis-cluster')."""
    from tally.operations import bring_down
    from tally.redis_cluster import load_cluster, stop_cluster
    from tally.stack import load_stack

    settings = settings_of(data_dir)
    on_cluster = load_stack(settings).settings.redis_cluster and load_cluster(settings) is not None
    stopped, exited = bring_down(settings)
    if on_cluster:
        nodes, gone = stop_cluster(settings)
        stopped, exited = [*stopped, *nodes], [*exited, *gone]
    say_stopped(stopped, exited, f"nothing to stop: no stack is recorded under {settings.data_dir}")


@clear_errors
def status(data_dir: DataDir = None) -> None:
    """List the processes of the local stack and whether they run.

    Exits 0 when every process of the stack runs, 1 when one does not or no stack is recorded (for
    scripts and probes), 2 on an error."""
    from tally.launch import command_line
    from tally.operations import RUNNING, stack_status

    settings = settings_of(data_dir)
    rows = stack_status(settings)
    if rows is None:
        say(f"no stack recorded under {settings.data_dir}; start one with '{command_line(settings, 'up')}'")
        raise typer.Exit(NOT_RUNNING)
    for name, process, state in rows:
        pid = f"pid {process.pid:<7}" if process is not None else " " * 11
        say(f"{name:<10} {pid} {state}")
    if any(state != RUNNING for _, _, state in rows):
        raise typer.Exit(NOT_RUNNING)


@clear_errors
def start(worker: Worker, data_dir: DataDir = None, reset: ResetBroker = False) -> None:
    """Start one process of the local stack (a no-op if it runs).

    It runs with the settings the stack was started with; the command waits until it listens on
    its port. The local broker keeps nothing across restarts (memory storage): a new one starts
    with an empty log, its topics are created again and the running workers restart on it;
    --reset is needed when an earlier run left state behind."""
    from tally.operations import start_one

    _report(start_one(settings_of(data_dir), worker, reset))


@clear_errors
def stop(worker: Worker, data_dir: DataDir = None) -> None:
    """Stop one process of the local stack; the others keep running.

    The local broker keeps nothing across restarts (memory storage): stopping it loses its log."""
    from tally.operations import stop_one

    _report(stop_one(settings_of(data_dir), worker))


@clear_errors
def restart(worker: Worker, data_dir: DataDir = None, reset: ResetBroker = False) -> None:
    """Stop one process of the local stack and start it again.

    The command waits until it listens on its port (see 'tally start'). The local broker keeps
    nothing across restarts (memory storage): a restarted one starts with an empty log."""
    from tally.operations import restart_one

    _report(restart_one(settings_of(data_dir), worker, reset))
