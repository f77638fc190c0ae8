"""The local stack: broker, Redis, the Faust workers and both APIs as child processes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import redis

from counting import keys
from counting.settings import Settings
from counting.settings import settings_env as tally_variables
from tally.errors import StackError
from tally.services import is_listening, start_broker, start_redis, wait_for_port
from tally.topics import ensure_topics

STATE_FILE = "stack.json"
WORKERS: dict[str, list[str]] = {
    "counter": ["-m", "speed_layer", "counter"],
    "archiver": ["-m", "speed_layer", "archiver"],
    "ingest": ["-m", "ingest"],
    "serving": ["-m", "serving_layer"],
}


def settings_env(settings: Settings) -> dict[str, str]:
    """This process's environment with the TALLY_* variables that give a child the same settings."""
    return {**os.environ, **tally_variables(settings)}


@dataclass
class Process:
    name: str
    pid: int
    log: str
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)


@dataclass
class Stack:
    """The processes `tally up` started, recorded under the run directory."""

    settings: Settings
    processes: list[Process] = field(default_factory=list)

    def get(self, name: str) -> Process:
        for process in self.processes:
            if process.name == name:
                return process
        raise StackError(f"no process named {name!r} in the stack")

    def start_worker(self, name: str) -> Process:
        """Start (or restart) one of the platform's own processes."""
        log_dir = self.settings.run_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{name}.log"
        handle = open(log, "ab")  # noqa: SIM115 - the child keeps it
        popen = subprocess.Popen(
            [sys.executable, *WORKERS[name]],
            env=settings_env(self.settings),
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        process = Process(name, popen.pid, str(log), popen)
        self.processes = [p for p in self.processes if p.name != name] + [process]
        self.save()
        return process

    def save(self) -> None:
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        state = [{"name": p.name, "pid": p.pid, "log": p.log} for p in self.processes]
        (self.settings.run_dir / STATE_FILE).write_text(json.dumps(state, indent=2))

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every process, the APIs and workers first, the services last."""
        order = ["ingest", "serving", "counter", "archiver", "redis", "broker"]
        for name in order:
            for process in [p for p in self.processes if p.name == name]:
                process.signal(signal.SIGTERM)
                deadline = time.monotonic() + timeout
                while process.alive() and time.monotonic() < deadline:
                    time.sleep(0.1)
                if process.alive():
                    process.signal(signal.SIGKILL)
                if process.popen is not None:
                    process.popen.wait()
        state = self.settings.run_dir / STATE_FILE
        state.unlink(missing_ok=True)
        self.processes = []


def _local_port(url_or_hostport: str, default: int) -> tuple[str, int]:
    parsed = urlparse(url_or_hostport if "//" in url_or_hostport else f"//{url_or_hostport}")
    return parsed.hostname or "127.0.0.1", parsed.port or default


def _start_service_if_needed(stack: Stack, name: str, address: str, default_port: int) -> bool:
    """Start the broker or Redis on loopback unless one answers there; True if it was started."""
    host, port = _local_port(address, default_port)
    if is_listening(port, host):
        return False
    if host not in ("127.0.0.1", "localhost"):
        raise StackError(
            f"{name} is not reachable at {address} and is not local, so 'tally up' cannot start it"
        )
    log_dir = stack.settings.run_dir / "logs"
    service = start_broker(port, log_dir) if name == "broker" else start_redis(port, log_dir)
    stack.processes.append(Process(name, service.process.pid, str(service.log), service.process))
    stack.save()
    return True


def _has_old_state(settings: Settings) -> bool:
    if settings.raw_dir.exists() and any(settings.raw_dir.rglob("*.parquet")):
        return True
    client = redis.Redis.from_url(settings.redis_url)
    try:
        return any(True for _ in client.scan_iter(match=f"{keys.PREFIX}:*", count=1000))
    finally:
        client.close()


def reset_state(settings: Settings) -> None:
    """Forget the log, baselines and speed state: for a fresh local broker, whose log starts empty."""
    for folder in (settings.raw_dir, settings.baselines_dir, settings.data_dir / "batch"):
        shutil.rmtree(folder, ignore_errors=True)
    client = redis.Redis.from_url(settings.redis_url)
    try:
        batch = []
        for key in client.scan_iter(match=f"{keys.PREFIX}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                client.delete(*batch)
                batch.clear()
        if batch:
            client.delete(*batch)
    finally:
        client.close()


def start_stack(settings: Settings, reset: bool = False) -> Stack:
    """Start what is not already running: broker, Redis, topics, both Faust workers, both APIs.

    The local broker keeps nothing across restarts, so a freshly started one means an empty log:
    the speed state and Parquet log of an earlier run would point into a log that is gone. Then
    `reset` wipes them; without it, starting over old state is refused.
    """
    stack = Stack(settings)
    try:
        fresh_broker = _start_service_if_needed(stack, "broker", settings.kafka_bootstrap, 9092)
        _start_service_if_needed(stack, "redis", settings.redis_url, 6379)
        if reset:
            reset_state(settings)
        elif fresh_broker and _has_old_state(settings):
            raise StackError(
                f"a new local broker starts with an empty log, but {settings.data_dir} or Redis at "
                f"{settings.redis_url} still hold the state of an earlier run: rerun with "
                "'tally up --reset' to start empty"
            )
        ensure_topics(settings)
        for name in ("counter", "archiver", "ingest", "serving"):
            stack.start_worker(name)
        wait_for_port(settings.ingest_port, 30, "the ingest API", Path(stack.get("ingest").log))
        wait_for_port(settings.serving_port, 30, "the serving API", Path(stack.get("serving").log))
    except BaseException:
        stack.stop()
        raise
    return stack


def load_stack(settings: Settings) -> Stack:
    """The stack recorded by an earlier `tally up` (possibly empty)."""
    state = settings.run_dir / STATE_FILE
    if not state.exists():
        return Stack(settings)
    entries = json.loads(state.read_text())
    return Stack(settings, [Process(e["name"], e["pid"], e["log"]) for e in entries])
