"""Prometheus metrics of the serving API: requests and latency per route template and status."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest


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

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        template = getattr(route, "path", "unmatched")
        latency.labels(template, request.method).observe(time.perf_counter() - started)
        requests.labels(template, request.method, str(response.status_code)).inc()
        return response

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return registry
