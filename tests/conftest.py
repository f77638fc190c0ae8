"""Shared fixtures: a real Tansu broker and a real Redis for integration tests, settings on tmp dirs."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from counting.settings import Settings
from tally.services import Service, free_port, free_ports, start_broker, start_redis
from tally.stack import Stack, start_stack

# The heap of the Spark JVMs an xdist worker and its children start (the driver's, in local mode).
_WORKER_SPARK_DRIVER_MEMORY = "3g"


def pytest_configure(config: pytest.Config) -> None:
    """On an xdist worker:

    - It runs as `python -c`: its `__main__` has no file, which PySpark takes for a doctest run
      (`pyspark.sql.connect.utils.check_dependencies` then exits the process when Spark Connect's
      dependencies are missing, as here, on Great Expectations' import of it). Give it the file a
      plain pytest run has, `pytest/__main__.py` (a `spawn` child runs it as `__mp_main__`: nothing).
    - Each worker keeps a Spark JVM for its session. The local master's 12g
      (`batch_layer.spark_conf`), with G1 marking the old generation only from 80 % of it, let one
      grow past 7 GB: three workers' and the tests' other JVMs ran out of the machine's memory and
      the kernel killed one. The tests' data is small: spark-submit's `--driver-memory`, given after
      the session's settings, caps the heap (for the JVMs of the worker and of its children).
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    main = sys.modules["__main__"]
    if main.__spec__ is None and not hasattr(main, "__file__"):
        main.__file__ = str(Path(pytest.__file__).with_name("__main__.py"))
    driver_memory = f"--driver-memory {_WORKER_SPARK_DRIVER_MEMORY} pyspark-shell"
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", driver_memory)


# The test files that share an expensive session fixture: `--dist loadfile` keeps them on one
# worker, which builds it once (the serving layer's `history`: two Spark batches).
_SHARED_SETUP = ("tests/serving_layer/",)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, each of the _SHARED_SETUP folders one unit of work instead of a file."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((folder for folder in _SHARED_SETUP if path.startswith(folder)), path)

    return _Scheduling(config, log)


def _worker_number() -> int:
    """This pytest process's number among xdist's workers (`gw0` is 0); 0 without xdist."""
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Kafka-protocol broker (Tansu, memory storage) for the whole session: its bootstrap."""
    service = start_broker(free_port(), tmp_path_factory.mktemp("broker"))
    yield f"127.0.0.1:{service.port}"
    service.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis: TALLY_TEST_REDIS_URL if set, else a redis-server of the test session's own.

    On TALLY_TEST_REDIS_URL each xdist worker takes a pair of databases of its own (the URL's and
    the one after it for worker 0, the two after those for worker 1, ...): tests flush their
    database, and some use the next one as a second Redis (`test_regions.py`)."""
    url = os.environ.get("TALLY_TEST_REDIS_URL")
    if url:
        parts = urlsplit(url)
        db = int(parts.path.lstrip("/") or 0) + 2 * _worker_number()
        yield parts._replace(path=f"/{db}").geturl()
        return
    service: Service = start_redis(free_port(), tmp_path_factory.mktemp("redis"))
    yield f"redis://127.0.0.1:{service.port}/0"
    service.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis Cluster of three masters on loopback (`tally.redis_cluster`), for the session."""
    from tally.redis_cluster import free_first_port, start_cluster, stop_cluster

    where = Settings(data_dir=tmp_path_factory.mktemp("redis-cluster"))
    cluster, _ = start_cluster(where, free_first_port())
    yield cluster.url
    stop_cluster(where)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def settings(tmp_path: Path, redis_url: str) -> Settings:
    """Settings on a fresh data directory, small buckets, short waits, a topic of the test's own,
    explicit secrets."""
    topic = f"events-{uuid.uuid4().hex[:8]}"
    return Settings(
        data_dir=tmp_path / "data",
        admin_key="test-admin-key-0123456789",
        collector_key="test-collector-key-0123456789",
        user_token_secret="test-user-token-secret-0123456789",
        bucket_ms=2_000,
        redis_url=redis_url,
        events_topic=topic,
        dead_letter_topic=f"{topic}-dlq",
        topic_partitions=2,
        delivery_timeout_ms=1_000,
        archiver_flush_ms=1_000,  # tests wait for the archiver: a file a second
        serving_cache_ms=0,
    )


@pytest.fixture
def stack_settings(settings: Settings, broker: str) -> Settings:
    """Settings for a whole local stack on free ports, against the session's broker and Redis."""
    return settings.model_copy(
        update={
            "kafka_bootstrap": broker,
            "ingest_port": free_port(),
            "serving_port": free_port(),
            "faust_web_port": free_ports(2),
            "topic_partitions": 3,
        }
    )


@pytest.fixture
def stack(stack_settings: Settings, redis_client: redis.Redis) -> Iterator[Stack]:
    """The real local stack: both Faust workers and both APIs as processes."""
    running = start_stack(stack_settings, reset=True)
    yield running
    running.stop()


# Appended with the fixture it types (the imports above are edited by others).
from pyspark.sql import SparkSession  # noqa: E402

from batch_layer.session import build_session  # noqa: E402


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local[2] SparkSession for every test of the session that runs Spark (4 shuffle
    partitions, UTC): the batch-layer tests and the batches of `tests.writers`."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("spark"), spark_master="local[2]")
    session = build_session(settings, app_name="tally-tests")
    yield session
    session.stop()
