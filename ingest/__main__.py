"""Run the ingest API: `python -m ingest` (settings from TALLY_* variables); with `ingest_workers`
above one, that many processes answer on one port."""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI

from counting.errors import InvalidSetting
from counting.settings import Settings, check_secrets
from ingest.app import create_app


def worker_app() -> FastAPI:
    """The app of one of several worker processes, each with its own broker and Redis clients
    (uvicorn imports this factory in every process it spawns)."""
    return create_app(Settings())


def main() -> None:
    settings = Settings()
    try:
        check_secrets(settings, ("collector_key", "user_token_secret"))
    except InvalidSetting as exc:
        raise SystemExit(f"the ingest API refuses to start: {exc}") from None
    host, port = settings.ingest_host, settings.ingest_port
    if settings.ingest_workers == 1:
        uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
        return
    # This process binds the port and supervises the workers, which share its socket (a worker that
    # dies is replaced); SIGTERM to it, or to its process group, stops them all.
    uvicorn.run(
        "ingest.__main__:worker_app",
        factory=True,
        workers=settings.ingest_workers,
        host=host,
        port=port,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
