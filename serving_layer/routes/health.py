"""The health routes: liveness, and readiness (Redis answers or a baseline is published)."""

from __future__ import annotations

import os

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from redis.asyncio import Redis

from serving_layer.baselines import BaselineCache
from serving_layer.stats import REDIS_ERRORS


def health_router(redis: Redis, baselines: BaselineCache) -> APIRouter:
    """`/healthz` and `/readyz`."""
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        """Readiness: Redis answers or a baseline is published (something can be served); `process`:
        the id of the process that answered (several may share the port)."""
        redis_ok = True
        try:
            await redis.ping()
        except REDIS_ERRORS:
            redis_ok = False
        baseline = baselines.get()
        ready = redis_ok or baseline is not None
        body = {
            "ready": ready,
            "redis": redis_ok,
            "baseline_run_id": baseline.run_id if baseline else None,
            "process": os.getpid(),
        }
        return JSONResponse(status_code=200 if ready else 503, content=body)

    return router
