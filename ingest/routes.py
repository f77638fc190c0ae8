"""The single-event routes and the event type each one writes."""

from __future__ import annotations

SINGLE_ROUTES: tuple[tuple[str, str, str], ...] = (
    ("POST", "/v1/videos/{video_id}/view", "view"),
    ("POST", "/v1/videos/{video_id}/like", "like"),
    ("DELETE", "/v1/videos/{video_id}/like", "unlike"),
    ("POST", "/v1/videos/{video_id}/dislike", "dislike"),
    ("DELETE", "/v1/videos/{video_id}/dislike", "undislike"),
    ("POST", "/v1/videos/{video_id}/heartbeat", "heartbeat"),
    ("DELETE", "/v1/videos/{video_id}/heartbeat", "leave"),
)
