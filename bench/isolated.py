"""A stack of a benchmark's own: a Tansu broker and a redis-server on free ports, and the settings
that point every Tally process at them."""

from __future__ import annotations

from pathlib import Path

from counting.settings import Settings
from tally.secrets import with_local_secrets
from tally.services import Service, free_port, start_broker, start_redis


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
        faust_web_port=free_port(),
    )
    return broker, store, with_local_secrets(settings)
