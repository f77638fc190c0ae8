"""How an API process (the ingest API, the serving API) starts: its secrets checked, one log
format, then uvicorn in this process or, with several workers, as their supervisor."""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from counting import logs
from counting.errors import InvalidSetting
from counting.settings import Settings, check_secrets


@dataclass(frozen=True)
class ApiProcess:
    """One API: its process name (for the logs), the secrets it refuses to start without, the
    import path of its worker factory, and the app factory."""

    name: str
    secrets: Sequence[str]
    worker_factory: str
    create_app: Callable[[Settings], Any]

    def worker_app(self) -> Any:
        """The app of one of several worker processes, each with its own clients (uvicorn imports the
        worker factory in every process it spawns)."""
        logs.configure(self.name, "WARNING")
        app = self.create_app(Settings())
        settle_heap()
        return app

    def run(self, host: str, port: int, workers: int, settings: Settings, **options: Any) -> None:
        """Serve until stopped; exits naming the missing secret if one is not set."""
        import uvicorn  # installed with the API parts' extras

        from counting.onewrite import OneWriteProtocol

        logs.configure(self.name, "WARNING")
        try:
            check_secrets(settings, tuple(self.secrets))
        except InvalidSetting as exc:
            raise SystemExit(f"the {self.name} API refuses to start: {exc}") from None
        # proxy_headers off: uvicorn would otherwise take the client address from X-Forwarded-For of
        # any loopback peer before Tally's own check (`ingest.connection`, `TALLY_TRUSTED_PROXIES`).
        # http: a response's head and body in one send (`counting.onewrite`).
        options.update(
            host=host,
            port=port,
            log_level="warning",
            log_config=None,
            proxy_headers=False,
            http=OneWriteProtocol,
        )
        if workers == 1:
            app = self.create_app(settings)
            settle_heap()
            uvicorn.run(app, **options)
            return
        # This process binds the port and supervises the workers, which share its socket (a worker
        # that dies is replaced); SIGTERM to it, or to its process group, stops them all.
        uvicorn.run(self.worker_factory, factory=True, workers=workers, **options)


def settle_heap() -> None:
    """Put what start-up made (modules, the app, its routes and models: hundreds of thousands of
    objects) out of the cyclic collector's reach. Each full pass walks every tracked object and
    holds the event loop meanwhile: 79 and 116 ms in a serving process during `bench.serving`
    (2026-12-07), time every request in flight waits. Frozen objects are never collected, and
    start-up's garbage is collected first."""
    gc.collect()
    gc.freeze()
