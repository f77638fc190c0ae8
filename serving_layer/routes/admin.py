"""The admin routes (admin key required): a video's raw events and refusals, one event's verdict,
the raw files in quarantine."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query

from counting.settings import Settings
from serving_layer.admin import (
    event_verdict,
    is_admin,
    logged_event,
    quarantine_list,
    quarantined_events,
    raw_events,
    video_explanations,
)
from serving_layer.routes.params import EventIdPath, VideoIdPath
from serving_layer.schemas import ErrorAnswer, error_answer
from serving_layer.stats import StatsReader


def admin_router(settings: Settings, reader: StatsReader) -> APIRouter:
    """The video's raw events and refusals, and one event's verdict, behind the admin key."""
    router = APIRouter()

    @router.get("/v1/admin/videos/{video_id}/raw")
    async def admin_raw(
        video_id: VideoIdPath,
        limit: Annotated[int, Query(ge=0, le=1_000)] = 50,
        x_admin_key: Annotated[str | None, Header()] = None,
    ) -> Any:
        """The video's events in the raw log and its refused views by reason (admin key required)."""
        if not is_admin(x_admin_key, settings.admin_key):
            return error_answer(401, "x-admin-key", "missing or wrong admin key")
        raw = await asyncio.to_thread(raw_events, settings.raw_dir, video_id, limit)
        counts = await reader.stats(video_id)
        baseline = reader.baselines.get()
        explained = await asyncio.to_thread(video_explanations, settings.batch_dir, baseline, video_id, limit)
        held = await asyncio.to_thread(quarantined_events, settings.quarantine_dir, video_id)
        answer = {
            "video_id": video_id,
            "rejected": counts["rejected"],
            "flagged": counts["flagged"],
            **explained,
            **raw,
        }
        return {**answer, "in_quarantine": held}

    @router.get("/v1/admin/quarantine")
    async def admin_quarantine(
        released: Annotated[bool, Query(description="list the released files too")] = False,
        x_admin_key: Annotated[str | None, Header()] = None,
    ) -> Any:
        """The raw files in quarantine: left out of every batch run until released, with the
        operator's reason (`tally batch quarantine`); admin key required."""
        if not is_admin(x_admin_key, settings.admin_key):
            return error_answer(401, "x-admin-key", "missing or wrong admin key")
        files = await asyncio.to_thread(quarantine_list, settings.store_url, released)
        return {"files": files}

    @router.get(
        "/v1/admin/events/{event_id}",
        responses={404: {"model": ErrorAnswer, "description": "the Parquet log does not hold the event"}},
    )
    async def admin_event(event_id: EventIdPath, x_admin_key: Annotated[str | None, Header()] = None) -> Any:
        """Why the served batch run refused, flagged or accepted one logged event: its verdict,
        score and the signals that fired, with the event's first copy (admin key required)."""
        if not is_admin(x_admin_key, settings.admin_key):
            return error_answer(401, "x-admin-key", "missing or wrong admin key")
        event, copies = await asyncio.to_thread(logged_event, settings.raw_dir, event_id)
        if event is None:
            reason = (
                f"{event_id!r} is not in the Parquet log: the archiver writes accepted events there "
                "within a minute or two of the ingest accepting them; check the id, or try again"
            )
            return error_answer(404, "event_id", reason)
        baseline = reader.baselines.get()
        verdict = await asyncio.to_thread(event_verdict, settings.batch_dir, baseline, event)
        return {"event_id": event_id, "copies_in_log": copies, **verdict, "event": event}

    return router
