"""The ingest benchmark's load: the wrk scripts of the like and one-event phases, the bodies they
send, the closed-loop senders of 500-event batches, and the CPU meter of each phase.

The events are minimal counted-length views numbered by their event id (`{prefix}{n}`), on purpose:
the check finds every event of an acknowledged batch from its first number, and the figures compare
with the earlier runs (docs/benchmarks.md, bench/HISTORY.md) only with the same small bodies."""

from __future__ import annotations

import itertools
import os
import resource
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.wrk import millis
from counting.settings import Settings

BATCH_SIZE = 500
VIDEOS = 500

# A like by one of many users (tokens read from a file) of one of many videos, from a start of each
# phase's own (SEED), so that phases like other pairs; the event id of every 202 answer is appended
# to a file.
LIKE_SCRIPT = """
local tokens = {}
for line in io.lines("TOKENS") do tokens[#tokens + 1] = line end
math.randomseed(SEED)
local n = math.random(#tokens)
local acks = nil
request = function()
  n = n + 1
  local headers = {["Authorization"] = "Bearer " .. tokens[n % #tokens + 1], ["Content-Length"] = "0"}
  return wrk.format("POST", "/v1/videos/lv" .. math.random(VIDEOS) .. "/like", headers)
end
response = function(status, headers, body)
  if status == 202 then
    acks = acks or io.open("ACKS", "a")
    acks:write(body:match('"event_id":"([^"]+)"') or "?", "\\n")
  end
end
"""
# One event a request to the collector route, each body (a line of a file) sent once while they last.
SINGLE_SCRIPT = """
local bodies = {}
for line in io.lines("BODIES") do bodies[#bodies + 1] = line end
local n = 0
request = function()
  n = n + 1
  local headers = {["X-Collector-Key"] = "KEY", ["Content-Type"] = "application/json"}
  return wrk.format("POST", "/v1/events", headers, bodies[(n - 1) % #bodies + 1])
end
"""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def with_children(pid: int) -> list[int]:
    """A process and its children (the ingest workers of a supervising process)."""
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [pid, *(int(p) for p in found)]


def _machine_ticks() -> tuple[int, int]:
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


