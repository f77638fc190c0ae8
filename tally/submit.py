"""Computing a batch run on a Spark cluster through `spark-submit` (client mode): the command line,
the packages shipped to the executors, the driver's environment and a check that the master answers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from batch_layer.errors import BatchError
from batch_layer.job import BatchResult
from counting.settings import Settings, settings_env

_PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The packages a cluster's executors import (shipped with `spark-submit --py-files`).
_SHIPPED_PACKAGES = ("batch_layer", "counting", "warehouse")
# The application spark-submit runs: its `main` computes one run, unpublished, and prints it.
APPLICATION = Path(__file__).resolve().with_name("pipeline.py")


def bundle_packages(folder: Path) -> Path:
    """A zip of the packages the executors import, for `spark-submit --py-files`."""
    archive = folder / "tally-batch.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for package in _SHIPPED_PACKAGES:
            for path in sorted((_PROJECT_ROOT / package).rglob("*.py")):
                bundle.write(path, path.relative_to(_PROJECT_ROOT).as_posix())
    return archive


def spark_submit_command(settings: Settings, cutoff: int, run_id: str, py_files: Path) -> list[str]:
    """The spark-submit command line that computes one run on `settings.spark_master`."""
    submit = shutil.which("spark-submit") or str(Path(sys.executable).parent / "spark-submit")
    return [
        submit,
        "--master",
        settings.spark_master,
        "--name",
        f"tally-batch-{run_id}",
        "--conf",
        "spark.sql.session.timeZone=UTC",
        "--py-files",
        str(py_files),
        str(APPLICATION),
        "--cutoff",
        str(cutoff),
        "--run-id",
        run_id,
        "--payouts",
    ]


def compute_with_spark_submit(settings: Settings, cutoff: int, run_id: str) -> BatchResult:
    """Compute a run through `spark-submit` (client mode: this machine runs the driver, so the
    data directory must be storage the cluster's executors also see). Settings go by TALLY_* env.
    A standalone master that accepts no connection fails at once, before Spark starts."""
    _require_reachable_master(settings.spark_master)
    with tempfile.TemporaryDirectory(prefix="tally-submit-") as folder:
        command = spark_submit_command(settings, cutoff, run_id, bundle_packages(Path(folder)))
        spark = _spark_env(settings.spark_master, _driver_python(Path(folder)))
        env = {**os.environ, **spark, **settings_env(settings)}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        failure = done.stderr[-2000:] if "Traceback" not in done.stdout else done.stdout[-2000:]
        raise BatchError(f"spark-submit of run {run_id!r} failed ({done.returncode}): {failure}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise BatchError(f"spark-submit of run {run_id!r} printed no result: {done.stdout[-2000:]}")
    return BatchResult(**json.loads(lines[-1]))


def _spark_env(master: str, driver_python: Path | None = None) -> dict[str, str]:
    """SPARK_HOME (default: the pyspark package's own distribution), the driver's Python (client
    mode: the driver runs here and imports the project; default: this interpreter) and the
    executors' (PYSPARK_PYTHON, this interpreter: the same path must hold the same Python on every
    worker); the driver binds loopback when the master is there (else Spark picks the machine's
    outward address, which a cluster on loopback does not reach)."""
    import pyspark

    return {
        "SPARK_HOME": os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).resolve().parent),
        "PYSPARK_DRIVER_PYTHON": str(driver_python or sys.executable),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        **({"SPARK_LOCAL_IP": "127.0.0.1"} if _on_loopback(master) else {}),
    }


def _driver_python(folder: Path) -> Path:
    """This interpreter, for the driver, with the project's root first on its path and not the
    application's folder: spark-submit puts the py-files zip first (it is for the executors, and
    holds no data files: the bot rules, the store's migrations), and Python the folder of the
    application, this file's, whose `secrets.py` and `airflow.py` hide the real modules."""
    import shlex

    script = folder / "driver-python"
    root, python = shlex.quote(str(_PROJECT_ROOT)), shlex.quote(sys.executable)
    script.write_text(f'#!/bin/sh\nPYTHONPATH={root}"${{PYTHONPATH:+:$PYTHONPATH}}" exec {python} -P "$@"\n')
    script.chmod(0o755)
    return script


def _master_addresses(master: str) -> list[tuple[str, int]]:
    """The host and port of each master of a standalone URL, `spark://host:port[,host2:port2]` (high
    availability lists several); none for another kind of master (yarn, k8s://, local)."""
    if not master.startswith("spark://"):
        return []
    addresses = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise BatchError(
                f"TALLY_SPARK_MASTER must be spark://host:port for a standalone cluster (got {master!r}): "
                "fix the setting, e.g. spark://127.0.0.1:7077 ('tally spark up' prints it)"
            )
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def _on_loopback(master: str) -> bool:
    """Whether every master of a standalone URL is on this machine's loopback."""
    import ipaddress

    def loopback(host: str) -> bool:
        try:
            return host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    addresses = _master_addresses(master)
    return bool(addresses) and all(loopback(host) for host, _ in addresses)


def _require_reachable_master(master: str, timeout: float = 3.0) -> None:
    """Raise `BatchError` unless a standalone master (any, of several) accepts a TCP connection
    within `timeout` seconds: spark-submit would retry it for a minute, then fail in a stack trace."""
    import socket

    failures = []
    for host, port in _master_addresses(master):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            failures.append(f"{host}:{port} ({exc.strerror or exc})")
    if failures:
        raise BatchError(
            f"the Spark master of TALLY_SPARK_MASTER={master} accepts no connection at "
            f"{', '.join(failures)}: start a cluster on this machine with 'tally spark up' and export the "
            "TALLY_SPARK_MASTER it prints, or fix the setting (local[2] runs Spark in the batch's process)"
        )
