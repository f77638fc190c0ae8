"""The serving API's route families, each an `APIRouter` made from the shared objects it reads."""

from __future__ import annotations

from serving_layer.routes.admin import admin_router
from serving_layer.routes.dashboard import dashboard_router
from serving_layer.routes.health import health_router
from serving_layer.routes.live import live_router
from serving_layer.routes.payouts import payouts_router
from serving_layer.routes.videos import videos_router

__all__ = [
    "admin_router",
    "dashboard_router",
    "health_router",
    "live_router",
    "payouts_router",
    "videos_router",
]
