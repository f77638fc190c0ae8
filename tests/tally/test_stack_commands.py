"""The operating commands of the local stack on real processes: `up` over a running stack, `start`,
`stop` and `restart` of one worker, `down` after a partial start, clear refusals."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner, Result

from counting import oracle, redisconn
from counting.event import Event
from counting.settings import Settings, settings_env
from tally.cli import app
from tally.loadgen import post_traffic
from tally.services import free_port, free_ports, is_listening, process_started_at
from tally.speedview import counter_caught_up, wait_until
from tally.stack import Process, Stack, process_names
from tally.traffic_run import generate_items

runner = CliRunner()
EVERY_PROCESS = {"broker", "counter", "archiver", "ingest", "serving"}
# Every process a record named during this module: stopped at the end whatever a test left behind.
SEEN: set[int] = set()


def _stack_settings(root: Path, redis_url: str) -> Settings:
    """A stack of its own: its broker (started by `tally up`) and ports, the session's Redis."""
    topic = f"events-{uuid.uuid4().hex[:8]}"
    return Settings(
        data_dir=root / "data",
        admin_key="test-admin-key-0123456789",
        collector_key="test-collector-key-0123456789",
        user_token_secret="test-user-token-secret-0123456789",
        bucket_ms=2_000,
        redis_url=redis_url,
        kafka_bootstrap=f"127.0.0.1:{free_port()}",
        events_topic=topic,
        dead_letter_topic=f"{topic}-dlq",
        topic_partitions=2,
        delivery_timeout_ms=1_000,
        serving_cache_ms=0,
        ingest_port=free_port(),
        serving_port=free_port(),
        faust_web_port=free_ports(2),
    )


def _tally(settings: Settings, *args: str, **env: str) -> Result:
    return runner.invoke(
        app, [*args, "--data-dir", str(settings.data_dir)], env={**settings_env(settings), **env}
    )


def _pids(settings: Settings) -> dict[str, int]:
    """The recorded processes: name -> pid."""
    path = settings.run_dir / "stack.json"
    if not path.exists():
        return {}
    state = json.loads(path.read_text())
    entries = state["processes"] if isinstance(state, dict) else state
    found = {e["name"]: e["pid"] for e in entries}
    SEEN.update(found.values())
    return found


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _stop_leftovers() -> None:
    for pid in SEEN:
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[tuple[Settings, Result]]:
    """One stack for the module, started by `tally up --reset`, with the output of that command."""
    settings = _stack_settings(tmp_path_factory.mktemp("stack"), redis_url)
    try:
        first = _tally(settings, "up", "--reset")
        assert first.exit_code == 0, first.output
        _pids(settings)
        yield settings, first
    finally:
        _tally(settings, "down")
        _stop_leftovers()


SENT: list[Event] = []


def _send(settings: Settings, seed: int, events: int = 400) -> None:
    # A low rate keeps the generator's warm-up short; the events are posted at once all the same.
    items = generate_items(events=events, rate=100.0, seed=seed, videos=6, bots=False)
    sent = post_traffic(
        items, f"http://127.0.0.1:{settings.ingest_port}", settings.collector_key, realtime=False
    )
    assert not sent.refused
    SENT.extend(sent.events)


def _served_equals_the_oracle(settings: Settings, sent: list[Event] = SENT) -> None:
    """Once the counter reached the end of the log, the stats route answers the oracle's counts of
    `sent` (a single Redis or a Redis Cluster, as the settings say)."""
    client = redisconn.sync_client(settings)
    try:
        wait_until(lambda: counter_caught_up(client, settings), 90, "the counter reaching the end of the log")
    finally:
        client.close()
    expected = {v: (c.views, c.likes, c.unique_viewers) for v, c in oracle.count(sent).items()}
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}") as api:
        answers = {v: api.get(f"/v1/videos/{v}/stats").json() for v in expected}
    assert {v: (a["views"], a["likes"], a["unique_viewers"]) for v, a in answers.items()} == expected


