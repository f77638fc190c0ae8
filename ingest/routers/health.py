"""The health route: liveness (the process answers)."""

from __future__ import annotations

from fastapi import APIRouter


def health_router() -> APIRouter:
    """`/healthz`."""
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return router
