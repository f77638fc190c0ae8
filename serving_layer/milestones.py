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
from serving_layer.schemas import MilestoneAnswer
from warehouse.connection import as_utc, open_store
from warehouse.errors import StoreError
from warehouse.milestones import Milestone, milestones_of, recent_milestones


class VideoMilestones(BaseModel):
    video_id: str
    milestones: list[MilestoneAnswer]


def answer_of(m: Milestone) -> MilestoneAnswer:
    return MilestoneAnswer(
        milestone_id=milestone_id(m.video_id, m.step),
        video_id=m.video_id,
        step=m.step,
        step_display=readable(m.step),
        views=m.views,
        run_id=m.run_id,
        cutoff=m.cutoff,
        recorded_at=as_utc(m.recorded_at).isoformat(),  # with its offset, +00:00, as payouts' times
        announced=m.announced_at is not None,
        webhook=m.webhook_state,
    )


def read_milestones(store_url: str, video_id: str | None, limit: int = 10) -> list[Milestone]:
    """A video's milestones, or with `video_id` None the `limit` recorded last (any video)."""
    try:
        with open_store(store_url) as store:
            if not sa.inspect(store.engine).has_table("milestones"):
                return []
            if video_id is None:
                return recent_milestones(store, limit)
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
        return VideoMilestones(video_id=video_id, milestones=[answer_of(m) for m in found])

    return router