@pytest.mark.integration
@pytest.mark.slow
def test_up_prints_the_down_command_of_its_data_dir_and_what_its_broker_will_cost(
    running: tuple[Settings, Result],
) -> None:
    settings, first = running
    assert f"stop it with: tally down --data-dir {settings.data_dir}\n" in first.output
    said = re.search(r"^note: the local Tansu broker keeps every record .*$", first.output, re.MULTILINE)
    assert said is not None, first.output
    assert "its memory and CPU grow as the stack runs" in said.group()
    assert "TALLY_KAFKA_BOOTSTRAP" in said.group()
    assert f"'tally restart broker --reset --data-dir {settings.data_dir}'" in said.group()
    assert set(_pids(settings)) == EVERY_PROCESS


@pytest.mark.integration
@pytest.mark.slow
def test_up_on_a_running_stack_starts_nothing_and_keeps_the_record(running: tuple[Settings, Result]) -> None:
    settings, _ = running
    before = _pids(settings)

    again = _tally(settings, "up")

    assert again.exit_code == 0, again.output
    assert "nothing to start" in again.output
    assert "keeps every record" not in again.output  # no broker started: nothing new to say
    for name, pid in before.items():
        assert f"{name:<10} pid {pid:<7} already running" in again.output
    assert _pids(settings) == before
    assert all(_alive(pid) for pid in _pids(settings).values())

    reset = _tally(settings, "up", "--reset")
    assert reset.exit_code == 2
    assert "is running" in reset.output and f"tally down --data-dir {settings.data_dir}" in reset.output
    assert _pids(settings) == before


@pytest.mark.integration
@pytest.mark.slow
def test_workers_serve_metrics_on_loopback_only(running: tuple[Settings, Result]) -> None:
    psutil = pytest.importorskip("psutil")
    settings, _ = running
    pids = _pids(settings)
    for name, port in (("counter", settings.faust_web_port), ("archiver", settings.faust_web_port + 1)):
        sockets = psutil.Process(pids[name]).net_connections(kind="inet")
        listening = {(s.laddr.ip, s.laddr.port) for s in sockets if s.status == psutil.CONN_LISTEN}
        assert listening == {("127.0.0.1", port)}, name


@pytest.mark.integration
@pytest.mark.slow
def test_restart_counter_keeps_the_others_and_counts_again(running: tuple[Settings, Result]) -> None:
    settings, _ = running
    _send(settings, seed=1)
    _served_equals_the_oracle(settings)
    before = _pids(settings)

    result = _tally(settings, "restart", "counter")

    assert result.exit_code == 0, result.output
    after = _pids(settings)
    assert after["counter"] != before["counter"]
    assert not _alive(before["counter"])
    assert _alive(after["counter"])
    assert {n: p for n, p in after.items() if n != "counter"} == {
        n: p for n, p in before.items() if n != "counter"
    }
    assert is_listening(settings.faust_web_port)
    _send(settings, seed=2)
    _served_equals_the_oracle(settings)


@pytest.mark.integration
@pytest.mark.slow
def test_a_crashed_worker_leaves_its_stack_in_the_log_and_status_says_how_to_start_it(
    running: tuple[Settings, Result],
) -> None:
    settings, _ = running
    _send(settings, seed=5)
    _served_equals_the_oracle(settings)
    before = _pids(settings)
    log = settings.run_dir / "logs" / "counter.log"

    os.kill(before["counter"], signal.SIGSEGV)  # as a fault in a C extension would
    wait_until(lambda: not _alive(before["counter"]), 30, "the counter dying")

    assert "Fatal Python error: Segmentation fault" in log.read_text(errors="replace")
    status = _tally(settings, "status")
    assert status.exit_code == 1, status.output  # a process of the stack does not run
    assert (
        f"counter    pid {before['counter']:<7} exited (its log: {log}); start it again with"
        f" 'tally start counter --data-dir {settings.data_dir}'" in status.output
    )
    assert f"archiver   pid {before['archiver']:<7} running" in status.output

    started = _tally(settings, "start", "counter")

    assert started.exit_code == 0, started.output
    assert _alive(_pids(settings)["counter"])
    _send(settings, seed=6)
    _served_equals_the_oracle(settings)


