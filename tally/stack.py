"""The local stack: broker, Redis, the Faust workers and both APIs as child processes, recorded under
the run directory so that `tally up`, `down`, `start`, `stop` and `restart` act on the same processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from counting.settings import Settings
from counting.settings import settings_env as tally_variables
from tally.errors import StackError
from tally.services import (
    is_alive,
    process_started_at,
)

STATE_FILE = "stack.json"
WORKERS: dict[str, list[str]] = {
    "counter": ["-m", "speed_layer", "counter"],
    "archiver": ["-m", "speed_layer", "archiver"],
    "replicator": ["-m", "speed_layer", "replicator"],
    "ingest": ["-m", "ingest"],
    "serving": ["-m", "serving_layer"],
}
# Kinds the stack may run several processes of, and the setting that says how many: the first is
# named after its kind, the others `counter-2`, `counter-3`, ... (one consumer group shares the
# partitions). Several ingest or serving processes share one port: they are one process of the stack.
SCALED = {"counter": "counters", "archiver": "archivers"}
# What each worker listens on once it runs (the counter and the archiver: their /metrics).
LISTENS = {
    "counter": "the counter's metrics",
    "archiver": "the archiver's metrics",
    "replicator": "the replicator's metrics",
    "ingest": "the ingest API",
    "serving": "the serving API",
}
SERVICES = ("broker", "redis")
LOCAL_HOSTS = ("127.0.0.1", "localhost")
# Stopping goes from the APIs and workers to the services they use, a tier at a time.
STOP_TIERS = (("ingest", "serving"), ("counter", "archiver", "replicator"), ("redis", "broker"))
# Settings the record leaves out: the data directory (where the record lies) and the credentials,
# which come from the environment or the stack's secrets file.
NOT_RECORDED = frozenset(
    {
        "data_dir",
        "admin_key",
        "collector_key",
        "user_token_secret",
        "database_url",
        "milestone_webhook_secret",
    }
)
BROKER_FORGETS = "the local Tansu broker keeps nothing across restarts (memory storage)"


def settings_env(settings: Settings) -> dict[str, str]:
    """This process's environment with the TALLY_* variables that give a child the same settings;
    the secrets they leave empty come from the local stack's secrets file (created on first use)."""
    from tally.secrets import with_local_secrets

    return {**os.environ, **tally_variables(with_local_secrets(settings))}


