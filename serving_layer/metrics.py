"""Prometheus metrics of the serving API: requests and latency per route template and status,
measured by a plain ASGI middleware (cheap enough for the hot read path)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _Measure:
    def __init__(self, app: ASGIApp, requests: Counter, latency: Histogram) -> None:
        self.app = app
        self.requests = requests
        self.latency = latency
        self._series: dict[tuple[str, str, int], tuple[Histogram, Counter]] = {}  # resolved labels

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            elapsed = time.perf_counter() - started
            labels = (getattr(scope.get("route"), "path", "unmatched"), scope.get("method", ""), status)
            series = self._series.get(labels)
            if series is None:
                template, method, _ = labels
                series = (
                    self.latency.labels(template, method),
                    self.requests.labels(template, method, str(status)),
                )
                self._series[labels] = series
            series[0].observe(elapsed)
            series[1].inc()


def instrument(app: FastAPI) -> CollectorRegistry:
    """Count and time every request by its route template; serve them at GET /metrics."""
    registry = CollectorRegistry()
    requests = Counter(
        "tally_http_requests", "HTTP requests answered", ["route", "method", "status"], registry=registry
    )
    latency = Histogram(
        "tally_http_request_seconds",
        "time to answer an HTTP request",
        ["route", "method"],
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
        registry=registry,
    )
    app.add_middleware(_Measure, requests=requests, latency=latency)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Any:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return registry