@pytest.mark.integration
@pytest.mark.slow
def test_stop_then_start_one_worker(running: tuple[Settings, Result]) -> None:
    settings, _ = running
    before = _pids(settings)

    stopped = _tally(settings, "stop", "serving")

    assert stopped.exit_code == 0, stopped.output
    assert f"serving    pid {before['serving']:<7} stopped" in stopped.output
    assert not _alive(before["serving"])
    assert not is_listening(settings.serving_port)
    assert _pids(settings) == {n: p for n, p in before.items() if n != "serving"}
    assert all(_alive(p) for n, p in before.items() if n != "serving")
    status = _tally(settings, "status")
    assert f"{'serving':<10} {'':<11} not running" in status.output
    assert f"counter    pid {before['counter']:<7} running" in status.output

    started = _tally(settings, "start", "serving")

    assert started.exit_code == 0, started.output
    serving = _pids(settings)["serving"]
    assert serving != before["serving"]
    assert is_listening(settings.serving_port)
    again = _tally(settings, "start", "serving")
    assert again.exit_code == 0, again.output
    assert f"serving    pid {serving:<7} already running" in again.output
    assert _pids(settings)["serving"] == serving


def _applied(settings: Settings) -> float:
    """The counter's events applied so far (its /metrics), once it has reached the end of the log."""
    client = redisconn.sync_client(settings)
    try:
        wait_until(lambda: counter_caught_up(client, settings), 90, "the counter reaching the end of the log")
    finally:
        client.close()
    text = httpx.get(f"http://127.0.0.1:{settings.faust_web_port}/metrics").text
    found = [x for x in text.splitlines() if x.startswith('tally_counter_ops_total{result="applied"}')]
    return float(found[0].split()[-1]) if found else 0.0  # none before its first batch


@pytest.mark.integration
@pytest.mark.slow
def test_loadgen_run_again_with_the_same_seed_sends_new_events(running: tuple[Settings, Result]) -> None:
    settings, _ = running
    url = f"http://127.0.0.1:{settings.ingest_port}"
    command = ["loadgen", "--events", "300", "--rate", "5000", "--seed", "8", "--post", url]
    before = _applied(settings)

    first = runner.invoke(app, command, env=settings_env(settings))
    assert first.exit_code == 0, first.output
    once = _applied(settings) - before
    second = runner.invoke(app, command, env=settings_env(settings))
    assert second.exit_code == 0, second.output

    assert once > 100  # the run's views and reactions, less its own retries (copies of its events)
    assert _applied(settings) - before == 2 * once  # not taken for copies of the first run's


@pytest.mark.integration
@pytest.mark.slow
def test_loadgen_says_when_the_collector_key_is_refused(running: tuple[Settings, Result]) -> None:
    settings, _ = running
    url = f"http://127.0.0.1:{settings.ingest_port}"

    env = {**settings_env(settings), "TALLY_COLLECTOR_KEY": "a-wrong-collector-key-0123456789"}

    result = runner.invoke(app, ["loadgen", "--events", "20", "--rate", "50", "--post", url], env=env)

    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: the ingest API refused the collector key: set TALLY_COLLECTOR_KEY to the key the API uses"
    ]


@pytest.mark.integration
@pytest.mark.slow
def test_restart_broker_needs_reset_then_starts_empty_with_its_topics(
    running: tuple[Settings, Result],
) -> None:
    settings, _ = running
    _send(settings, seed=3, events=50)  # state that a new, empty log would contradict
    before = _pids(settings)

    refused = _tally(settings, "restart", "broker")

    assert refused.exit_code == 2
    assert "memory storage" in refused.output
    assert f"tally restart broker --reset --data-dir {settings.data_dir}" in refused.output
    assert _pids(settings) == before

    result = _tally(settings, "restart", "broker", "--reset")

    assert result.exit_code == 0, result.output
    assert "memory storage" in result.output and "topics were created again" in result.output
    assert "note: the local Tansu broker keeps every record" in result.output
    after = _pids(settings)
    assert set(after) == EVERY_PROCESS
    assert all(after[name] != before[name] and _alive(after[name]) for name in EVERY_PROCESS)
    topics = AdminClient({"bootstrap.servers": settings.kafka_bootstrap}).list_topics(timeout=10).topics
    assert len(topics[settings.events_topic].partitions) == settings.topic_partitions
    assert settings.dead_letter_topic in topics
    SENT.clear()  # the log, baselines and speed state started over
    _send(settings, seed=4)
    _served_equals_the_oracle(settings)


