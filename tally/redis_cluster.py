"""A Redis Cluster on this machine (`tally redis-cluster up` / `down`): masters of the machine's
redis-server in cluster mode on loopback, joined by `redis-cli --cluster create`, recorded under the
run directory so that `down` stops exactly them. What issue 26's speed layer and the tests run on
when they need a cluster; production runs a managed one (docs/scale/redis-cluster.md)."""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from counting.settings import Settings
from tally.errors import StackError
from tally.services import is_listening
from tally.stack import Process, adopt, process_fields, read_record, stop_together, write_record

STATE_FILE = "redis-cluster.json"
LOOPBACK = "127.0.0.1"
DEFAULT_FIRST_PORT = 7101
# A node also listens on its port + 10,000 for the cluster bus (Redis's fixed offset).
BUS_OFFSET = 10_000
READY_TIMEOUT_SECONDS = 30.0


@dataclass
class RedisCluster:
    """A cluster `tally redis-cluster up` started: its nodes' ports and processes."""

    ports: list[int]
    processes: list[Process] = field(default_factory=list)

    @property
    def url(self) -> str:
        """What TALLY_REDIS_URL names: any node will do (the client learns the others)."""
        return f"redis://{LOOPBACK}:{self.ports[0]}/0"

    @property
    def export_lines(self) -> list[str]:
        return ["export TALLY_REDIS_CLUSTER=1", f"export TALLY_REDIS_URL={self.url}"]

    def record(self) -> dict[str, object]:
        return {"ports": self.ports, "processes": process_fields(self.processes)}


def free_first_port(masters: int = 3, low: int = 12_000, high: int = 22_000, tries: int = 200) -> int:
    """A first port for `masters` nodes on this machine: it and the ports after it, and each one's
    bus port, free now (for tests and scripts that must not clash with a cluster already up). The
    bus ports (port + BUS_OFFSET, so 22,000-32,000) stay below Linux's ephemeral range (32,768 up):
    an outgoing connection's local port there is not listening, yet a node cannot bind it (a test
    cluster failed so in a fresh-clone run)."""
    for _ in range(tries):
        first = random.randrange(low, high - masters)
        wanted = [p for port in range(first, first + masters) for p in (port, port + BUS_OFFSET)]
        if not any(is_listening(port, LOOPBACK) for port in wanted):
            return first
    raise StackError(f"no {masters} free ports (and their bus ports) found between {low} and {high}")


def load_cluster(settings: Settings) -> RedisCluster | None:
    """The cluster recorded under the data directory, or None."""
    found = read_record(settings.run_dir / STATE_FILE, "Redis Cluster", "cluster-enabled")
    if found is None:
        return None
    state, processes = found
    return RedisCluster(list(state["ports"]), processes)


def start_cluster(
    settings: Settings,
    first_port: int = DEFAULT_FIRST_PORT,
    masters: int = 3,
    timeout: float = READY_TIMEOUT_SECONDS,
) -> tuple[RedisCluster, bool]:
    """Start `masters` nodes on 127.0.0.1:`first_port` and the ports after it, join them into one
    cluster (slots spread evenly, no replicas) and wait until every node says `cluster_state:ok`.
    A cluster already recorded and running is kept: returns it and False; one recorded but partly
    gone is stopped and started anew."""
    if masters < 3:
        raise StackError(f"a Redis Cluster needs at least 3 masters (got {masters})")
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        raise StackError("redis-server and redis-cli are needed: run 'make install' (scripts/system-deps.sh)")
    recorded = load_cluster(settings)
    if recorded is not None:
        if all(p.alive() for p in recorded.processes):
            return recorded, False
        stop_cluster(settings)
    ports = list(range(first_port, first_port + masters))
    busy = [p for port in ports for p in (port, port + BUS_OFFSET) if is_listening(p, LOOPBACK)]
    if busy:
        raise StackError(
            f"port(s) {', '.join(map(str, busy))} on {LOOPBACK} are in use (a node takes its port and "
            f"the port {BUS_OFFSET:,} above): pick another first port with --port, or stop what listens there"
        )
    cluster = RedisCluster(ports)
    try:
        for port in ports:
            _start_node(settings, cluster, server, port)
        _wait(lambda: all(_ping(cli, port) for port in ports), timeout, "the nodes to answer")
        nodes = [f"{LOOPBACK}:{port}" for port in ports]
        created = subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if created.returncode != 0:
            raise StackError(
                f"redis-cli --cluster create failed: {created.stdout[-400:]}{created.stderr[-400:]}"
            )
        _wait(lambda: all(_state_ok(cli, port) for port in ports), timeout, "cluster_state:ok on every node")
    except BaseException:
        stop_cluster(settings)
        raise
    return cluster, True


def stop_cluster(settings: Settings, timeout: float = 15.0) -> tuple[list[Process], list[Process]]:
    """Stop the recorded cluster's nodes, remove their data and the record; the processes it stopped,
    and those that had already exited."""
    cluster = load_cluster(settings)
    if cluster is None:
        return [], []
    running = [p for p in cluster.processes if p.alive()]
    gone = [p for p in cluster.processes if all(p is not r for r in running)]
    stop_together(running, timeout)
    shutil.rmtree(_nodes_dir(settings), ignore_errors=True)
    (settings.run_dir / STATE_FILE).unlink(missing_ok=True)
    return running, gone


def _nodes_dir(settings: Settings) -> Path:
    return settings.run_dir.resolve() / "redis-cluster"


def _start_node(settings: Settings, cluster: RedisCluster, server: str, port: int) -> Process:
    """One node in a session of its own, its nodes.conf in a folder of its own, nothing persisted
    (the cluster is a local test bed), logging to `<run dir>/logs/redis-<port>.log`; recorded at once."""
    folder = _nodes_dir(settings) / str(port)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in ("nodes.conf", "dump.rdb"):
        (folder / stale).unlink(missing_ok=True)
    log_dir = settings.run_dir.resolve() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"redis-{port}.log"
    options = ["--port", str(port), "--bind", LOOPBACK, "--dir", str(folder), "--cluster-enabled", "yes"]
    options += ["--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no"]
    with open(log, "ab") as handle:
        popen = adopt(
            subprocess.Popen(
                [server, *options], stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
    process = Process(f"redis-{port}", popen.pid, str(log), popen)
    cluster.processes.append(process)
    _save(settings, cluster)
    return process


def _ping(cli: str, port: int) -> bool:
    answer = subprocess.run([cli, "-p", str(port), "ping"], capture_output=True, text=True, timeout=5)
    return answer.stdout.strip() == "PONG"


def _state_ok(cli: str, port: int) -> bool:
    answer = subprocess.run(
        [cli, "-p", str(port), "cluster", "info"], capture_output=True, text=True, timeout=5
    )
    return "cluster_state:ok" in answer.stdout


def _wait(ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise StackError(
                f"timed out after {timeout:.0f} s waiting for {what}: see <data>/run/logs/redis-*.log"
            )
        time.sleep(0.2)


def _save(settings: Settings, cluster: RedisCluster) -> None:
    write_record(settings.run_dir / STATE_FILE, cluster.record())
