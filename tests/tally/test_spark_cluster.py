"""`tally spark up` starts a Spark standalone cluster on loopback; `tally batch run` computes on it
through spark-submit and writes what a local-mode run of the same log writes, equal to the oracle;
`tally spark down` leaves none of its processes; a master that accepts no connection fails at once."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import redis
from typer.testing import CliRunner

from batch_layer.errors import BatchError
from batch_layer.job import BatchResult
from batch_layer.payouts import load_computed_payouts
from counting.batchpaths import baseline_path, daily_path, series_path
from counting.settings import Settings
from counting.traffic import TrafficConfig
from tally import pipeline
from tally.cli import app
from tally.services import free_port, is_alive
from tally.spark_cluster import SparkCluster, load_cluster
from tests.batch_layer.test_batch_payouts import MIDNIGHT, traffic_events
from tests.logfiles import oracle_rows, write_log
from tests.writers import archived_until
from warehouse.baseline import current_baseline

pytestmark = pytest.mark.filterwarnings(
    "ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"
)

BUCKET_MS = 60_000
# Small: Spark's fixed costs dominate. Bots included, sent from 10 minutes before a UTC midnight.
TRAFFIC = TrafficConfig(
    seed=5, videos=12, viewers=300, events=2_000, rate=2.0, bot_fraction=0.15, start_ms=MIDNIGHT - 600_000
)
CUTOFF = MIDNIGHT + 300_000
runner = CliRunner()


def _tally(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def _settings(data_dir: Path, master: str = "local[2]") -> Settings:
    return Settings(data_dir=data_dir, bucket_ms=BUCKET_MS, spark_master=master)


@pytest.fixture
def data_dir(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A data directory holding the generated traffic's log, closed up to CUTOFF, and its catalog;
    the commands read Redis and the bucket width from the environment, as on a machine."""
    monkeypatch.setenv("TALLY_REDIS_URL", redis_url)
    monkeypatch.setenv("TALLY_BUCKET_MS", str(BUCKET_MS))
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "False")
    folder = tmp_path / "data"
    write_log(_settings(folder).raw_dir, traffic_events(TRAFFIC))
    archived_until(_settings(folder), CUTOFF)
    code, output = _tally("catalog", "load", "--videos", "12", "--seed", "5", "--data-dir", str(folder))
    assert code == 0, output
    return folder


@pytest.fixture
def cluster(data_dir: Path) -> Iterator[SparkCluster]:
    """A cluster of two workers (1 core, 1g each) started by `tally spark up` on a free port, and
    stopped by `tally spark down`, which must leave none of its processes running."""
    port = free_port()
    up = ("spark", "up", "--data-dir", str(data_dir), "--port", str(port))
    code, output = _tally(*up, "--workers", "2", "--cores", "1", "--memory", "1g")
    started = load_cluster(_settings(data_dir))
    try:
        assert code == 0, output
        assert started is not None
        assert started.master_url == f"spark://127.0.0.1:{port}"
        assert f"export TALLY_SPARK_MASTER=spark://127.0.0.1:{port}" in output
        yield started
    finally:
        code, output = _tally("spark", "down", "--data-dir", str(data_dir))
        assert code == 0, output
        if started is not None:
            names = [p.name for p in started.processes]
            assert names == ["spark-master", "spark-worker-1", "spark-worker-2"]
            assert f"stopped {', '.join(names)}" in output
            assert [p.pid for p in started.processes if is_alive(p.pid, p.started_at)] == []
        assert load_cluster(_settings(data_dir)) is None


