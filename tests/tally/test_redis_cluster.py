"""`tally redis-cluster up|down`: a real Redis Cluster of the machine's redis-server on loopback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from counting.settings import Settings
from tally.cli import app
from tally.redis_cluster import BUS_OFFSET, free_first_port, load_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]
runner = CliRunner()


def _tally(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_up_starts_masters_that_share_the_slots_and_down_stops_them(tmp_path: Path) -> None:
    port, data = free_first_port(), str(tmp_path / "data")
    code, said = _tally("redis-cluster", "up", "--data-dir", data, "--port", str(port))
    assert code == 0, said
    url = f"redis://127.0.0.1:{port}/0"
    assert "export TALLY_REDIS_CLUSTER=1" in said and f"export TALLY_REDIS_URL={url}" in said

    client = redis.RedisCluster.from_url(url)
    names = [f"video-{n}" for n in range(40)]
    for name in names:
        client.set(name, name)
    assert {client.get_node_from_key(name).port for name in names} == {port, port + 1, port + 2}
    assert [client.get(name) for name in names] == [name.encode() for name in names]
    client.close()

    code, said = _tally("redis-cluster", "up", "--data-dir", data, "--port", str(port))
    assert code == 0 and said.count("already running") == 3, said
    cluster = load_cluster(Settings(data_dir=tmp_path / "data"))
    assert cluster is not None
    code, said = _tally("redis-cluster", "down", "--data-dir", data)
    assert code == 0 and said.startswith("stopped redis-"), said
    assert not any(p.alive() for p in cluster.processes)
    assert load_cluster(Settings(data_dir=tmp_path / "data")) is None
    code, said = _tally("redis-cluster", "down", "--data-dir", data)
    assert code == 0 and "nothing to stop" in said


def test_up_refuses_a_port_in_use_naming_it(tmp_path: Path) -> None:
    port = free_first_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", port + 1 + BUS_OFFSET))
        held.listen()
        code, said = _tally("redis-cluster", "up", "--data-dir", str(tmp_path), "--port", str(port))
    assert code == 2
    assert f"{port + 1 + BUS_OFFSET}" in said and "--port" in said
    assert load_cluster(Settings(data_dir=tmp_path)) is None
