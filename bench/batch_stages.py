"""Where the batch job's time goes: the Spark job of `bench.batch_layer` on a kept log, timed per
action on the driver and per stage from Spark's event log.

`python -m bench.batch_stages --data-dir DIR` reads the log that `python -m bench.batch_layer
--data-dir DIR` wrote (generate it there first), runs `bench.batch_layer.run_spark` once with
Spark's event log on, and prints each action's wall time on the driver (`localCheckpoint`,
`toArrow`, `count`, the two Parquet writes; the session's warm-up query apart), then each stage
that took at least `--min-seconds`: wall time, the task threads' run, CPU and GC time, and its
number of tasks. The job's wall time minus the actions' is driver time (building and analysing
plans); `idle_seconds` is the time between the first stage's start and the last one's end when no
stage ran (the driver planning, answering py4j calls from Python, building broadcasts). With
`--profile`, a Java Flight Recording of the JVM gives each listed stage its task threads' hottest
methods (`bench.jfr`). One line of JSON at the end, also written to
bench/results/batch_stages.json.

The stage numbers say where the work is; the job's wall time moves by ±10 % between runs of the
same code on a 2-core machine, so compare codes in alternating runs, not from one run each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark import SparkContext
from pyspark.sql.classic.dataframe import DataFrame
from pyspark.sql.readwriter import DataFrameWriter

from batch_layer.spark_conf import LOCAL_JAVA_OPTIONS
from bench.batch_layer import run_spark
from bench.jfr import RECORDING_OPTION, JfrUnavailable, dump, hot_methods, reader, task_samples
from bench.report import report
from counting.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "batch_stages.json"
# The Spark actions of the job, by the class that runs them.
ACTIONS: dict[type, tuple[str, ...]] = {
    DataFrame: ("localCheckpoint", "toArrow", "count"),
    DataFrameWriter: ("parquet",),
}
# Later than every row a generated log holds: every row is counted.
FAR_CUTOFF_MS = 4_102_444_800_000


@contextmanager
def timed_actions(into: list[tuple[str, float]]) -> Iterator[None]:
    """Append (action, wall seconds) to `into` for every Spark action run inside."""
    originals: list[tuple[type, str, Callable[..., Any]]] = []

    def timed(name: str, action: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return action(*args, **kwargs)
            finally:
                into.append((name, round(time.monotonic() - started, 2)))

        return run

    for cls, names in ACTIONS.items():
        for name in names:
            originals.append((cls, name, getattr(cls, name)))
            setattr(cls, name, timed(name, getattr(cls, name)))
    try:
        yield
    finally:
        for cls, name, action in originals:
            setattr(cls, name, action)


def stages(event_log: Path) -> list[dict[str, Any]]:
    """Every completed stage of a Spark event log (uncompressed JSON lines), in stage order."""
    found: list[dict[str, Any]] = []
    with event_log.open() as lines:
        for line in lines:
            event = json.loads(line)
            if event["Event"] != "SparkListenerStageCompleted":
                continue
            info = event["Stage Info"]
            metrics = {m["Name"]: m.get("Value") for m in info.get("Accumulables", [])}
            found.append(
                {
                    "stage": info["Stage ID"],
                    "name": info["Stage Name"].split(" at ")[0],
                    "tasks": info["Number of Tasks"],
                    "start_ms": info["Submission Time"],
                    "wall_s": (info["Completion Time"] - info["Submission Time"]) / 1000,
                    "run_s": float(metrics.get("internal.metrics.executorRunTime", 0)) / 1000,
                    "cpu_s": float(metrics.get("internal.metrics.executorCpuTime", 0)) / 1e9,
                    "gc_s": float(metrics.get("internal.metrics.jvmGCTime", 0)) / 1000,
                }
            )
    return sorted(found, key=lambda s: s["stage"])


def idle_seconds(found: Sequence[dict[str, Any]]) -> float:
    """The time from the first stage's start to the last one's end during which no stage ran."""
    idle, end = 0.0, None
    for s in sorted(found, key=lambda s: s["start_ms"]):
        if end is not None and s["start_ms"] > end:
            idle += s["start_ms"] - end
        end = max(end or 0, s["start_ms"] + s["wall_s"] * 1000)
    return round(idle / 1000, 2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_stages", description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True, help="where bench.batch_layer kept its log")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, default=1.0, help="list stages at least this long")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--profile", action="store_true", help="record the JVM (JFR) and list each stage's hottest methods"
    )
    args = parser.parse_args(argv)
    settings = Settings(data_dir=args.data_dir, spark_master=f"local[{args.cores}]")
    if not any(settings.raw_dir.rglob("*.parquet")):
        print(
            f"no log under {settings.raw_dir}: write one first with "
            f"`python -m bench.batch_layer --data-dir {args.data_dir}`",
            file=sys.stderr,
        )
        return 2
    if args.profile:
        try:
            reader()
        except JfrUnavailable as exc:
            print(exc, file=sys.stderr)
            return 2
    actions: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="tally-eventlog-") as logs:
        conf = {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.compress": "false",
            "spark.eventLog.dir": Path(logs).as_uri(),
        }
        recording = Path(logs) / "job.jfr"
        if args.profile:
            conf["spark.driver.extraJavaOptions"] = f"{LOCAL_JAVA_OPTIONS} {RECORDING_OPTION}"
        with timed_actions(actions):
            _, times = run_spark(settings, FAR_CUTOFF_MS, conf)
        (event_log,) = Path(logs).rglob("events_*")  # Spark 4's rolling log: one file for a short job
        found = stages(event_log)
        if args.profile:
            gateway = SparkContext._gateway  # the job's session is stopped, its JVM is not
            assert gateway is not None, "run_spark started a JVM"
            dump(gateway.jvm, recording)
            hot = hot_methods(task_samples(recording), found)
            for s in found:
                s["hot"] = hot.get(s["stage"], {"samples": 0, "methods": []})
    # The first action is run_spark's warm-up (`spark.range(1).count()`), timed with the session.
    warmup, *actions = actions
    first = min((s["start_ms"] for s in found), default=0)
    for action, seconds in actions:
        print(f"action {action:16s} {seconds:7.2f} s", file=sys.stderr)
    for s in found:
        if s["wall_s"] >= args.min_seconds:
            print(
                f"stage {s['stage']:3d} at {(s['start_ms'] - first) / 1000:6.1f} s: wall {s['wall_s']:6.2f} "
                f"run {s['run_s']:6.2f} cpu {s['cpu_s']:6.2f} gc {s['gc_s']:5.2f} "
                f"tasks {s['tasks']:3d}  {s['name']}",
                file=sys.stderr,
            )
            for method, n in s["hot"]["methods"] if args.profile else []:
                print(f"    {n / s['hot']['samples']:6.1%} {method}", file=sys.stderr)
    idle = idle_seconds(found)
    print(f"idle between stages {idle:6.2f} s", file=sys.stderr)
    result = {
        "benchmark": "batch_stages",
        "job_seconds": round(times["job"], 2),
        "session_seconds": round(times["session"], 2),
        "warmup_seconds": warmup[1],
        "actions_seconds": round(sum(seconds for _, seconds in actions), 2),
        "actions": actions,
        "task_run_seconds": round(sum(s["run_s"] for s in found), 1),
        "task_cpu_seconds": round(sum(s["cpu_s"] for s in found), 1),
        "task_gc_seconds": round(sum(s["gc_s"] for s in found), 1),
        "idle_seconds": idle,
        "profiled": args.profile,
        "stages": found,
    }
    report(result, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
