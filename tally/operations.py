"""What the stack commands do: `tally up`, `down`, `status`, `start`, `stop` and `restart` act on
the processes recorded under the run directory (`tally.stack`), each reporting a `Change`."""

from __future__ import annotations

from counting.settings import Settings
from tally.errors import StackError
from tally.launch import (
    Change,
    command_line,
    ensure_service,
    has_old_state,
    reset_state,
    service_address,
    stale_state,
    start_workers,
    undo,
)
from tally.services import is_listening
from tally.stack import (
    BROKER_FORGETS,
    LOCAL_HOSTS,
    NOT_RECORDED,
    SERVICES,
    STATE_FILE,
    WORKERS,
    Process,
    Stack,
    kind_and_instance,
    load_stack,
    process_names,
)
from tally.topics import ensure_topics

RUNNING = "running"  # the state `stack_status` gives a process that runs


def bring_up(settings: Settings, reset: bool = False) -> Change:
    """Start what is not running of the stack recorded under the data directory: broker, Redis,
    topics, both Faust workers, both APIs. A recorded process that runs is kept, and so are the
    settings the stack runs with; one that died is started again.

    The local broker keeps nothing across restarts, so a freshly started one means an empty log:
    the speed state and Parquet log of an earlier run would point into a log that is gone. Then
    `reset` wipes them; without it, starting over old state is refused. `reset` on a running stack
    is refused too: it would wipe the state under the running workers.
    """
    recorded = load_stack(settings)
    live = [p for p in recorded.processes if p.alive()]
    if live and reset:
        raise StackError(
            f"the stack under {settings.data_dir} is running ({_pids(live)}) and --reset would wipe the "
            f"state under it: stop it with '{command_line(settings, 'down')}' first"
        )
    stack = Stack(recorded.settings if live else settings, live)
    stack.save()  # forget the processes that died
    change = Change(stack, kept=list(live))
    differing = sorted(
        name
        for name, value in settings.model_dump().items()
        if name not in NOT_RECORDED and getattr(stack.settings, name) != value
    )
    if differing:
        change.notes.append(
            f"kept the settings the running stack was started with (this command's differ in "
            f"{', '.join(differing)})"
        )
    try:
        fresh_broker = ensure_service(stack, "broker", change)
        ensure_service(stack, "redis", change)
        if reset:
            reset_state(stack.settings)
        elif fresh_broker and has_old_state(stack.settings):
            command = "start broker --reset" if live else "up --reset"
            raise stale_state(
                stack.settings, f"rerun with '{command_line(settings, command)}' to start empty"
            )
        ensure_topics(stack.settings)
        start_workers(
            stack, [name for name in process_names(stack.settings) if stack.find(name) is None], change
        )
    except BaseException:
        undo(stack, change)
        raise
    return change


def bring_down(settings: Settings) -> tuple[list[Process], list[Process]]:
    """Stop every process the stack recorded (the APIs and workers first) and remove the record;
    the processes it stopped, and those that had already exited."""
    stack = load_stack(settings)
    running = [p for p in stack.processes if p.alive()]
    gone = [p for p in stack.processes if all(p is not r for r in running)]
    stack.stop()
    return running, gone


def worker_names(stack: Stack) -> list[str]:
    """What `start`, `stop` and `restart` act on: Redis only when the stack started it, or would
    (a local Redis URL where nothing answers)."""
    return [*process_names(stack.settings), "broker", *(["redis"] if _manages_redis(stack) else [])]


def _manages_redis(stack: Stack) -> bool:
    if stack.find("redis") is not None:
        return True
    _, host, port = service_address(stack.settings, "redis")
    return host in LOCAL_HOSTS and not is_listening(port, host)


def _check_name(stack: Stack, name: str, reset: bool = False) -> None:
    names = worker_names(stack)
    if name == "redis" and name not in names:
        raise StackError(
            f"redis was not started by this stack (it uses the Redis at {stack.settings.redis_url}, "
            f"which runs outside it): pick one of {', '.join(names)}"
        )
    if name not in names:
        raise StackError(f"unknown worker {name!r}: pick one of {', '.join(names)}")
    if reset and name != "broker":
        raise StackError(f"--reset is for the broker only, whose log starts empty (got {name!r})")


def start_one(settings: Settings, name: str, reset: bool = False) -> Change:
    """Start one process of the recorded stack with the settings the stack runs with, and wait
    until it listens on its port; when it already runs, it is kept (and reported so)."""
    stack = load_stack(settings)
    _check_name(stack, name, reset)
    change = Change(stack)
    current = stack.find(name)
    if current is not None and current.alive():
        change.kept.append(current)
        return change
    try:
        if name == "broker":
            _start_broker(stack, reset, change)
        elif name == "redis":
            if ensure_service(stack, "redis", change):
                steps = ("stop counter", "speed rebuild", "start counter")
                change.notes.append(
                    "Redis started empty (no persistence), so the speed state is gone: run "
                    + ", then ".join(f"'{command_line(settings, step)}'" for step in steps)
                )
        else:
            if current is not None:
                stack.forget(name)
            if name != "serving":  # the others use the topics: make sure they exist
                ensure_topics(stack.settings)
            start_workers(stack, [name], change)
    except BaseException:
        undo(stack, change)
        raise
    return change