@dataclass
class Process:
    """A process of the stack: its name, pid and log, and when it started (a reused pid is not it)."""

    name: str
    pid: int
    log: str
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started_at: int | None = None

    def __post_init__(self) -> None:
        if self.started_at is None and self.popen is not None:
            self.started_at = process_started_at(self.pid)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return is_alive(self.pid, self.started_at)

    def signal(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds; return once the process is gone."""
        stop_together([self], timeout)


# The children this process started to outlive it (the stack's processes, a cluster's nodes) stay
# referenced here: Python warns (ResourceWarning) when the Popen of a child that still runs is
# collected, and `tally up` returns while they run on purpose. Those that exited are let go.
_CHILDREN: list[subprocess.Popen[bytes]] = []


def adopt(popen: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """Keep `popen` for the life of this process (see _CHILDREN); returns it."""
    _CHILDREN[:] = [child for child in _CHILDREN if child.poll() is None]
    _CHILDREN.append(popen)
    return popen


def process_fields(processes: list[Process]) -> list[dict[str, object]]:
    """Processes as a record stores them (`read_record` gives them back)."""
    return [{"name": p.name, "pid": p.pid, "log": p.log, "started_at": p.started_at} for p in processes]


def write_record(path: Path, record: dict[str, object]) -> None:
    """Write a record of started processes aside and move it in place, so that it never misses one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.write_text(json.dumps(record, indent=2))
    os.replace(aside, path)


def read_record(path: Path, what: str, look_for: str) -> tuple[dict[str, Any], list[Process]] | None:
    """A record `write_record` wrote and its processes, or None when there is none; a record that
    is not JSON says to check that none of `what`'s processes runs (`ps aux | grep <look_for>`)."""
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise StackError(
            f"the {what} record {path} is not valid JSON ({exc}): check that none of its processes "
            f"runs ('ps aux | grep {look_for}'), then delete it"
        ) from None
    processes = [
        Process(p["name"], p["pid"], p["log"], started_at=p.get("started_at")) for p in state["processes"]
    ]
    return state, processes


def stop_together(processes: list[Process], timeout: float = 15.0) -> None:
    """SIGTERM to each, then SIGKILL to those still running after `timeout` seconds; return once
    all are gone."""
    for process in processes:
        process.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(p.alive() for p in processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    for process in processes:
        process.signal(signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while any(p.alive() for p in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    # A process read back from a record has no Popen; if this process started it, its adopted one
    # is waited on all the same (else Python warns it "is still running" when it is collected).
    children = {child.pid: child for child in _CHILDREN}
    for process in processes:
        popen = process.popen or children.get(process.pid)
        if popen is not None:
            popen.wait()


@dataclass
class Stack:
    """The processes the stack started, recorded with the settings they run with under the run
    directory; the record is saved as each process starts or stops, so that it never misses one."""

    settings: Settings
    processes: list[Process] = field(default_factory=list)

    def find(self, name: str) -> Process | None:
        return next((p for p in self.processes if p.name == name), None)

    def get(self, name: str) -> Process:
        process = self.find(name)
        if process is None:
            raise StackError(f"no process named {name!r} in the stack")
        return process

    def start_worker(self, name: str) -> Process:
        """Start (or restart) one of the platform's own processes, without waiting for it."""
        log_dir = self.settings.run_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{name}.log"
        kind, instance = kind_and_instance(name)
        extra = ["--instance", str(instance)] if instance > 1 else []
        with open(log, "ab") as handle:  # the child keeps its own copy
            popen = adopt(
                subprocess.Popen(
                    [sys.executable, *WORKERS[kind], *extra],
                    # A crash in a C extension (a segmentation fault) writes the Python stack of
                    # every thread to the log before the process dies.
                    env={**settings_env(self.settings), "PYTHONFAULTHANDLER": "1"},
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        process = Process(name, popen.pid, str(log), popen)
        self.add(process)
        return process

    def add(self, process: Process) -> None:
        """Record a process that was just started, in place of any other of its name."""
        self.processes = [p for p in self.processes if p.name != process.name] + [process]
        self.save()

    def forget(self, name: str) -> None:
        self.processes = [p for p in self.processes if p.name != name]
        self.save()

    def save(self) -> None:
        """Write the record aside and move it in place; remove it when no process is left."""
        path = self.settings.run_dir / STATE_FILE
        if not self.processes:
            path.unlink(missing_ok=True)
            return
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        state = {
            "settings": self.settings.model_dump(mode="json", exclude=set(NOT_RECORDED)),
            "processes": [
                {"name": p.name, "pid": p.pid, "log": p.log, "started_at": p.started_at}
                for p in self.processes
            ],
        }
        aside = path.with_name(f".{STATE_FILE}.{os.getpid()}")
        aside.write_text(json.dumps(state, indent=2))
        os.replace(aside, path)

    def stop_processes(self, processes: list[Process], timeout: float = 15.0) -> None:
        """Stop some processes, by tiers (the APIs, then the workers, then the services), and
        forget them, keeping the record of the others."""
        for tier in (*STOP_TIERS, None):
            group = [p for p in processes if _tier(p) == tier]
            if group:
                stop_together(group, timeout)
                self.processes = [p for p in self.processes if all(p is not g for g in group)]
                self.save()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every process, the APIs and workers first, the services last; remove the record."""
        self.stop_processes(list(self.processes), timeout)
        self.processes = []
        self.save()


def _tier(process: Process) -> tuple[str, ...] | None:
    kind, _ = kind_and_instance(process.name)
    return next((tier for tier in STOP_TIERS if kind in tier), None)


def process_names(settings: Settings) -> list[str]:
    """The platform's own processes the stack runs with these settings, in start order."""
    names: list[str] = []
    for kind in WORKERS:
        if kind == "replicator" and not settings.peers:
            continue  # one region: nothing to replicate (decision 0006)
        count = getattr(settings, SCALED[kind]) if kind in SCALED else 1
        names += [kind, *(f"{kind}-{n}" for n in range(2, count + 1))]
    return names


def kind_and_instance(name: str) -> tuple[str, int]:
    """`counter-2` -> ("counter", 2); any other name is the first of its kind."""
    kind, _, number = name.rpartition("-")
    if kind in SCALED and number.isdigit() and int(number) >= 2:
        return kind, int(number)
    return name, 1


def start_stack(settings: Settings, reset: bool = False) -> Stack:
    """Start what is not running of the local stack (`tally.operations.bring_up`) and return it."""
    from tally.operations import bring_up

    return bring_up(settings, reset).stack


def load_stack(settings: Settings) -> Stack:
    """The stack recorded under the data directory (possibly empty) with the settings it was started
    with; the credentials, which the record leaves out, are the given settings'."""
    path = settings.run_dir / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return Stack(settings)
    except ValueError as exc:
        raise StackError(
            f"the stack record {path} is not valid JSON ({exc}): check that none of its processes "
            "runs, then delete it"
        ) from None
    if isinstance(state, list):  # a record written before it kept the settings
        state = {"settings": {}, "processes": state}
    recorded = {
        name: value
        for name, value in state.get("settings", {}).items()
        if name in Settings.model_fields and name not in NOT_RECORDED
    }
    merged = Settings.model_validate({**settings.model_dump(), **recorded})
    processes = [
        Process(entry["name"], entry["pid"], entry["log"], started_at=entry.get("started_at"))
        for entry in state["processes"]
    ]
    return Stack(merged, processes)
