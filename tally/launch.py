"""Starting the pieces of the local stack for the stack commands (`tally.operations`): the broker
and Redis on loopback, the workers once their ports are free, the wipe of an earlier run's state;
each records what it started in a `Change`."""

from __future__ import annotations

import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import redis

from counting import keys, redisconn
from counting.settings import Settings
from tally.errors import StackError
from tally.services import is_listening, start_broker, start_redis, wait_for_port
from tally.stack import BROKER_FORGETS, LISTENS, LOCAL_HOSTS, Process, Stack, adopt, kind_and_instance

# How long a started worker may take to listen: a Faust worker imports, then joins its group, in
# seconds on an idle machine; twice the old 30 s, which a loaded 2-core machine once exceeded.
WORKER_START_S = 60


@dataclass
class Change:
    """What one command did to the stack, for the command line to report."""

    stack: Stack
    kept: list[Process] = field(default_factory=list)  # already running: left alone
    started: list[Process] = field(default_factory=list)
    stopped: list[Process] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def command_line(settings: Settings, command: str) -> str:
    """The `tally` command line that runs `command` on this stack's data directory."""
    if settings.data_dir == Settings.model_fields["data_dir"].default:
        return f"tally {command}"
    return f"tally {command} --data-dir {shlex.quote(str(settings.data_dir))}"


def _local_port(url_or_hostport: str, default: int) -> tuple[str, int]:
    parsed = urlparse(url_or_hostport if "//" in url_or_hostport else f"//{url_or_hostport}")
    return parsed.hostname or "127.0.0.1", parsed.port or default


def service_address(settings: Settings, name: str) -> tuple[str, str, int]:
    """The address of the broker or Redis as configured, with its host and port."""
    address, default = (settings.kafka_bootstrap, 9092) if name == "broker" else (settings.redis_url, 6379)
    host, port = _local_port(address, default)
    return address, host, port


def ensure_service(stack: Stack, name: str, change: Change) -> bool:
    """Start the broker or Redis on loopback unless it runs (recorded, or anyone's at its address);
    True if it was started (a new local broker has an empty log, and `broker_cost` is noted)."""
    recorded = stack.find(name)
    if recorded is not None and recorded.alive():
        return False
    if recorded is not None:
        stack.forget(name)
    address, host, port = service_address(stack.settings, name)
    if is_listening(port, host):
        change.notes.append(f"{name} at {address} runs outside this stack: left alone")
        return False
    if host not in LOCAL_HOSTS:
        raise StackError(
            f"{name} is not reachable at {address} and is not local, so the stack cannot start it"
        )
    log_dir = stack.settings.run_dir / "logs"
    service = start_broker(port, log_dir) if name == "broker" else start_redis(port, log_dir)
    # Adopted: the stack outlives this command, and its Popen must not be collected while it runs.
    process = Process(name, service.process.pid, str(service.log), adopt(service.process))
    stack.add(process)
    change.started.append(process)
    if name == "broker":
        change.notes.append(broker_cost(stack.settings))
    return True


def broker_cost(settings: Settings) -> str:
    """What a long-running local broker costs, said when one starts: Tansu 0.6's memory storage
    deletes no record (no retention; DeleteRecords is unimplemented) and each fetch lists its
    partition's whole log, so its memory and CPU grow with what it was sent (docs/operations.md)."""
    return (
        "the local Tansu broker keeps every record it is sent until it stops, and each read lists "
        "its partition's whole log: its memory and CPU grow as the stack runs (about 0.4 -> 1.1 of a "
        "core within 80 s at 20,000 messages/s; see 'A long-running local stack' in docs/operations.md). "
        f"For a long run, point TALLY_KAFKA_BOOTSTRAP at a Kafka, or start over with "
        f"'{command_line(settings, 'restart broker --reset')}'"
    )


