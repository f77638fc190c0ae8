"""What the archiver's flush interval costs the batch: one generated log written as the archiver
writes it at two flush intervals, then the batch job's Spark work on each.
`python -m bench.log_files [--events N] [--rate R] [--flush-ms 1000 10000] [--repeat K]`.

The archiver writes a Parquet file per partition each time it flushes (`TALLY_ARCHIVER_FLUSH_MS`,
or every 5,000 records), so at a low rate the log's files hold few rows each and their number grows
with time, not with traffic. The bench writes `--events` rows ingested at `--rate` events a second
(`bench.batch_traffic`, 4 partitions) once, then writes them again in flushes of rate * flush rows
(a file per partition a flush, as the archiver does) for each `--flush-ms`, and runs
`bench.batch_layer.run_spark` (read, classify, the baseline, the daily, per-bucket and explanation
outputs; a new JVM a run) on each log `--repeat` times, alternating. It reports per flush interval
the files, the files an hour of ingest time and the job's median seconds, the ratio of the medians,
and whether every layout gave the same per-video counts. Prints progress to stderr, then one line
of JSON; writes bench/results/log_files.json (or `--output`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from bench.batch_layer import in_new_process, run_spark
from bench.batch_traffic import HOUR_MS, BenchTraffic, LogWriter, in_archiver_order, write_bench_log
from bench.machine import machine
from bench.report import report
from counting.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "log_files.json"


def _log(message: str) -> None:
    print(f"[log-files-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def at_least_one(text: str) -> int:
    """A whole number of at least 1; the error names the value."""
    value = int(text) if text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number, at least 1 (got {text!r})")
    return value


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    span_ms = int(args.events / args.rate * 1000)
    # One log of rows, then written again as each flush interval splits it.
    source = work / "generated"
    write_bench_log(source, BenchTraffic(events=args.events, seed=args.seed, span_ms=span_ms))
    rows_of_log = in_archiver_order(ds.dataset(source, format="parquet").to_table())
    logs: dict[int, tuple[Settings, int]] = {}
    for flush_ms in args.flush_ms:
        settings = Settings(data_dir=work / f"flush-{flush_ms}", bucket_ms=60_000)
        rows = max(1, args.rate * flush_ms // 1000)
        writer = LogWriter(settings.raw_dir)
        for flush, start in enumerate(range(0, rows_of_log.num_rows, rows)):
            writer.write(rows_of_log.slice(start, rows), flush)
        logs[flush_ms] = (settings, writer.files)
        _log(f"flush {flush_ms} ms: {writer.files:,} files of {args.events:,} rows ({rows:,} rows a flush)")
    cutoff = BenchTraffic(events=1).start_ms + span_ms + HOUR_MS
    seconds: dict[int, list[float]] = {flush_ms: [] for flush_ms in args.flush_ms}
    tables: dict[int, Any] = {}
    for run in range(args.repeat):
        for flush_ms, (settings, _) in logs.items():
            table, times = in_new_process(run_spark, settings, cutoff)
            seconds[flush_ms].append(round(times["job"], 2))
            tables[flush_ms] = table.sort_by("video_id")
            _log(f"run {run + 1}, flush {flush_ms} ms: the job took {times['job']:.1f} s")
    medians = {flush_ms: statistics.median(runs) for flush_ms, runs in seconds.items()}
    first, last = args.flush_ms[0], args.flush_ms[-1]
    hours = span_ms / HOUR_MS
    return {
        "benchmark": "log_files",
        "events": args.events,
        "rate": args.rate,
        "hours_of_ingest": round(hours, 3),
        "per_flush": [
            {
                "flush_ms": flush_ms,
                "files": files,
                "files_per_hour": round(files / hours, 1),
                "job_seconds": medians[flush_ms],
                "job_runs_seconds": seconds[flush_ms],
            }
            for flush_ms, (_, files) in logs.items()
        ],
        "job_seconds_ratio": round(medians[first] / medians[last], 2),
        "per_video_equal": all(t.equals(tables[first]) for t in tables.values()),
        "machine": machine(),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.log_files", description=__doc__)
    parser.add_argument("--events", type=at_least_one, default=72_000, help="log rows (72,000: 1 h at 20/s)")
    parser.add_argument("--rate", type=at_least_one, default=20, help="events ingested a second")
    parser.add_argument("--flush-ms", type=at_least_one, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--repeat", type=at_least_one, default=2, help="runs of the job on each log")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tally-log-files-") as work:
        return report(bench(args, Path(work)), args.output)


if __name__ == "__main__":
    main()
