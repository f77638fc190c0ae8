"""Run the serving API: `python -m serving_layer` (settings from TALLY_* variables)."""

from __future__ import annotations

import uvicorn

from counting.errors import InvalidSetting
from counting.settings import Settings, check_secrets
from serving_layer.app import create_app


def main() -> None:
    settings = Settings()
    try:
        check_secrets(settings, ("admin_key",))
    except InvalidSetting as exc:
        raise SystemExit(f"the serving API refuses to start: {exc}") from None
    uvicorn.run(
        create_app(settings),
        host=settings.serving_host,
        port=settings.serving_port,
        log_level="warning",
        access_log=False,  # at log level warning it printed nothing, but cost a call per request
    )


if __name__ == "__main__":
    main()
