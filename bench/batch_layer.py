"""Batch benchmark: the Spark job against the same rules as one DuckDB query, on the same Parquet log.

`python -m bench.batch_layer [--events N]` writes N generated log rows (default 10 million) in the
archiver's layout, counts them with DuckDB and with the Spark transform of the batch job, checks
that both give the same per-video counts, prints the figures as one line of JSON and writes them
to bench/results/batch_layer.json.

With `--repeat N` both engines run N times, alternating (DuckDB, Spark, DuckDB, ...), and the
figures are the medians, with every run's time listed: single runs on a 2-core machine move by
about 15 %, and the first run after writing the log is often the slowest.

Each run of either engine is a new process, and Spark's a new JVM, as each nightly run is: a JVM
kept from an earlier run keeps the code its JIT compiled, which made later runs in one JVM about a
third faster than the first and the median of `--repeat 3` a warm figure (bench/RESULTS-batch.md,
"Tenth round").
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from bench.batch_rules import count_videos, log_relation
from bench.batch_traffic import BenchTraffic, write_bench_log
from bench.report import report
from counting.bots import SHIPPED
from counting.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "batch_layer.json"
TARGET_RATIO = 3.0
# What each timed figure holds. Engine start is left out of both (the DuckDB connection is opened
# before its clock starts, the Spark session and its JVM are up before Spark's), and Spark's
# figure also holds the daily and per-bucket outputs it writes, which the DuckDB query does not make.
DUCKDB_TIMED = (
    "rules query over the Parquet log to a per-video Arrow table; each run in a new process; connect excluded"
)
SPARK_TIMED = (
    "read_log + classify + per-video baseline collected + daily, per-bucket and explanation outputs written; "
    "each run in a new process and JVM; session (JVM) start excluded, reported as spark_session_seconds"
)
DEFAULT_EVENTS = 10_000_000
_Result = TypeVar("_Result")


def _progress(total: int) -> Any:
    started = time.monotonic()

    def show(done: int) -> None:
        rate = done / max(time.monotonic() - started, 1e-9)
        print(
            f"\rwriting the log: {done:,}/{total:,} rows ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True
        )
        if done >= total:
            print(file=sys.stderr)

    return show


def _machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = 0
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = round(pages * size / 2**30)
    except (ValueError, OSError):
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": memory,
        "python": platform.python_version(),
    }


def run_duckdb(raw_dir: Path, cutoff_ms: int, threads: int) -> tuple[pa.Table, float]:
    """The rules query over the log files: its per-video table and its wall time."""
    con = duckdb.connect(config={"threads": threads})
    con.execute("SET enable_progress_bar = false")  # it draws on stdout, which holds only the JSON
    started = time.monotonic()
    table = count_videos(con, log_relation(str(raw_dir / "*" / "*" / "*.parquet")), cutoff_ms)
    seconds = time.monotonic() - started
    con.close()
    return table, seconds


def run_spark(
    settings: Settings, cutoff_ms: int, conf: Mapping[str, str] | None = None
) -> tuple[pa.Table, dict[str, float]]:
    """The batch job's Spark work as `batch_layer.job.compute_batch` does it, without the Redis
    watermark check and the publish: read the log, classify, collect the per-video baseline, write
    the daily and per-bucket outputs and the explanations. Returns the baseline table and the
    phase times. `conf` adds Spark settings to the job's session (`bench.batch_stages` turns the
    event log on)."""
    from pyspark import StorageLevel

    from batch_layer import load
    from batch_layer.explain import write_explained
    from batch_layer.extract import read_log
    from batch_layer.series import bucket_totals, write_series
    from batch_layer.session import build_session
    from batch_layer.totals import daily_totals, grain_counts, video_totals
    from batch_layer.transform import classify

    started = time.monotonic()
    spark = build_session(settings, app_name="tally-bench", conf=conf)
    spark.range(1).count()  # the JVM and Python workers are up before the clock starts
    session_seconds = time.monotonic() - started
    try:
        started = time.monotonic()
        events = read_log(spark, settings.raw_dir, cutoff_ms)
        classified = classify(events).persist(StorageLevel.MEMORY_AND_DISK)
        grain = grain_counts(classified, settings.bucket_ms).cache()
        table = load.baseline_table(video_totals(grain))
        baseline_seconds = time.monotonic() - started
        load.write_daily(settings, "bench", SHIPPED.version, daily_totals(grain))
        write_series(settings, "bench", bucket_totals(grain))
        write_explained(settings, "bench", classified, SHIPPED)
        job_seconds = time.monotonic() - started
        grain.unpersist()
        classified.unpersist()
    finally:
        spark.stop()
    return table, {"session": session_seconds, "baseline": baseline_seconds, "job": job_seconds}


def in_new_process(run: Callable[..., _Result], *args: Any) -> _Result:
    """`run(*args)` in a new Python process: for Spark a new JVM, so nothing compiled or loaded by
    an earlier run is reused (PySpark keeps its JVM for the life of the Python process, even across
    `SparkSession.stop`); DuckDB runs the same way, so neither engine starts warm."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        return pool.submit(run, *args).result()