def _start_broker(stack: Stack, reset: bool, change: Change, retry: str = "start broker --reset") -> None:
    """Start the local broker, in place of the one the stack runs if any (a restart). It keeps
    nothing across restarts (memory storage): the new one has an empty log, so the earlier run's
    state must be wiped (`reset`), the topics are created again and the running workers restart on
    it; they are stopped before the old broker, which they would otherwise wait for as they stop."""
    settings = stack.settings
    current = stack.find("broker")
    if current is not None and not current.alive():
        stack.forget("broker")
        current = None
    address, host, port = service_address(settings, "broker")
    if current is None and is_listening(port, host):
        change.notes.append(f"broker at {address} runs outside this stack: left alone")
        return
    if not reset and has_old_state(settings):
        raise stale_state(
            settings,
            f"rerun with '{command_line(settings, retry)}' to wipe it (the running workers restart "
            "on the empty log)",
        )
    running = [p for p in stack.processes if kind_and_instance(p.name)[0] in WORKERS and p.alive()]
    stopping = [*running, *([current] if current is not None else [])]
    stack.stop_processes(stopping)  # by tiers: the APIs, the workers, then the broker
    change.stopped.extend(stopping)
    if reset:
        reset_state(settings)
    ensure_service(stack, "broker", change)
    ensure_topics(settings)
    start_workers(
        stack, [name for name in process_names(settings) if any(p.name == name for p in running)], change
    )
    wiped = "; the earlier run's log, baselines and speed state were wiped" if reset else ""
    change.notes.append(
        f"{BROKER_FORGETS}: it started with an empty log, the topics were created again{wiped}"
    )


def _not_ours(settings: Settings, name: str, address: str) -> StackError:
    return StackError(
        f"the {name} at {address} was not started by this stack (it is not in "
        f"{settings.run_dir / STATE_FILE}): stop it where it was started"
    )


def stop_one(settings: Settings, name: str) -> Change:
    """Stop one process of the stack and forget it, keeping the record of the others."""
    stack = load_stack(settings)
    _check_name(stack, name)
    change = Change(stack)
    current = stack.find(name)
    if current is None or not current.alive():
        if current is not None:
            stack.forget(name)
        if name in SERVICES:
            address, host, port = service_address(stack.settings, name)
            if is_listening(port, host):
                raise _not_ours(settings, name, address)
        change.notes.append(f"{name} is not running")
        return change
    stack.stop_processes([current])
    change.stopped.append(current)
    if name == "broker":
        change.notes.append(
            f"{BROKER_FORGETS}: its log is gone; start a new one with "
            f"'{command_line(settings, 'start broker --reset')}'"
        )
    return change


def restart_one(settings: Settings, name: str, reset: bool = False) -> Change:
    """Stop one process and start it again (see `start_one`). The broker's state is checked before
    anything stops, so that a restart that would be refused stops nothing."""
    stack = load_stack(settings)
    _check_name(stack, name, reset)
    if name == "broker":
        change = Change(stack)
        address, host, port = service_address(stack.settings, "broker")
        recorded = stack.find("broker")
        if (recorded is None or not recorded.alive()) and is_listening(port, host):
            raise _not_ours(settings, "broker", address)
        try:
            _start_broker(stack, reset, change, "restart broker --reset")
        except BaseException:
            undo(stack, change)
            raise
        return change
    stopped = stop_one(settings, name)
    started = start_one(settings, name, reset)
    return Change(
        started.stack, started=started.started, stopped=stopped.stopped + started.stopped, notes=started.notes
    )


def stack_status(settings: Settings) -> list[tuple[str, Process | None, str]] | None:
    """Each recorded process with 'running' or 'exited' (with its log and the command that starts it
    again), and each worker missing from the record as 'not running'; None when no stack is recorded
    under the data directory."""
    if not (settings.run_dir / STATE_FILE).exists():
        return None
    stack = load_stack(settings)
    rows: list[tuple[str, Process | None, str]] = [
        (p.name, p, RUNNING if p.alive() else _exited(stack.settings, p)) for p in stack.processes
    ]
    rows += [
        (name, None, "not running") for name in process_names(stack.settings) if stack.find(name) is None
    ]
    return rows


def _exited(settings: Settings, process: Process) -> str:
    return (
        f"exited (its log: {process.log}); start it again with"
        f" '{command_line(settings, f'start {process.name}')}'"
    )


def _pids(processes: list[Process]) -> str:
    return ", ".join(f"{p.name} pid {p.pid}" for p in processes)