@pytest.mark.slow
@pytest.mark.integration
def test_the_batch_on_the_cluster_writes_what_local_mode_writes_and_the_oracle_counts(
    data_dir: Path, cluster: SparkCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    master = _master_state(cluster)
    assert [(w["host"], w["cores"], w["memory"], w["state"]) for w in master["workers"]] == [
        ("127.0.0.1", 1, 1024, "ALIVE"),
        ("127.0.0.1", 1, 1024, "ALIVE"),
    ]
    port = cluster.master_url.rsplit(":", 1)[1]
    code, output = _tally("spark", "up", "--data-dir", str(data_dir), "--port", port)
    assert code == 0 and output.count("already running") == 3, output
    code, output = _tally("spark", "up", "--data-dir", str(data_dir / "other"), "--port", port)
    assert code == 2 and f"port {port} on 127.0.0.1 is in use: pick another with --port" in output
    settings = _settings(data_dir)
    # Local mode first: the published run compacts the closed hours, and a run's payout rows name
    # the files it read.
    local = BatchResult(**pipeline.compute(settings, CUTOFF, "local-mode"))
    monkeypatch.setenv("TALLY_SPARK_MASTER", cluster.master_url)

    code, output = _tally("batch", "run", "--data-dir", str(data_dir), "--cutoff", str(CUTOFF), "--payouts")

    assert code == 0, output
    answer = json.loads(output[output.rfind("\n{") + 1 :])
    on_cluster = str(answer["run_id"])
    assert answer["published"] is True and answer["payouts_written"] == answer["payouts"]
    master = _master_state(cluster)
    assert [(a["name"], a["state"]) for a in master["completedapps"]] == [("tally-batch", "FINISHED")]
    app_id = master["completedapps"][0]["id"]
    work = data_dir / "run" / "spark"
    assert (work / "worker-1" / app_id).is_dir() and (work / "worker-2" / app_id).is_dir()  # executors ran
    baseline = current_baseline(settings.baselines_dir)
    assert baseline is not None and baseline.run_id == on_cluster
    assert baseline.rows == oracle_rows(traffic_events(TRAFFIC), CUTOFF)
    assert answer["log_compacted"]["merged"] > 0
    assert (local.events_read, local.videos, local.payouts) == (
        answer["events_read"],
        answer["videos"],
        answer["payouts"],
    )
    for path in (baseline_path, daily_path, series_path):
        assert _rows(path(settings, "local-mode")) == _rows(path(settings, on_cluster)), path.__name__
    local_payouts = load_computed_payouts(settings, "local-mode")
    assert local_payouts == [
        replace(row, run_id="local-mode") for row in load_computed_payouts(settings, on_cluster)
    ]
    assert len(local_payouts) > 0


def _master_state(cluster: SparkCluster) -> dict[str, Any]:
    """What the master's web UI says of its workers and applications."""
    with urllib.request.urlopen(f"{cluster.web_ui}/json/", timeout=5) as response:
        state: dict[str, Any] = json.loads(response.read())
    return state


def _rows(path: Path) -> list[dict[str, object]]:
    """A run's output as the readers read it (one Parquet file or folder), without its run id."""
    table = pq.read_table(path)
    return table.drop_columns([c for c in ("run_id",) if c in table.column_names]).to_pylist()


@pytest.mark.serial  # timed: the failure within 5 s
def test_an_unreachable_master_fails_at_once_naming_the_setting(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    settings = _settings(tmp_path / "data", f"spark://127.0.0.1:{port}")
    started = time.monotonic()

    with pytest.raises(BatchError) as failed:
        pipeline.compute(settings, CUTOFF, "unreachable")

    assert time.monotonic() - started < 5
    message = str(failed.value)
    assert f"TALLY_SPARK_MASTER=spark://127.0.0.1:{port} accepts no connection" in message
    assert f"127.0.0.1:{port} (Connection refused)" in message
    assert "'tally spark up'" in message and "fix the setting" in message


def test_a_worker_smaller_than_an_executor_is_refused_and_nothing_starts(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    code, output = _tally("spark", "up", "--data-dir", str(data_dir), "--memory", "512m")

    assert code == 2, output
    assert "each worker needs at least 1024m" in output and "(got '512m')" in output
    assert load_cluster(_settings(data_dir)) is None
    code, output = _tally("spark", "down", "--data-dir", str(data_dir))
    assert code == 0 and "nothing to stop" in output
