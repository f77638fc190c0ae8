"""A Spark standalone cluster on this machine (`tally spark up` / `down`): a master and workers of the
installed PySpark, all on loopback, recorded under the run directory so that `down` stops exactly them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from counting.settings import Settings
from tally.errors import StackError
from tally.services import free_port, is_listening
from tally.stack import Process, adopt, process_fields, read_record, stop_together, write_record

STATE_FILE = "spark-cluster.json"
LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 7077
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# What each executor of a batch asks a worker for: spark-submit's default `spark.executor.memory`.
# A worker with less never gets an executor, and the batch waits for one forever.
EXECUTOR_MEMORY_MB = 1024
REGISTER_TIMEOUT_SECONDS = 60.0
_MEMORY = re.compile(r"(?P<amount>[1-9][0-9]*)(?P<unit>[mMgG])")


@dataclass
class SparkCluster:
    """A cluster `tally spark up` started: its master's URL and web UI, the workers' resources, and
    its processes (the master first)."""

    master_url: str
    web_ui: str
    workers: int
    cores: int
    memory: str
    processes: list[Process] = field(default_factory=list)

    @property
    def export_line(self) -> str:
        return f"export TALLY_SPARK_MASTER={self.master_url}"

    def record(self) -> dict[str, object]:
        return {
            "master_url": self.master_url,
            "web_ui": self.web_ui,
            "workers": self.workers,
            "cores": self.cores,
            "memory": self.memory,
            "processes": process_fields(self.processes),
        }


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package (its `bin/spark-class` and `jars/`)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def memory_megabytes(memory: str) -> int:
    """A worker's memory as Spark writes it (`1g`, `1536m`) in MiB; refuse one below what an executor
    of a batch asks for."""
    matched = _MEMORY.fullmatch(memory.strip())
    if matched is None:
        raise StackError(f"memory must be a whole number of MiB or GiB, like 1g or 1536m (got {memory!r})")
    megabytes = int(matched["amount"]) * (1024 if matched["unit"] in "gG" else 1)
    if megabytes < EXECUTOR_MEMORY_MB:
        raise StackError(
            f"each worker needs at least {EXECUTOR_MEMORY_MB}m, the memory an executor of a batch asks "
            f"for (spark.executor.memory): a smaller worker never runs one (got {memory!r})"
        )
    return megabytes


def load_cluster(settings: Settings) -> SparkCluster | None:
    """The cluster recorded under the data directory, or None."""
    found = read_record(settings.run_dir / STATE_FILE, "Spark cluster", "spark")
    if found is None:
        return None
    state, processes = found
    return SparkCluster(
        state["master_url"], state["web_ui"], state["workers"], state["cores"], state["memory"], processes
    )


def start_cluster(
    settings: Settings,
    port: int = DEFAULT_PORT,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    timeout: float = REGISTER_TIMEOUT_SECONDS,
) -> tuple[SparkCluster, bool]:
    """Start a master on 127.0.0.1:`port` and `workers` workers of `cores` cores and `memory` each,
    and wait until every worker has registered with the master. A cluster already recorded and
    running is kept: returns it and False; one recorded but partly gone is stopped and started anew."""
    megabytes = memory_megabytes(memory)
    if workers < 1 or cores < 1:
        raise StackError(f"a cluster needs at least one worker of one core (got {workers} of {cores})")
    recorded = load_cluster(settings)
    if recorded is not None:
        if all(p.alive() for p in recorded.processes):
            return recorded, False
        stop_cluster(settings)
    if is_listening(port, LOOPBACK):
        raise StackError(
            f"port {port} on {LOOPBACK} is in use: pick another with --port, or stop what listens there"
        )
    web_port = free_port()
    cluster = SparkCluster(
        f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{web_port}", workers, cores, memory
    )
    try:
        master = _start(settings, cluster, "spark-master", [MASTER_CLASS, "--port", str(port)], web_port)
        for number in range(1, workers + 1):
            work = settings.run_dir.resolve() / "spark" / f"worker-{number}"
            work.mkdir(parents=True, exist_ok=True)
            options = ["-c", str(cores), "-m", f"{megabytes}m", "--work-dir", str(work), cluster.master_url]
            _start(settings, cluster, f"spark-worker-{number}", [WORKER_CLASS, *options], free_port())
        _wait_for_workers(cluster, master, timeout)
    except BaseException:
        stop_cluster(settings)
        raise
    return cluster, True


def stop_cluster(settings: Settings, timeout: float = 15.0) -> tuple[list[Process], list[Process]]:
    """Stop the recorded cluster, its workers (and their executors) first, then the master, and
    remove the record; the processes it stopped, and those that had already exited."""
    cluster = load_cluster(settings)
    if cluster is None:
        return [], []
    running = [p for p in cluster.processes if p.alive()]
    gone = [p for p in cluster.processes if all(p is not r for r in running)]
    stop_together([p for p in running if p.name != "spark-master"], timeout)
    stop_together([p for p in running if p.name == "spark-master"], timeout)
    (settings.run_dir / STATE_FILE).unlink(missing_ok=True)
    return running, gone


def _start(
    settings: Settings, cluster: SparkCluster, name: str, arguments: list[str], web_port: int
) -> Process:
    """Start one daemon of the cluster in a session of its own (its group holds the executors it
    launches), on loopback, logging to `<run dir>/logs/<name>.log`; record it at once."""
    log_dir = settings.run_dir.resolve() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    home = spark_home()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": LOOPBACK,
        # Executors' scratch space (shuffle and spilled blocks): under the data directory, not /tmp.
        "SPARK_LOCAL_DIRS": str(settings.run_dir.resolve() / "spark" / "local"),
        # The master's REST submission server would take port 6066 (the Faust workers' web port):
        # the batch submits through the master's own port.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    main_class, *options = arguments
    command = [str(home / "bin" / "spark-class"), main_class, "--host", LOOPBACK, "--webui-port"]
    with open(log, "ab") as handle:
        popen = adopt(
            subprocess.Popen(
                [*command, str(web_port), *options],
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    process = Process(name, popen.pid, str(log), popen)
    cluster.processes.append(process)
    _save(settings, cluster)
    return process


def _save(settings: Settings, cluster: SparkCluster) -> None:
    write_record(settings.run_dir / STATE_FILE, cluster.record())


def _wait_for_workers(cluster: SparkCluster, master: Process, timeout: float) -> None:
    """Wait until the master lists every worker as ALIVE (its web UI's JSON); raise naming the log
    of a daemon that exited, or of the master when the workers are late."""
    deadline = time.monotonic() + timeout
    alive = 0
    while time.monotonic() < deadline:
        exited = next((p for p in cluster.processes if not p.alive()), None)
        if exited is not None:
            raise StackError(f"{exited.name} of the Spark cluster exited while starting: see {exited.log}")
        alive = _alive_workers(cluster.web_ui)
        if alive >= cluster.workers:
            return
        time.sleep(0.5)
    raise StackError(
        f"{alive} of {cluster.workers} Spark workers registered with the master at {cluster.master_url} "
        f"within {timeout:.0f} s: see the logs at {master.log} and beside it (spark-worker-*.log)"
    )


def _alive_workers(web_ui: str) -> int:
    """How many workers the master's web UI lists as ALIVE (0 while it does not answer yet)."""
    try:
        with urllib.request.urlopen(f"{web_ui}/json/", timeout=2.0) as response:
            state = json.loads(response.read())
    except (OSError, ValueError):
        return 0
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")