class CpuMeter:
    """CPU seconds of named process groups, of this process's children (wrk), of this process (the
    batch senders) and of the machine between `start()` and `figures()`."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups

    def start(self) -> None:
        self._before = {name: sum(_cpu_ticks(p) for p in pids) for name, pids in self.groups.items()}
        self._machine = _machine_ticks()
        self._children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._self = resource.getrusage(resource.RUSAGE_SELF)
        self._started = time.monotonic()

    def figures(self, requests: float) -> dict[str, Any]:
        elapsed = time.monotonic() - self._started
        tick = os.sysconf("SC_CLK_TCK")
        used = {
            name: (sum(_cpu_ticks(p) for p in pids) - self._before[name]) / tick
            for name, pids in self.groups.items()
        }
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        used["wrk"] = (children.ru_utime + children.ru_stime) - (
            self._children.ru_utime + self._children.ru_stime
        )
        own = resource.getrusage(resource.RUSAGE_SELF)  # the batch senders' threads
        used["bench_client"] = (own.ru_utime + own.ru_stime) - (self._self.ru_utime + self._self.ru_stime)
        cores = os.cpu_count() or 1
        shares = {name: round(seconds / elapsed / cores, 3) for name, seconds in used.items()}
        busy, total = (a - b for a, b in zip(_machine_ticks(), self._machine, strict=True))
        shares["machine_busy"] = round(busy / max(1, total), 3)
        return {
            "ingest_cpu_us_per_request": round(used["ingest"] / max(1.0, requests) * 1e6),
            "broker_cpu_us_per_request": round(used.get("broker", 0.0) / max(1.0, requests) * 1e6),
            "cpu_share_of_machine": shares,
        }


def run_wrk(script: Path, base: str, connections: int, seconds: float, meter: CpuMeter) -> dict[str, Any]:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "30s"]
    command += ["--latency", "-s", str(script), base]
    meter.start()
    started = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    elapsed = time.monotonic() - started
    figures: dict[str, Any] = {"connections": connections, "requests": 0, "non_2xx": 0, "socket_errors": 0}
    for line in out.splitlines():
        words = line.split()
        if line.startswith("Requests/sec:"):
            figures["rps"] = float(words[1])
        elif len(words) == 2 and words[0] in ("50%", "90%", "99%"):
            figures[f"p{words[0][:-1]}_ms"] = round(millis(words[1]), 2)
        elif "requests in" in line:
            figures["requests"] = int(words[0])
        elif "Non-2xx" in line:
            figures["non_2xx"] = int(words[-1])
        elif line.strip().startswith("Socket errors:"):
            figures["socket_errors"] = sum(int(w.rstrip(",")) for w in words[2:] if w.rstrip(",").isdigit())
    figures["acknowledged"] = figures["requests"] - figures["non_2xx"]
    figures.update(meter.figures(figures.get("rps", 0.0) * elapsed))
    return figures


def single_bodies(path: Path, prefix: str, count: int) -> None:
    now = now_ms()
    with path.open("w") as out:
        for i in range(count):
            event = f'"event_id":"{prefix}{i}","type":"view","video_id":"sv{i % VIDEOS}"'
            out.write(f'{{"events":[{{{event},"session_id":"{prefix}{i}","ts":{now},"watch_secs":45}}]}}\n')


def batch_body(prefix: str, start: int) -> bytes:
    now = now_ms()
    events = ",".join(
        f'{{"event_id":"{prefix}{n}","type":"view","video_id":"bv{n % VIDEOS}","session_id":"{prefix}{n}",'
        f'"ts":{now},"watch_secs":45}}'
        for n in range(start, start + BATCH_SIZE)
    )
    return f'{{"events":[{events}]}}'.encode()


def batches(settings: Settings, prefix: str, seconds: float, senders: int, meter: CpuMeter) -> dict[str, Any]:
    """500-event batches from `senders` threads, each sending its next batch once the last is
    answered; the acknowledged batches are recorded by their first event number."""
    numbers = itertools.count()
    acked: list[int] = []
    latencies: list[float] = []
    refused = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def send() -> None:
        headers = {"x-collector-key": settings.collector_key, "content-type": "application/json"}
        url = f"http://127.0.0.1:{settings.ingest_port}/v1/events"
        with httpx.Client(headers=headers, timeout=30.0) as client:
            while time.monotonic() < deadline:
                start = next(numbers) * BATCH_SIZE
                body = batch_body(prefix, start)
                sent = time.perf_counter()
                try:
                    answer = client.post(url, content=body)
                except httpx.TransportError:
                    answer = None
                took = (time.perf_counter() - sent) * 1000
                with lock:
                    if answer is not None and answer.status_code == 202:
                        acked.append(start)
                        latencies.append(took)
                    else:
                        refused[0] += 1

    threads = [threading.Thread(target=send, daemon=True) for _ in range(senders)]
    meter.start()
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    ordered = sorted(latencies) or [0.0]
    cpu = meter.figures(len(acked))
    cpu["ingest_cpu_us_per_event"] = round(cpu["ingest_cpu_us_per_request"] / BATCH_SIZE, 1)
    cpu["broker_cpu_us_per_event"] = round(cpu["broker_cpu_us_per_request"] / BATCH_SIZE, 1)
    return {
        "senders": senders,
        "batch_size": BATCH_SIZE,
        "events_per_s": round(len(acked) * BATCH_SIZE / elapsed),
        "batches_acknowledged": len(acked),
        "batches_refused": refused[0],
        "p50_ms": round(ordered[len(ordered) // 2], 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
        "acked_starts": acked,
        **cpu,
    }
