"""The APIs' HTTP protocol: a response's head and body leave in one send, and nothing is lost or
reordered when a response streams, closes the connection, or the peer goes away."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response, StreamingResponse

from counting.onewrite import SEND_NOW_BYTES, OneWriteProtocol, _Gathered
from tests.servers import serve


class _Transport:
    """Records what is sent (the unit test of `_Gathered` only)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_writes_of_one_turn_leave_as_one_send_after_it() -> None:
    async def run() -> tuple[list[bytes], list[bytes]]:
        transport = _Transport()
        gathered = _Gathered(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
        gathered.write(b"HTTP/1.1 200 OK\r\n\r\n")
        gathered.write(b"body")
        during = list(transport.sent)
        await asyncio.sleep(0)
        return during, transport.sent

    during, after = asyncio.run(run())
    assert during == []
    assert after == [b"HTTP/1.1 200 OK\r\n\r\nbody"]


def test_a_large_body_leaves_at_once_with_what_waited() -> None:
    async def run() -> tuple[list[bytes], list[bytes]]:
        transport = _Transport()
        gathered = _Gathered(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
        gathered.write(b"head")
        gathered.write(b"x" * SEND_NOW_BYTES)
        during = list(transport.sent)
        gathered.write(b"tail")
        await asyncio.sleep(0)
        return during, transport.sent

    during, after = asyncio.run(run())
    assert during == [b"head" + b"x" * SEND_NOW_BYTES]
    assert after == [b"head" + b"x" * SEND_NOW_BYTES, b"tail"]


def test_close_sends_what_waits_first_and_a_closed_peer_gets_nothing() -> None:
    async def run() -> tuple[list[bytes], bool, list[bytes]]:
        loop = asyncio.get_running_loop()
        closing = _Transport()
        gathered = _Gathered(closing, loop)  # type: ignore[arg-type]
        gathered.write(b"last words")
        gathered.close()
        gone = _Transport()
        dropped = _Gathered(gone, loop)  # type: ignore[arg-type]
        dropped.write(b"too late")
        gone.closed = True
        await asyncio.sleep(0)
        return closing.sent, closing.closed, gone.sent

    sent, closed, dropped = asyncio.run(run())
    assert sent == [b"last words"]
    assert closed
    assert dropped == []


def test_everything_else_is_the_transports() -> None:
    async def run() -> Any:
        gathered = _Gathered(_Transport(), asyncio.get_running_loop())  # type: ignore[arg-type]
        return gathered.get_extra_info("peername")

    assert asyncio.run(run()) == "info:peername"


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/small")
    async def small() -> JSONResponse:
        return JSONResponse({"answer": 42})

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def parts() -> Any:
            for n in range(5):
                await asyncio.sleep(0.01)  # each part in a later turn of the loop
                yield f"part{n};".encode()

        return StreamingResponse(parts(), media_type="text/plain")

    @app.get("/large")
    async def large() -> Response:
        return Response(b"0123456789" * 30_000, media_type="text/plain")

    @app.get("/close")
    async def close() -> JSONResponse:
        return JSONResponse({"bye": True}, headers={"connection": "close"})

    return app


def test_responses_over_real_http_arrive_whole() -> None:
    with serve(_app()) as base, httpx.Client(base_url=base) as client:
        for _ in range(3):  # on one kept-alive connection
            assert client.get("/small").json() == {"answer": 42}
        streamed = client.get("/stream")
        assert streamed.status_code == 200
        assert streamed.text == "part0;part1;part2;part3;part4;"
        assert client.get("/large").content == b"0123456789" * 30_000
        closing = client.get("/close")
        assert closing.json() == {"bye": True}
        assert closing.headers["connection"] == "close"


class _Recorded:
    """A real transport whose sends are recorded."""

    def __init__(self, transport: asyncio.Transport, sends: list[bytes]) -> None:
        self._transport = transport
        self._sends = sends

    def write(self, data: bytes) -> None:
        self._sends.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Counted(OneWriteProtocol):
    """The APIs' protocol over a transport that records each send."""

    sends: list[bytes] = []

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_Recorded(transport, _Counted.sends))  # type: ignore[arg-type]


def test_a_response_is_one_send() -> None:
    _Counted.sends.clear()
    with serve(_app(), http=_Counted) as base, httpx.Client(base_url=base) as client:
        assert client.get("/small").json() == {"answer": 42}
        assert client.get("/small").json() == {"answer": 42}
    assert len(_Counted.sends) == 2
    assert all(s.startswith(b"HTTP/1.1 200 OK") and s.endswith(b'{"answer":42}') for s in _Counted.sends)
