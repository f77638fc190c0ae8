"""Prometheus metrics of the speed-layer workers, served by each worker at /metrics on its own port
(the counter on `faust_web_port`, the archiver on the port after it), on loopback unless told otherwise."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from speed_layer import logs

_SIZES = (1, 10, 100, 1_000, 5_000, 20_000, 50_000, 100_000, 250_000)
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

RECORDS = Counter("tally_speed_records", "Broker records consumed", ["worker"])
EVENTS = Counter("tally_speed_events", "Events decoded from consumed records", ["worker"])
OPS = Counter(
    "tally_counter_ops",
    "Counter operations by what Redis did with them: applied, duplicate (event id seen), skipped "
    "(record at or below the stored offset)",
    ["result"],
)
REJECTED = Counter("tally_counter_rejected", "Views rejected as bot traffic, by reason", ["reason"])
DEAD_LETTERS = Counter("tally_speed_dead_letters", "Records sent to the dead-letter topic", ["worker"])
FENCED = Counter("tally_counter_fenced_writes", "Writes refused because another worker owns the partition")
SHARD_RAISES = Counter("tally_counter_shard_updates", "Shard counts of hot videos raised or renewed")
BATCH_RECORDS = Histogram("tally_speed_batch_records", "Records per micro-batch", ["worker"], buckets=_SIZES)
BATCH_EVENTS = Histogram("tally_speed_batch_events", "Events per micro-batch", ["worker"], buckets=_SIZES)
PLAN_SECONDS = Histogram("tally_counter_plan_seconds", "Time to plan a micro-batch", buckets=_SECONDS)
FLUSH_SECONDS = Histogram(
    "tally_speed_flush_seconds",
    "Time to store a micro-batch (Redis write for the counter, Parquet files for the archiver)",
    ["worker"],
    buckets=_SECONDS,
)
LAG = Gauge(
    "tally_speed_consumer_lag",
    "Records behind the end of the partition after the last stored batch",
    ["worker", "topic", "partition"],
)
WATERMARK = Gauge("tally_archiver_watermark_ms", "The archiver watermark (ingestion time, ms)")


def serve(port: int, worker: str, host: str = "127.0.0.1") -> bool:
    """Serve /metrics on `host:port` (loopback by default; `faust_web_host`) from a thread; False
    (logged) when the port is taken."""
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        logs.warning("metrics_unavailable", worker=worker, host=host, port=port, error=exc)
        return False
    logs.info("metrics_serving", worker=worker, host=host, port=port, path="/metrics")
    return True
