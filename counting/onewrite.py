"""The APIs' HTTP protocol: uvicorn's httptools protocol whose writes within one turn of the event
loop leave as one send, so a response's head and body cost the process one system call, not two
(uvicorn writes them apart; on these hosts a send costs some 10-20 µs of CPU)."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _Gathered:
    """A transport whose writes wait for the end of the loop's turn and leave joined; closing sends
    what waits first. Everything else is the transport's own."""

    __slots__ = ("_loop", "_transport", "_waiting")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._waiting: list[bytes] = []

    def write(self, data: bytes) -> None:
        waiting = self._waiting
        if not waiting:
            self._loop.call_soon(self._send)
        waiting.append(data)

    def _send(self) -> None:
        waiting = self._waiting
        if not waiting:
            return
        self._waiting = []
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
