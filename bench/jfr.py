"""Where the task threads of a JVM spent their time: the methods on top of the stack in a Java
Flight Recording's execution samples, by stage of a Spark job.

A recording is made by starting the JVM with `RECORDING_OPTION` and written by `dump` (PySpark
keeps its JVM alive until Python exits, so nothing is written at the end of a job); `jfr` (the
JDK's reader) turns it into JSON. Each execution sample of a thread running Spark tasks ("Executor task launch
worker") counts for the method on top of its stack, so a stage's hottest methods are where its
tasks' CPU went (a sample is taken only while the thread runs Java code).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

TASK_THREAD = "Executor task launch worker"


class JfrUnavailable(RuntimeError):
    """The JDK's `jfr` reader is not on the PATH."""


@dataclass(frozen=True)
class Sample:
    """One execution sample of a task thread: when (epoch ms) and the method on top of its stack."""

    at_ms: float
    method: str


# The JVM option that records, among others, execution samples every 10 ms (JFR's `profile` settings).
RECORDING_OPTION = "-XX:StartFlightRecording=settings=profile"


def dump(jvm: Any, path: Path) -> None:
    """Write the recording that `RECORDING_OPTION` started in the JVM `jvm` (a py4j view) to `path`."""
    recordings = jvm.jdk.jfr.FlightRecorder.getFlightRecorder().getRecordings()
    if recordings.isEmpty():
        raise JfrUnavailable(f"the JVM records nothing: start it with {RECORDING_OPTION}")
    recordings.get(0).dump(jvm.java.io.File(str(path)).toPath())


def reader() -> str:
    """The path of the JDK's `jfr` reader; JfrUnavailable without one."""
    found = shutil.which("jfr")
    if found is None:
        raise JfrUnavailable(
            "`jfr` is not on the PATH: install a JDK 17 (it ships the reader) or run without --profile"
        )
    return found


def task_samples(recording: Path) -> list[Sample]:
    """The execution samples of the task threads in `recording`, oldest first."""
    command = [
        reader(),
        "print",
        "--json",
        "--stack-depth",
        "1",
        "--events",
        "jdk.ExecutionSample",
        str(recording),
    ]
    printed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    events = json.loads(printed)["recording"]["events"]
    return sorted((s for s in map(_sample, events) if s is not None), key=lambda s: s.at_ms)


def _sample(event: Mapping[str, Any]) -> Sample | None:
    values = event["values"]
    thread = (values.get("sampledThread") or {}).get("javaName") or ""
    frames = (values.get("stackTrace") or {}).get("frames") or []
    if not thread.startswith(TASK_THREAD) or not frames:
        return None
    method = frames[0]["method"]
    owner = method["type"]["name"].rsplit("/", 1)[-1]
    at = datetime.fromisoformat(values["startTime"].replace("Z", "+00:00"))
    return Sample(at_ms=at.timestamp() * 1000, method=f"{owner}.{method['name']}")


def hot_methods(
    samples: Iterable[Sample], stages: Sequence[Mapping[str, Any]], top: int = 5
) -> dict[int, dict[str, Any]]:
    """Per stage (by id), its task samples and its `top` methods with their number of samples. A
    sample counts for the stage started last of those running at its time."""
    spans = sorted((s["start_ms"], s["start_ms"] + s["wall_s"] * 1000, s["stage"]) for s in stages)
    counts: dict[int, Counter[str]] = {}
    for sample in samples:
        running = [stage for start, end, stage in spans if start <= sample.at_ms <= end]
        if running:
            counts.setdefault(running[-1], Counter())[sample.method] += 1
    hot: dict[int, dict[str, Any]] = {}
    for stage, methods in counts.items():
        ranked = [[name, n] for name, n in methods.most_common(top)]
        hot[stage] = {"samples": sum(methods.values()), "methods": ranked}
    return hot
