"""The ingest API's route families, each an `APIRouter` made from the shared objects it uses."""

from __future__ import annotations

from ingest.routers.batch import batch_router
from ingest.routers.health import health_router
from ingest.routers.intake import Writer
from ingest.routers.single import SingleWrites, single_router, single_writes

__all__ = ["SingleWrites", "Writer", "batch_router", "health_router", "single_router", "single_writes"]
