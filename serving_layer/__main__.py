"""Run the serving API: `python -m serving_layer` (settings from TALLY_* variables); with
`serving_workers` above one, that many processes answer on one port (each with its own Redis client,
read cache and baseline: a publish reaches each one, every read checks the baseline pointer)."""

from __future__ import annotations

from typing import Any

from counting.apiprocess import ApiProcess
from counting.settings import Settings
from serving_layer.app import create_app

PROCESS = ApiProcess("serving", ("admin_key",), "serving_layer.__main__:worker_app", create_app)


def worker_app() -> Any:
    return PROCESS.worker_app()


def main() -> None:
    settings = Settings()
    # access_log off: at log level warning it printed nothing, but cost a call per request.
    PROCESS.run(
        settings.serving_host, settings.serving_port, settings.serving_workers, settings, access_log=False
    )


if __name__ == "__main__":
    main()
