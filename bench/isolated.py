"""A stack of a benchmark's own: a Tansu broker and a redis-server on free ports, and the settings
that point every Tally process at them."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from counting.settings import Settings
from tally.secrets import with_local_secrets
from tally.services import Service, free_port, free_ports, start_broker, start_redis


def isolated_services(work: Path, bucket_ms: int = 10_000) -> tuple[Service, Service, Settings]:
    """(broker, redis, settings): the stores started with their logs under `work/logs`, data under
    `work/data`, free ports for both APIs and the workers' metrics, the secrets generated under it."""
    broker = start_broker(free_port(), work / "logs")
    store = start_redis(free_port(), work / "logs")
    settings = Settings(
        data_dir=work / "data",
        bucket_ms=bucket_ms,
        kafka_bootstrap=f"127.0.0.1:{broker.port}",
        redis_url=f"redis://127.0.0.1:{store.port}/0",
        ingest_port=free_port(),
        serving_port=free_port(),
        faust_web_port=free_ports(2),
    )
    return broker, store, with_local_secrets(settings)


def run_in_work_dir(
    prefix: str, run: Callable[[Path], dict[str, Any]], out: Path, keep: bool, log: Callable[[str], None]
) -> dict[str, Any]:
    """Run a benchmark in a fresh work directory (kept when asked or when the run is not `ok`,
    removed otherwise), write its figures as JSON to `out` and print them as one line."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    result: dict[str, Any] = {}
    try:
        result = run(work)
    finally:
        if keep or not result.get("ok"):
            log(f"data and logs kept under {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, separators=(",", ":")))
    return result
