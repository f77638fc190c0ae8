"""The live route: a video's counts as a stream of server-sent events."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from serving_layer.live import live_stream
from serving_layer.routes.params import VideoIdPath
from serving_layer.stats import StatsReader


def live_router(reader: StatsReader) -> APIRouter:
    """A video's counts as server-sent events, read through the stats reader."""
    router = APIRouter()

    @router.get("/v1/videos/{video_id}/live")
    async def live(video_id: VideoIdPath, request: Request) -> StreamingResponse:
        """Server-sent events: an `stats` event whenever the counts change."""
        stream = live_stream(lambda: reader.stats(video_id), request.is_disconnected)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    return router
