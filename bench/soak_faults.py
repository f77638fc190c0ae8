"""The faults the soak benchmark injects into its running stack, each with what it checks and how
long the platform took to recover (the figures of one fault are a JSON-ready dict)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, TopicPartition
from redis import Redis

from bench.soak_load import LoadFigures
from counting import keys
from counting.settings import Settings
from speed_layer.app import app_id
from tally.services import Service, start_redis
from tally.speedview import wait_until, watermark
from tally.stack import Stack, settings_env
from tally.traffic_run import closed_cutoff
from warehouse.baseline import read_pointer

BROKER_PAUSE_S = 10.0
FAULTS = ("counter", "archiver", "counter+archiver", "broker", "spark", "redis-flush", "redis-restart")
# The batch first: it takes minutes on a loaded machine, and the Redis faults then show the
# stats route answering from its baseline.
DEFAULT_SCHEDULE = (
    "spark",
    "counter",
    "archiver",
    "redis-flush",
    "broker",
    "counter+archiver",
    "redis-restart",
    "broker",
)


@dataclass
class Rig:
    """The soak's own stack: the broker and Redis it started, and the platform's processes."""

    settings: Settings
    stack: Stack
    broker: Service
    redis: Service
    log: Callable[[str], None]

    def pids(self) -> dict[str, int]:
        found = {p.name: p.pid for p in self.stack.processes if p.alive()}
        return {**found, "broker": self.broker.process.pid, "redis": self.redis.process.pid}

    def client(self) -> Redis:
        return Redis.from_url(self.settings.redis_url, socket_timeout=5.0)

    def stored_offsets(self) -> dict[int, int]:
        """The last offset of each partition whose counts are in Redis (the counter's own record)."""
        settings = self.settings
        names = [keys.counter_offset(settings.events_topic, p) for p in range(settings.topic_partitions)]
        with self.client() as client:
            values: list[bytes | None] = client.mget(names)
        return {p: int(v) for p, v in enumerate(values) if v is not None}

    def stored_records(self) -> int:
        """Records the counter has stored in Redis (sum over partitions of the stored offset + 1)."""
        return sum(offset + 1 for offset in self.stored_offsets().values())

    def watermark(self) -> int:
        with self.client() as client:
            return watermark(client)


class Faults:
    """Runs one fault at a time; each returns its figures, `ok` False when a check failed."""

    def __init__(self, rig: Rig, load: LoadFigures) -> None:
        self._rig = rig
        self._load = load

    def run(self, name: str, at_s: float) -> dict[str, Any]:
        actions: dict[str, Callable[[], dict[str, Any]]] = {
            "counter": lambda: self._kill_workers(["counter"]),
            "archiver": lambda: self._kill_workers(["archiver"]),
            "counter+archiver": lambda: self._kill_workers(["counter", "archiver"]),
            "broker": self._pause_broker,
            "spark": self._kill_batch,
            "redis-flush": lambda: self._lose_redis(restart=False),
            "redis-restart": lambda: self._lose_redis(restart=True),
        }
        self._rig.log(f"fault {name} at t={at_s:.0f} s")
        began = time.monotonic()
        try:
            figures = {"fault": name, "at_s": round(at_s), **actions[name]()}
        except Exception as exc:
            figures = {"fault": name, "at_s": round(at_s), "ok": False, "error": repr(exc)}
        figures["seconds"] = round(time.monotonic() - began, 1)
        self._rig.log(f"fault {name} done: {figures}")
        return figures

    def _probe_video(self) -> str:
        """A video the load has written to (the most popular one comes first)."""
        with self._load.lock:
            return self._load.videos[0] if self._load.videos else "v0001"

    def _kill_workers(self, names: list[str]) -> dict[str, Any]:
        """SIGKILL the workers at once and start them again; recovered once each made progress."""
        rig = self._rig
        stored, mark = rig.stored_records(), rig.watermark()
        killed = time.monotonic()
        for name in names:
            process = rig.stack.get(name)
            process.signal(signal.SIGKILL)
            if process.popen is not None:
                process.popen.wait(30)
        for name in names:
            rig.stack.start_worker(name)
        if "counter" in names:
            wait_until(lambda: rig.stored_records() > stored, 180, "the restarted counter counting", 0.2)
        if "archiver" in names:
            wait_until(lambda: rig.watermark() > mark, 180, "the restarted archiver archiving", 0.2)
        return {"ok": True, "recovered_s": round(time.monotonic() - killed, 1)}

    def _pause_broker(self) -> dict[str, Any]:
        """SIGSTOP the broker for BROKER_PAUSE_S, then SIGCONT. (Stopping it for real is no test
        here: the local Tansu broker keeps its log in memory, so a restarted one is empty.)"""
        rig, load = self._rig, self._load
        with load.lock:
            refused_before, timings_before = load.refused_requests, len(load.refused_ms)
        stored = rig.stored_records()
        pid = rig.broker.process.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(BROKER_PAUSE_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        wait_until(lambda: load.last_ack > resumed, 120, "an acknowledgement after the broker resumed", 0.1)
        acked_after = time.monotonic() - resumed
        wait_until(lambda: rig.stored_records() > stored, 180, "the counter counting after the pause", 0.2)
        counting_after = time.monotonic() - resumed
        with load.lock:
            refused = load.refused_requests - refused_before
            timings = load.refused_ms[timings_before:]
        limit_ms = rig.settings.delivery_timeout_ms + 5_000
        return {
            "ok": refused > 0 and max(timings, default=0.0) <= limit_ms,
            "paused_s": BROKER_PAUSE_S,
            "refused_requests": refused,
            "slowest_refusal_ms": round(max(timings, default=0.0)),
            "refusal_limit_ms": limit_ms,
            "first_ack_after_resume_s": round(acked_after, 1),
            "counting_after_resume_s": round(counting_after, 1),
        }

    def _kill_batch(self) -> dict[str, Any]:
        """Start a Spark batch, SIGKILL it once it writes its outputs, check that the old baseline
        still serves, then run it again to the end and check that its baseline serves."""
        settings = self._rig.settings
        before = read_pointer(settings.baselines_dir)
        floor = int(before["cutoff"]) if before else 0  # type: ignore[call-overload]
        wait_until(lambda: closed_cutoff(settings) > floor, 120, "a closed cutoff after the baseline's", 1.0)
        cutoff = closed_cutoff(settings)
        run_id = f"soak-{cutoff}"
        killed_after = self._batch(cutoff, run_id, kill=True)
        after_kill = read_pointer(settings.baselines_dir)
        kept = after_kill == before
        began = time.monotonic()
        self._batch(cutoff, run_id, kill=False)
        took = time.monotonic() - began
        now = read_pointer(settings.baselines_dir) or {}
        published = (now.get("run_id"), now.get("cutoff")) == (run_id, cutoff)
        time.sleep(settings.serving_cache_ms / 1000 + 0.5)
        with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}", timeout=10) as api:
            served = api.get(f"/v1/videos/{self._probe_video()}/stats").json().get("batch_cutoff")
        return {
            "ok": kept and published and served == cutoff,
            "cutoff": cutoff,
            "killed_after_s": round(killed_after, 1),
            "old_baseline_kept": kept,
            "rerun_s": round(took, 1),
            "rerun_published": published,
            "served_cutoff": served,
        }

    def _batch(self, cutoff: int, run_id: str, kill: bool) -> float:
        """Run `python -m batch_layer`; with `kill`, SIGKILL it (and its JVM) once its output folder
        appears. The seconds it ran."""
        settings = self._rig.settings
        log = settings.run_dir / "logs" / f"batch-{run_id}{'-killed' if kill else ''}.log"
        output = settings.batch_dir / run_id
        began = time.monotonic()
        with open(log, "ab") as handle:
            child = subprocess.Popen(
                [sys.executable, "-m", "batch_layer", "--cutoff", str(cutoff), "--run-id", run_id],
                env=settings_env(settings),
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            if kill:
                wait_until(lambda: output.exists() or child.poll() is not None, 600, "the batch", 0.05)
                if child.poll() is not None:
                    raise RuntimeError(f"the batch ended (status {child.returncode}) before it was killed")
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(30)
            elif child.wait(900) != 0:
                raise RuntimeError(f"the batch re-run failed (status {child.returncode}); see {log}")
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(30)
        return time.monotonic() - began

    def _lose_redis(self, restart: bool) -> dict[str, Any]:
        """Redis loses the speed state (FLUSHALL, or a restart without persistence). As
        docs/operations.md says: stop the counter, `tally speed rebuild`, start the counter."""
        rig = self._rig
        settings = rig.settings
        counter = rig.stack.get("counter")
        counter.signal(signal.SIGTERM)
        if counter.popen is not None:
            counter.popen.wait(60)
        committed = self._counter_commits()
        lost = time.monotonic()
        if restart:
            port = rig.redis.port
            rig.redis.process.kill()
            rig.redis.process.wait(30)
            rig.redis = start_redis(port, Path(rig.redis.log).parent)
        else:
            with rig.client() as client:
                client.flushall()
        degraded = self._degraded_answer()
        began = time.monotonic()
        rebuilt = subprocess.run(
            [sys.executable, "-m", "tally.cli", "speed", "rebuild"],
            env=settings_env(settings),
            capture_output=True,
            text=True,
            timeout=900,
        )
        rebuild_s = time.monotonic() - began
        replayed = rig.stored_offsets()
        # Records the stopped counter had committed past the archive: the restarted counter starts
        # after them, so they are counted only if the rebuild replayed them.
        unreplayed = sum(max(0, end - replayed.get(p, -1) - 1) for p, end in committed.items())
        rig.stack.start_worker("counter")
        stored = rig.stored_records()
        wait_until(lambda: rig.stored_records() > stored, 180, "the counter counting after the rebuild", 0.2)
        summary = " ".join(rebuilt.stdout.split()).rpartition("replayed")
        return {
            "ok": rebuilt.returncode == 0 and bool(degraded["reasons"]),
            "served_degraded": degraded,
            "rebuild_s": round(rebuild_s, 1),
            "committed_not_replayed_records": unreplayed,
            "rebuild": summary[1] + summary[2] if rebuilt.returncode == 0 else rebuilt.stderr[-2000:],
            "recovered_s": round(time.monotonic() - lost, 1),
        }

    def _counter_commits(self) -> dict[int, int]:
        """The counter group's committed offset (next record to read) of each partition."""
        settings = self._rig.settings
        consumer = Consumer(
            {"bootstrap.servers": settings.kafka_bootstrap, "group.id": app_id("counter", settings)}
        )
        try:
            wanted = [TopicPartition(settings.events_topic, p) for p in range(settings.topic_partitions)]
            return {
                tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=10) if tp.offset >= 0
            }
        finally:
            consumer.close()

    def _degraded_answer(self) -> dict[str, Any]:
        """The stats route's answer once Redis lost the speed state: its degraded reasons ([] if
        none within a few seconds) and the baseline it served."""
        settings = self._rig.settings
        deadline = time.monotonic() + settings.serving_cache_ms / 1000 + 10
        with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}", timeout=10) as api:
            while time.monotonic() < deadline:
                try:
                    answer = api.get(f"/v1/videos/{self._probe_video()}/stats")
                except httpx.TransportError:
                    answer = None
                if answer is not None and answer.status_code == 200 and answer.json()["degraded"]:
                    body = answer.json()
                    return {"reasons": body["degraded"], "batch_cutoff": body["batch_cutoff"]}
                time.sleep(0.2)
        return {"reasons": [], "batch_cutoff": None}
