"""Run the ingest API: `python -m ingest` (settings from TALLY_* variables)."""

from __future__ import annotations

import uvicorn

from counting.settings import Settings
from ingest.app import create_app


def main() -> None:
    settings = Settings()
    uvicorn.run(
        create_app(settings), host=settings.ingest_host, port=settings.ingest_port, log_level="warning"
    )


if __name__ == "__main__":
    main()
