"""Run the serving API: `python -m serving_layer` (settings from TALLY_* variables); with
`serving_workers` above one, that many processes answer on one port."""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI

from counting.errors import InvalidSetting
from counting.settings import Settings, check_secrets
from serving_layer.app import create_app


def worker_app() -> FastAPI:
    """The app of one of several worker processes, each with its own Redis client, read cache and
    baseline (a publish reaches each one: every read checks the baseline pointer)."""
    return create_app(Settings())


def main() -> None:
    settings = Settings()
    try:
        check_secrets(settings, ("admin_key",))
    except InvalidSetting as exc:
        raise SystemExit(f"the serving API refuses to start: {exc}") from None
    host, port = settings.serving_host, settings.serving_port
    # access_log off: at log level warning it printed nothing, but cost a call per request.
    if settings.serving_workers == 1:
        uvicorn.run(create_app(settings), host=host, port=port, log_level="warning", access_log=False)
        return
    # This process binds the port and supervises the workers, which share its socket (a worker that
    # dies is replaced); SIGTERM to it, or to its process group, stops them all.
    uvicorn.run(
        "serving_layer.__main__:worker_app",
        factory=True,
        workers=settings.serving_workers,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
