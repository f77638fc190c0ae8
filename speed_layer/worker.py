"""Start one speed-layer worker process (counter or archiver) on its Faust app until it is stopped."""

from __future__ import annotations

import faust

from counting.settings import Settings
from speed_layer import logs
from speed_layer.app import CrashSwitch, create_archiver_app, create_counter_app

WORKERS = {"counter": create_counter_app, "archiver": create_archiver_app}


def run_worker(name: str, settings: Settings, loglevel: str = "INFO", group: str | None = None) -> int:
    """Run the named worker in this process until SIGTERM or SIGINT; return its exit code."""
    crash = CrashSwitch()
    app = WORKERS[name](settings, group, crash)
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
