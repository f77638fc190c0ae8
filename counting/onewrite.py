"""The APIs' HTTP protocol: uvicorn's httptools protocol whose writes within one turn of the event
loop leave as one send, so a response's head and body cost the process one system call, not two
(uvicorn writes them apart; on these hosts a send costs some 10-20 µs of CPU)."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Writes waiting past this many bytes leave at once: a large body gains nothing from waiting, and
# the transport's own buffer limits then pause the response's writer as they would without us.
SEND_NOW_BYTES = 64 * 1024


class _Gathered:
    """A transport whose writes wait for the end of the loop's turn and leave joined (at once past
    `SEND_NOW_BYTES`); closing sends what waits first. Everything else is the transport's own."""

    __slots__ = ("_loop", "_size", "_transport", "_waiting")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._waiting: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        waiting = self._waiting
        if not waiting:
            self._loop.call_soon(self._send)
        waiting.append(data)
        self._size += len(data)
        if self._size >= SEND_NOW_BYTES:
            self._send()

    def _send(self) -> None:
        waiting = self._waiting
        if not waiting:
            return
        self._waiting, self._size = [], 0
        if self._transport.is_closing():
            return  # the peer went away: the transport would drop it too
        self._transport.write(waiting[0] if len(waiting) == 1 else b"".join(waiting))

    def close(self) -> None:
        self._send()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over `_Gathered` writes (pass as uvicorn's `http`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_Gathered(transport, self.loop))  # type: ignore[arg-type]
