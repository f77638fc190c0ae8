"""A batch run's time for one new interval against the age of the log it reads: logs of `--hours` of
traffic at `--rate` events a second, each as the local stack leaves it, then the batch job's Spark
work at the log's end. `python -m bench.interval_run [--hours 1 24] [--rate 20] [--repeat 2]`.

Each log is `bench.batch_traffic`'s rows in ingestion order, written as the archiver writes them (a
file per Kafka partition a flush of `--flush-ms`, 4 partitions), with every hour but the last
merged as `tally batch run` compacts a closed hour (`speed_layer.archiver.compaction.merge`; the
relational store's records of it are not part of the cost measured). The last hour, whose end is
the run's cutoff, stays as the archiver wrote it. The job is `bench.batch_layer.run_spark` (read,
classify, baseline, daily, per-bucket and explanation outputs), a new JVM a run, `--repeat` times
alternating between the logs. Reports per log its files (in all, of a compacted hour, of the last
hour) and the job's median seconds, and the longest log's median over the shortest's. Progress to
stderr, then one line of JSON; writes bench/results/interval_run.json (or `--output`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from bench.batch_layer import in_new_process, run_spark
from bench.batch_traffic import HOUR_MS, BenchTraffic, LogWriter, in_archiver_order, write_bench_log
from bench.log_files import at_least_one
from bench.machine import machine
from bench.report import report
from counting.settings import Settings
from speed_layer.archiver.compaction import LogFile, log_files, merge, remove

RESULTS = Path(__file__).resolve().parent / "results" / "interval_run.json"


def _log(message: str) -> None:
    print(f"[interval-run-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _hour_start(hour_dir: Path) -> int:
    """The start (ms) of the UTC hour of an `ingest_date=…/ingest_hour=…` directory."""
    day, hour = hour_dir.parent.name.split("=", 1)[1], hour_dir.name.split("=", 1)[1]
    return int(datetime.strptime(f"{day} {hour}", "%Y-%m-%d %H").replace(tzinfo=UTC).timestamp() * 1000)


def compact_hours(raw_dir: Path, before_ms: int) -> int:
    """Merge the files of each hour that ends at or before `before_ms`, a file per partition, as
    compaction does; returns the files written."""
    written = 0
    for hour_dir in sorted({p.parent for p in raw_dir.glob("ingest_date=*/ingest_hour=*/*.parquet")}):
        if _hour_start(hour_dir) + HOUR_MS > before_ms:
            continue
        groups: dict[int, list[LogFile]] = defaultdict(list)
        for log_file in log_files(hour_dir):
            groups[log_file.partition].append(log_file)
        for group in groups.values():
            if len(group) > 1:
                merge(group)
                remove(group)
            written += 1
    return written


def _write_log(work: Path, hours: int, args: argparse.Namespace) -> tuple[Settings, int, dict[str, int]]:
    """One log of `hours` as the stack leaves it; its settings, its cutoff and its file counts."""
    config = BenchTraffic(events=args.rate * 3600 * hours, seed=args.seed, span_ms=hours * HOUR_MS)
    source = work / f"generated-{hours}h"
    write_bench_log(source, config)
    rows = in_archiver_order(ds.dataset(source, format="parquet").to_table())
    settings = Settings(data_dir=work / f"log-{hours}h", bucket_ms=60_000)
    writer = LogWriter(settings.raw_dir)
    per_flush = max(1, args.rate * args.flush_ms // 1000)
    for flush, start in enumerate(range(0, rows.num_rows, per_flush)):
        writer.write(rows.slice(start, per_flush), flush)
    cutoff = config.start_ms + hours * HOUR_MS
    compacted = compact_hours(settings.raw_dir, cutoff - HOUR_MS)
    every = settings.raw_dir.glob("ingest_date=*/ingest_hour=*/*.parquet")
    last_hour = sum(1 for p in every if _hour_start(p.parent) >= cutoff - HOUR_MS)
    files = {"files": compacted + last_hour, "files_compacted_hours": compacted, "files_last_hour": last_hour}
    _log(f"{hours} h: {rows.num_rows:,} rows in {files['files']:,} files ({last_hour:,} in the last hour)")
    return settings, cutoff, files


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    logs = {hours: _write_log(work, hours, args) for hours in args.hours}
    seconds: dict[int, list[float]] = {hours: [] for hours in args.hours}
    for run in range(args.repeat):
        for hours, (settings, cutoff, _) in logs.items():
            _, times = in_new_process(run_spark, settings, cutoff)
            seconds[hours].append(round(times["job"], 2))
            _log(f"run {run + 1}, {hours} h of log: the job took {times['job']:.1f} s")
    medians = {hours: statistics.median(runs) for hours, runs in seconds.items()}
    shortest, longest = min(args.hours), max(args.hours)
    return {
        "benchmark": "interval_run",
        "rate": args.rate,
        "flush_ms": args.flush_ms,
        "per_log": [
            {
                "hours": hours,
                "events": args.rate * 3600 * hours,
                **files,
                "job_seconds": medians[hours],
                "job_runs_seconds": seconds[hours],
            }
            for hours, (_, _, files) in logs.items()
        ],
        "job_seconds_ratio": round(medians[longest] / medians[shortest], 2),
        "machine": machine(),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.interval_run", description=__doc__)
    parser.add_argument("--hours", type=at_least_one, nargs="+", default=[1, 24], help="the logs' spans")
    parser.add_argument("--rate", type=at_least_one, default=20, help="events ingested a second")
    parser.add_argument("--flush-ms", type=at_least_one, default=10_000, help="the archiver's flush")
    parser.add_argument("--repeat", type=at_least_one, default=2, help="runs of the job on each log")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tally-interval-run-") as work:
        return report(bench(args, Path(work)), args.output)


if __name__ == "__main__":
    main()
