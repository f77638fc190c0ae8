"""Run the ingest API: `python -m ingest` (settings from TALLY_* variables); with `ingest_workers`
above one, that many processes answer on one port."""

from __future__ import annotations

from typing import Any

from counting.apiprocess import ApiProcess
from counting.settings import Settings
from ingest.app import create_app

PROCESS = ApiProcess(
    "ingest", ("collector_key", "user_token_secret"), "ingest.__main__:worker_app", create_app
)


def worker_app() -> Any:
    return PROCESS.worker_app()


def main() -> None:
    settings = Settings()
    PROCESS.run(settings.ingest_host, settings.ingest_port, settings.ingest_workers, settings)


if __name__ == "__main__":
    main()
