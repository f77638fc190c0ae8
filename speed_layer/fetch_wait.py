"""The one reach into a library's private attribute, isolated here.

faust-streaming 0.15.3 builds its aiokafka consumer with `fetch_max_wait_ms=1500` written into
`faust/transport/drivers/aiokafka.py` (`AIOKafkaConsumerThread._create_worker_consumer`) and no
setting reaches it; no upstream issue asks for one (searched 2026-11-26). The local broker (Tansu
0.6) answers every fetch only once its wait is over, with records or without (it sleeps out the
rest of the wait after each pass: `tansu-storage/src/service/fetch.rs`, `FetchService::fetch`),
which at 1.5 s alone adds about 0.4 s (p50) to 0.75 s to the counter's freshness. Remove this
module once Faust exposes the setting.
"""

from __future__ import annotations

import faust

from speed_layer import logs


def shorten_fetch_wait(app: faust.App, wait_ms: int) -> bool:
    """Set the running consumer's fetch wait to `wait_ms`; False (and a warning) when the aiokafka
    fetcher is not where faust-streaming 0.15 keeps it."""
    aiokafka_consumer = getattr(getattr(app.consumer, "_thread", None), "_consumer", None)
    fetcher = getattr(aiokafka_consumer, "_fetcher", None)
    if fetcher is None or not hasattr(fetcher, "_fetch_max_wait_ms"):
        logs.warning("fetch_wait_unchanged", reason="no aiokafka fetcher found", wait_ms=wait_ms)
        return False
    fetcher._fetch_max_wait_ms = wait_ms
    return True