@pytest.mark.integration
@pytest.mark.slow
def test_down_after_a_partial_start_then_up_leaves_nothing_running(tmp_path: Path, redis_url: str) -> None:
    settings = _stack_settings(tmp_path, redis_url)
    env = {**os.environ, **settings_env(settings)}
    record = settings.run_dir / "stack.json"
    first = subprocess.Popen(
        [sys.executable, "-m", "tally.cli", "up", "--reset"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while "broker" not in _pids(settings) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.poll() is None, "the first 'tally up' ended before it could be cut short"
        first.kill()  # a 'tally up' that dies midway: no cleanup of its own
        first.wait()
        partial = _pids(settings)
        assert "broker" in partial

        up = _tally(settings, "up")
        assert up.exit_code == 0, up.output
        whole = _pids(settings)
        assert set(whole) == EVERY_PROCESS
        assert all(whole[name] == pid for name, pid in partial.items())

        down = _tally(settings, "down")

        assert down.exit_code == 0, down.output
        assert not record.exists()
        assert [p for p in {*partial.values(), *whole.values()} if _alive(p)] == []
        broker_port = int(settings.kafka_bootstrap.rsplit(":", 1)[1])
        for port in (settings.ingest_port, settings.serving_port, broker_port):
            assert not is_listening(port)
    finally:
        if first.poll() is None:
            first.kill()
        _stop_leftovers()


def test_unknown_worker_is_refused_with_the_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALLY_REDIS_URL", "redis://redis.example:6379/0")  # not one the stack runs
    result = runner.invoke(app, ["restart", "countr", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    names = "counter, archiver, ingest, serving, broker"
    assert f"unknown worker 'countr': pick one of {names}\n" in result.output

    redis_alone = runner.invoke(app, ["stop", "redis", "--data-dir", str(tmp_path)])
    assert redis_alone.exit_code == 2
    assert "redis was not started by this stack" in redis_alone.output

    reset = runner.invoke(app, ["restart", "counter", "--reset", "--data-dir", str(tmp_path)])
    assert reset.exit_code == 2
    assert "--reset is for the broker only" in reset.output


def test_status_without_a_stack_says_how_to_start_one(tmp_path: Path) -> None:
    result = runner.invoke(app, ["status", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1  # nothing runs
    assert result.output == (
        f"no stack recorded under {tmp_path}; start one with 'tally up --data-dir {tmp_path}'\n"
    )


def test_status_exits_0_when_every_process_runs_and_1_when_one_does_not(tmp_path: Path) -> None:
    """A recorded stack whose processes are stand-ins (a sleeping child each), not the platform's."""
    settings = Settings(data_dir=tmp_path / "data")
    children = {name: subprocess.Popen(["sleep", "300"]) for name in process_names(settings)}
    try:
        log = str(settings.run_dir / "logs" / "serving.log")
        processes = [
            Process(name, child.pid, log, started_at=process_started_at(child.pid))
            for name, child in children.items()
        ]
        Stack(settings, processes).save()

        every = runner.invoke(app, ["status", "--data-dir", str(settings.data_dir)])
        children["serving"].kill()
        children["serving"].wait()
        one_gone = runner.invoke(app, ["status", "--data-dir", str(settings.data_dir)])
    finally:
        for child in children.values():
            child.kill()
            child.wait()

    assert every.exit_code == 0, every.output
    assert every.output.splitlines() == [
        f"{name:<10} pid {child.pid:<7} running" for name, child in children.items()
    ]
    assert one_gone.exit_code == 1, one_gone.output
    assert one_gone.output.splitlines() == [
        f"{name:<10} pid {child.pid:<7} running" for name, child in children.items() if name != "serving"
    ] + [
        f"serving    pid {children['serving'].pid:<7} exited (its log: {log}); start it again with "
        f"'tally start serving --data-dir {settings.data_dir}'"
    ]


def test_loadgen_says_when_the_ingest_api_is_not_reachable(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    env = settings_env(_stack_settings(tmp_path, "redis://127.0.0.1:6379/0"))

    result = runner.invoke(app, ["loadgen", "--events", "20", "--rate", "50", "--post", url], env=env)

    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: cannot reach the ingest API at {url}: start it with 'tally up'"
    ]
