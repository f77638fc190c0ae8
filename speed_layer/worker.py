"""Start one speed-layer worker process (counter or archiver) on its Faust app until it is stopped."""

from __future__ import annotations

import faust

from counting.settings import Settings
from speed_layer import logs, metrics
from speed_layer.app import SESSION_TIMEOUT_S, CrashSwitch, create_archiver_app, create_counter_app

WORKERS = {"counter": create_counter_app, "archiver": create_archiver_app}
# Each worker serves /metrics on faust_web_port plus its offset.
METRICS_PORT_OFFSET = {"counter": 0, "archiver": 1}


def run_worker(
    name: str,
    settings: Settings,
    loglevel: str = "INFO",
    group: str | None = None,
    session_timeout: float = SESSION_TIMEOUT_S,
) -> int:
    """Run the named worker in this process until SIGTERM or SIGINT; return its exit code."""
    crash = CrashSwitch()
    app = WORKERS[name](settings, group, crash, session_timeout)
    metrics.serve(settings.faust_web_port + METRICS_PORT_OFFSET[name], name)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    logs.info("worker_starting", worker=name, app=app.conf.id, broker=settings.kafka_bootstrap)
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
