"""Run an ASGI app under a real uvicorn server in a thread, for tests that need real HTTP."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from counting.onewrite import OneWriteProtocol
from tally.services import free_port


@contextmanager
def serve(app: FastAPI, http: type[asyncio.Protocol] = OneWriteProtocol) -> Iterator[str]:
    """Serve `app` on a free loopback port (lifespan on) with the APIs' HTTP protocol (or `http`)
    and yield its base URL."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", proxy_headers=False, http=http
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the test server did not start on port {port}")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
