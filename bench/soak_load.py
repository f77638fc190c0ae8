"""The soak benchmark's clients: a paced loader through the ingest API that keeps every acknowledged
event, a reader of the stats route, and an RSS sampler of the stack's processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import psutil

from counting.traffic import TrafficConfig, generate

REFUSED_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)
SENDERS = 8


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_figures(samples: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(samples, 0.5), 1),
        "p99": round(percentile(samples, 0.99), 1),
        "max": round(max(samples, default=0.0), 1),
    }


@dataclass
class LoadFigures:
    """What the loader saw; appended to by the sender threads under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: list[tuple[dict[str, Any], int]] = field(default_factory=list)  # (event, ingest_ts)
    invalid: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    ack_ms: list[float] = field(default_factory=list)
    refused_requests: int = 0  # answers that acknowledged nothing (5xx, timeouts, network errors)
    refused_ms: list[float] = field(default_factory=list)  # how long a refusal took to come
    resent_requests: int = 0  # requests acknowledged only after one or more refusals
    resent_events: int = 0
    last_ack: float = 0.0  # time.monotonic() of the latest acknowledgement
    videos: list[str] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def refusals(self) -> int:
        with self.lock:
            return self.refused_requests


class Loader:
    """Posts generated traffic (no bots) at `rate` events a second in requests of up to `batch`
    events from SENDERS threads. A request that acknowledges nothing is sent again (same event ids)
    after a back-off by the thread that sent it, so refusals never lose events."""

    def __init__(
        self, ingest_url: str, key: str, rate: float, seconds: float, batch: int, seed: int = 7
    ) -> None:
        self.figures = LoadFigures()
        self._url = ingest_url
        self._headers = {"x-collector-key": key}
        self._config = TrafficConfig(
            seed=seed,
            videos=500,
            viewers=max(2_000, int(rate * seconds) // 30),
            events=None,
            duration_secs=seconds,
            rate=rate,
            start_ms=time.time_ns() // 1_000_000,
            bot_fraction=0.0,
        )
        self._batch = batch
        self._local = threading.local()
        self._encoder = msgspec.json.Encoder()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-loader", daemon=True)
        self.error: BaseException | None = None
        self.started = self.finished = 0.0

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def stop(self) -> None:
        self._stop.set()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(base_url=self._url, headers=self._headers, timeout=30.0)
            self._local.client = client
        return client

    def seconds(self) -> float:
        """How long the load ran (so far)."""
        return (self.finished or time.monotonic()) - self.started

    def _run(self) -> None:
        self.started = started = time.monotonic()
        pending: list[dict[str, Any]] = []
        with ThreadPoolExecutor(SENDERS, thread_name_prefix="soak-sender") as senders:
            try:
                for item in generate(self._config):
                    if self._stop.is_set():
                        break
                    delay = started + item.send_at_ms / 1000 - time.monotonic()
                    if delay > 0.02 and pending:
                        senders.submit(self._send, pending)
                        pending = []
                    if delay > 0:
                        time.sleep(delay)
                    pending.append(item.event)
                    if len(pending) >= self._batch:
                        senders.submit(self._send, pending)
                        pending = []
                if pending:
                    senders.submit(self._send, pending)
            except BaseException as exc:  # reported by the soak, which then stops
                self.error = exc
        self.finished = time.monotonic()

    def _send(self, events: list[dict[str, Any]]) -> None:
        body = self._encoder.encode({"events": events})
        refusals = 0
        while True:
            began = time.perf_counter()
            try:
                answer: httpx.Response | None = self._client().post(
                    "/v1/events", content=body, headers={"content-type": "application/json"}
                )
            except httpx.TransportError:
                answer = None
            took = (time.perf_counter() - began) * 1000
            if answer is not None and answer.status_code in (401, 413):
                self.error = RuntimeError(f"the ingest API refused a request: {answer.text}")
                self._stop.set()
                return
            if answer is not None and answer.status_code < 500:
                break
            if self._stop.is_set():  # the soak is aborting: these events stay unacknowledged
                return
            with self.figures.lock:
                self.figures.refused_requests += 1
                self.figures.refused_ms.append(took)
            time.sleep(REFUSED_BACKOFF_S[min(refusals, len(REFUSED_BACKOFF_S) - 1)])
            refusals += 1
        content = answer.json()
        refused = {error["index"] for error in content["errors"]}
        ingest_ts = content["ingest_ts"]
        figures = self.figures
        with figures.lock:
            figures.requests += 1
            figures.ack_ms.append(took)
            figures.last_ack = time.monotonic()
            if refusals:
                figures.resent_requests += 1
                figures.resent_events += len(events)
            figures.invalid.extend(content["errors"])
            written: set[str] = set()  # a copy of an event inside one request is written once
            for index, event in enumerate(events):
                if index in refused or event["event_id"] in written:
                    continue
                written.add(event["event_id"])
                figures.acked.append((event, ingest_ts))
                if event["video_id"] not in figures._seen:
                    figures._seen.add(event["video_id"])
                    figures.videos.append(event["video_id"])


@dataclass
class ReadFigures:
    ok_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    degraded: int = 0
    degraded_reasons: set[str] = field(default_factory=set)


class _Background:
    """A daemon thread running `_run` until `stop()` (which waits up to `join_s` for it)."""

    def __init__(self, name: str, join_s: float) -> None:
        self._stop = threading.Event()
        self._join_s = join_s
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def _start_thread(self) -> None:
        self._thread.start()

    def _stop_thread(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self._join_s)


class Reader(_Background):
    """GETs the stats route of videos already written to, `rate` times a second, until stopped."""

    def __init__(self, serving_url: str, rate: float, videos: Callable[[], list[str]]) -> None:
        super().__init__("soak-reader", 30)
        self.figures = ReadFigures()
        self._url = serving_url
        self._interval = 1.0 / rate
        self._videos = videos

    start = _Background._start_thread
    stop = _Background._stop_thread

    def _run(self) -> None:
        figures = self.figures
        k = 0
        with httpx.Client(base_url=self._url, timeout=10.0) as client:
            while not self._stop.wait(self._interval):
                videos = self._videos()
                if not videos:
                    continue
                k += 1
                video = videos[(k * 7919) % len(videos)]
                began = time.perf_counter()
                try:
                    answer = client.get(f"/v1/videos/{video}/stats")
                except httpx.TransportError:
                    figures.errors += 1
                    continue
                took = (time.perf_counter() - began) * 1000
                figures.statuses[answer.status_code] = figures.statuses.get(answer.status_code, 0) + 1
                if answer.status_code == 200:
                    figures.ok_ms.append(took)
                    reasons = answer.json().get("degraded") or []
                    if reasons:
                        figures.degraded += 1
                        figures.degraded_reasons.update(reasons)


class MemorySampler(_Background):
    """The RSS (MB) of named processes at start, at the end and the largest seen, sampled every
    `every` seconds; `pids()` names the processes of the moment (workers restart under new pids)."""

    def __init__(self, pids: Callable[[], dict[str, int]], every: float = 5.0) -> None:
        super().__init__("soak-memory", 30)
        self._pids = pids
        self._every = every
        self.start: dict[str, float] = {}
        self.end: dict[str, float] = {}
        self.peak: dict[str, float] = {}
        self.processes: dict[str, set[int]] = {}

    def sample(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for name, pid in self._pids().items():
            try:
                rss = psutil.Process(pid).memory_info().rss / 2**20
            except psutil.Error:
                continue
            found[name] = round(rss, 1)
            self.peak[name] = max(self.peak.get(name, 0.0), found[name])
            self.processes.setdefault(name, set()).add(pid)
        return found

    def begin(self) -> None:
        self.start = self.sample()
        self._start_thread()

    def finish(self) -> None:
        self._stop_thread()
        self.end = self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.sample()


class Progress(_Background):
    """Prints one line of figures every `every` seconds to stderr-like `emit`."""

    def __init__(self, line: Callable[[], str], emit: Callable[[str], None], every: float = 10.0) -> None:
        super().__init__("soak-progress", 10)
        self._line = line
        self._emit = emit
        self._every = every

    start = _Background._start_thread
    stop = _Background._stop_thread

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._emit(self._line())
            except Exception as exc:  # a store down mid-fault: say so, keep going
                self._emit(f"progress unavailable: {exc!r}")
