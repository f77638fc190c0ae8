"""The path and query parameters the serving routes share."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from counting.event import VIDEO_ID_PATTERN

VideoIdPath = Annotated[str, Path(pattern=VIDEO_ID_PATTERN, description="the video id")]
EventIdPath = Annotated[str, Path(min_length=1, max_length=64, description="the event id the client sent")]
UserIdQuery = Annotated[str | None, Query(min_length=1, max_length=64, description="the asking user")]