def has_old_state(settings: Settings) -> bool:
    if settings.own_log_dir.exists() and any(settings.own_log_dir.rglob("*.parquet")):
        return True
    client = redisconn.sync_client(settings)
    try:
        return any(True for _ in client.scan_iter(match=f"{keys.PREFIX}:*", count=1000))
    except redis.RedisError as exc:
        raise StackError(
            f"Redis is not reachable at {settings.redis_url} ({exc}): start it with "
            f"'{command_line(settings, 'up')}' or set TALLY_REDIS_URL"
        ) from None
    finally:
        client.close()


def stale_state(settings: Settings, what_to_do: str) -> StackError:
    return StackError(
        f"{BROKER_FORGETS}, so a new one starts with an empty log, but {settings.data_dir} or Redis at "
        f"{settings.redis_url} still hold the state of an earlier run, which would point into a log "
        f"that is gone: {what_to_do}"
    )


def reset_state(settings: Settings) -> None:
    """Forget the log, baselines and speed state: for a fresh local broker, whose log starts empty.
    The store forgets the raw files it validated or quarantined (the catalog and the ledger stay)."""
    for folder in (
        settings.own_log_dir,
        settings.baselines_dir,
        settings.data_dir / "batch",
        settings.quarantine_dir,
    ):
        shutil.rmtree(folder, ignore_errors=True)
    _forget_log_files(settings)
    client = redisconn.sync_client(settings)
    try:
        batch = []
        for key in client.scan_iter(match=f"{keys.PREFIX}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                _delete_each(client, batch)
                batch.clear()
        _delete_each(client, batch)
    finally:
        client.close()


def _forget_log_files(settings: Settings) -> None:
    """The store's records of the wiped log's files: a run would otherwise refuse their absence."""
    from sqlalchemy.engine import make_url

    from warehouse.connection import open_store
    from warehouse.validated import forget_log_files

    url = make_url(settings.store_url)
    if url.get_backend_name() == "sqlite" and (url.database is None or not Path(url.database).exists()):
        return  # no store yet: nothing recorded
    with open_store(settings.store_url) as store:
        forget_log_files(store)


def _delete_each(client: redis.Redis, names: list[bytes]) -> None:
    """DEL of each key in one round trip (not one DEL of many: on a Redis Cluster they lie in many slots)."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.delete(name)
    pipe.execute()


def _port_of(settings: Settings, name: str) -> tuple[int, str]:
    """The port a worker listens on once it runs, and the variable that moves it."""
    if name == "ingest":
        return settings.ingest_port, "TALLY_INGEST_PORT"
    if name == "serving":
        return settings.serving_port, "TALLY_SERVING_PORT"
    if name == "replicator":
        return settings.replicator_port, "TALLY_REPLICATOR_PORT"
    from speed_layer.worker import metrics_port  # imports Faust: only when a worker starts

    return metrics_port(settings, *kind_and_instance(name)), "TALLY_FAUST_WEB_PORT"


def start_workers(stack: Stack, names: list[str], change: Change) -> None:
    """Start the named workers, then wait until each listens on its port (its API, or its /metrics)."""
    started = []
    for name in names:
        port, variable = _port_of(stack.settings, name)
        if _port_taken(port):
            raise StackError(
                f"port {port} of {LISTENS[kind_and_instance(name)[0]]} is taken by a process this stack "
                "did not start: "
                f"stop that process or set {variable} to a free port"
            )
        process = stack.start_worker(name)
        change.started.append(process)
        started.append(process)
    for process in started:
        port, _ = _port_of(stack.settings, process.name)
        what = LISTENS[kind_and_instance(process.name)[0]]
        wait_for_port(port, WORKER_START_S, what, Path(process.log), alive=process.alive)
        if not process.alive():
            raise StackError(f"{process.name} exited as it started: see its log at {process.log}")


def _port_taken(port: int, grace: float = 2.0) -> bool:
    """Whether a process listens on `port`, allowing one that has just exited `grace` seconds to let go."""
    deadline = time.monotonic() + grace
    while is_listening(port):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.1)
    return False


def undo(stack: Stack, change: Change) -> None:
    """Stop what a failed command started, keeping the record of the rest."""
    stack.stop_processes(list(change.started))
