"""GET /v1/videos/{id}/milestones: the steps of the ladder the video reached in published baselines
(`counting.milestones`), and whether each was announced."""

from __future__ import annotations

import asyncio
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, Path
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError

from counting.display import readable
from counting.event import VIDEO_ID_PATTERN
from counting.milestones import milestone_id
from counting.settings import Settings
from serving_layer.errors import StoreUnavailable
from warehouse.errors import StoreError
from warehouse.milestones import Milestone, milestones_of
from warehouse.store import open_store


class MilestoneAnswer(BaseModel):
    milestone_id: str
    step: int
    step_display: str
    views: int  # the published views that reached it
    run_id: str
    cutoff: int
    recorded_at: str
    announced: bool
    webhook: str  # off, pending, delivered, dead


class VideoMilestones(BaseModel):
    video_id: str
    milestones: list[MilestoneAnswer]


def _answer(m: Milestone) -> MilestoneAnswer:
    return MilestoneAnswer(
        milestone_id=milestone_id(m.video_id, m.step),
        step=m.step,
        step_display=readable(m.step),
        views=m.views,
        run_id=m.run_id,
        cutoff=m.cutoff,
        recorded_at=m.recorded_at.isoformat(),
        announced=m.announced_at is not None,
        webhook=m.webhook_state,
    )


def read_milestones(store_url: str, video_id: str) -> list[Milestone]:
    try:
        with open_store(store_url) as store:
            if not sa.inspect(store.engine).has_table("milestones"):
                return []
            return milestones_of(store, video_id)
    except (SQLAlchemyError, StoreError) as exc:
        raise StoreUnavailable(
            f"the relational store is not readable ({exc}): set TALLY_DATABASE_URL or run a batch"
        ) from exc


def milestones_router(settings: Settings) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/videos/{video_id}/milestones", response_model=VideoMilestones)
    async def video_milestones(
        video_id: Annotated[str, Path(pattern=VIDEO_ID_PATTERN, description="the video id")],
    ) -> VideoMilestones:
        """The view-count steps the video reached in published baselines, lowest first."""
        found = await asyncio.to_thread(read_milestones, settings.store_url, video_id)
        return VideoMilestones(video_id=video_id, milestones=[_answer(m) for m in found])

    return router