def _repeat_count(text: str) -> int:
    """`--repeat`: a whole number of runs, at least 1; the error names the option and the value."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--repeat must be a whole number, at least 1 (got {text!r})")
    return value


def _differences(spark: pa.Table, duck: pa.Table) -> int:
    """How many videos differ between the two per-video tables (0: equal)."""
    left = {row["video_id"]: row for row in spark.to_pylist()}
    right = {row["video_id"]: row for row in duck.select(spark.column_names).to_pylist()}
    return sum(1 for video in left.keys() | right.keys() if left.get(video) != right.get(video))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_layer", description=__doc__)
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS, help="log rows to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N] and DuckDB threads")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the generated data here")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--repeat", type=_repeat_count, default=1, help="runs of each engine, alternating; medians reported"
    )
    args = parser.parse_args(argv)

    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="tally-bench-batch-"))
    settings = Settings(data_dir=data_dir, spark_master=f"local[{args.cores}]")
    try:
        shutil.rmtree(settings.raw_dir, ignore_errors=True)
        traffic = BenchTraffic(events=args.events, seed=args.seed)
        started = time.monotonic()
        files = write_bench_log(settings.raw_dir, traffic, progress=_progress(args.events))
        generate_seconds = time.monotonic() - started
        cutoff_ms = traffic.start_ms + traffic.span_ms + 24 * 3_600_000  # every row is before it

        duck_runs: list[float] = []
        spark_runs: list[dict[str, float]] = []
        differing = 0
        for run in range(1, args.repeat + 1):
            print(f"run {run}/{args.repeat}: counting with DuckDB ...", file=sys.stderr, flush=True)
            duck_table, duck_seconds = in_new_process(run_duckdb, settings.raw_dir, cutoff_ms, args.cores)
            print(f"  {duck_seconds:.1f} s; counting with Spark ...", file=sys.stderr, flush=True)
            spark_table, spark_times = in_new_process(run_spark, settings, cutoff_ms)
            print(f"  {spark_times['job']:.1f} s", file=sys.stderr, flush=True)
            duck_runs.append(duck_seconds)
            spark_runs.append(spark_times)
            differing = max(differing, _differences(spark_table, duck_table))
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)

    duck_seconds = statistics.median(duck_runs)
    spark_times = {phase: statistics.median(run[phase] for run in spark_runs) for phase in spark_runs[0]}
    result = {
        "benchmark": "batch_layer",
        "repeat": args.repeat,
        "duckdb_runs_seconds": [round(s, 2) for s in duck_runs],
        "spark_runs_seconds": [round(run["job"], 2) for run in spark_runs],
        "events": args.events,
        "files": files,
        "videos": spark_table.num_rows,
        "cores": args.cores,
        "generate_seconds": round(generate_seconds, 2),
        "duckdb_seconds": round(duck_seconds, 2),
        "duckdb_events_per_sec": round(args.events / duck_seconds),
        "spark_seconds": round(spark_times["job"], 2),
        "spark_events_per_sec": round(args.events / spark_times["job"]),
        "spark_baseline_seconds": round(spark_times["baseline"], 2),
        "spark_session_seconds": round(spark_times["session"], 2),
        "spark_over_duckdb": round(spark_times["job"] / duck_seconds, 2),
        "duckdb_timed": DUCKDB_TIMED,
        "spark_timed": SPARK_TIMED,
        "target_ratio": TARGET_RATIO,
        "within_target": spark_times["job"] <= TARGET_RATIO * duck_seconds,
        "per_video_equal": differing == 0,
        "videos_differing": differing,
        "counted_views": sum(spark_table["views"].to_pylist()),
        "rules_version": SHIPPED.version,
        "machine": _machine(),
    }
    report(result, args.output)
    return 0 if differing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
