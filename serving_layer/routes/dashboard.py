"""The dashboard route: the static page that draws the overview (left out of the OpenAPI)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse


def dashboard_router(static: Path) -> APIRouter:
    """`/dashboard`: `dashboard.html` of the `static` directory."""
    router = APIRouter()

    @router.get("/dashboard", include_in_schema=False)
    async def dashboard() -> FileResponse:
        return FileResponse(static / "dashboard.html")

    return router
