"""Start one speed-layer worker process (counter or archiver) on its Faust app until it is stopped."""

from __future__ import annotations

import gc

import faust

from counting import logs as logging_setup
from counting.settings import Settings
from speed_layer import logs, metrics
from speed_layer.app import (
    SESSION_TIMEOUT_S,
    CrashSwitch,
    WorkerOptions,
    create_archiver_app,
    create_counter_app,
)

WORKERS = {"counter": create_counter_app, "archiver": create_archiver_app}
# Each worker serves /metrics on faust_web_port plus its offset; the n-th process of a kind (the
# stack may run several) adds twice n - 1: counter 1, archiver 1, counter 2, archiver 2, ...
METRICS_PORT_OFFSET = {"counter": 0, "archiver": 1}
# A worker keeps millions of small objects alive (window counts, caches, key sets): with CPython's
# default thresholds (700, 10, 10) the cyclic collector rescans them so often that it took about 40 %
# of the counter's planning time. Young collections are made rarer, and what start-up built (modules,
# Faust) is frozen out of the scans. Memory stays bounded: nearly all garbage here is freed by
# reference counting, and the windows and caches drop their old entries.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Freeze the start-up objects and raise the collector's thresholds (see GC_THRESHOLDS)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def metrics_port(settings: Settings, name: str, instance: int = 1) -> int:
    """The /metrics port of the `instance`-th process (from 1) of the counter or the archiver."""
    return settings.faust_web_port + METRICS_PORT_OFFSET[name] + len(METRICS_PORT_OFFSET) * (instance - 1)


def run_worker(
    name: str,
    settings: Settings,
    loglevel: str = "INFO",
    group: str | None = None,
    session_timeout: float = SESSION_TIMEOUT_S,
    instance: int = 1,
) -> int:
    """Run the named worker in this process until SIGTERM or SIGINT; return its exit code.
    `instance` numbers the processes of one kind on this machine (their metrics ports and Faust
    data directories differ; they share the consumer group)."""
    logging_setup.configure(name if instance == 1 else f"{name}-{instance}", loglevel)
    crash = CrashSwitch()
    app = WORKERS[name](settings, WorkerOptions(group, crash, session_timeout, instance))
    tune_gc()
    metrics.serve(metrics_port(settings, name, instance), name, host=settings.faust_web_host)
    # Faust keeps the set-up made above (one format for every process) instead of its own.
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, override_logging=False)
    worker.spinner = None  # its terminal escapes would land in the log lines (Faust drops it itself
    # only when it sets up the logging, which it does not here)
    logs.info(
        "worker_starting", worker=name, instance=instance, app=app.conf.id, broker=settings.kafka_bootstrap
    )
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    else:
        code = 0
    if crash.reason is not None:
        code = code or 1
    logs.info("worker_stopped", worker=name, code=code)
    return code
