"""Models of the serving API's error answers, for its OpenAPI description."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.responses import JSONResponse

from serving_layer.errors import StoreUnavailable, UnknownCreator


class FieldError(BaseModel):
    """A refused parameter or an unavailable store: its name, the reason, the value given."""

    field: str
    reason: str
    value: Any = None


class ErrorAnswer(BaseModel):
    errors: list[FieldError]


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorAnswer, "description": "missing or wrong admin key"},
    422: {"model": ErrorAnswer, "description": "a parameter is refused: its field and the reason"},
    503: {"model": ErrorAnswer, "description": "no store can answer (Redis down and no baseline)"},
}


def error_answer(status: int, field: str, reason: str) -> JSONResponse:
    """An error answer: the refused field (or the store) and the reason."""
    return JSONResponse(status_code=status, content={"errors": [{"field": field, "reason": reason}]})


def unavailable(exc: StoreUnavailable) -> JSONResponse:
    """The 503 answer when no store can answer."""
    return error_answer(503, "redis", str(exc))


# The creator routes' answer for a creator with no video in the catalog (`unknown_creator`).
UNKNOWN_CREATOR: dict[int | str, dict[str, Any]] = {
    404: {
        "model": ErrorAnswer,
        "description": "the creator has no video in the catalog: field creator_id, the reason, the id",
    },
}


def unknown_creator(exc: UnknownCreator) -> JSONResponse:
    """The 404 answer for a creator with no video in the catalog, naming it."""
    error = {"field": "creator_id", "reason": str(exc), "value": exc.creator_id}
    return JSONResponse(status_code=404, content={"errors": [error]})


class InputFilesSummary(BaseModel):
    """A ledger row's input files, summarised: how many, and one sha256 over the list
    (`warehouse.tables.files_digest`); `tally audit payout --files` lists them."""

    count: int
    digest: str


class PayoutAnswer(BaseModel):
    """One ledger row: a creator's payout for one UTC day as one batch run computed it, with the
    fields `tally audit payout` re-derives it from. `current`: the row of the latest published run."""

    creator_id: str
    day: str
    current: bool
    run_id: str
    run_cutoff: int
    run_published_at: str | None
    rules_version: str
    monetizable_views: int
    rate_per_1000: str
    currency: str
    amount: str
    input_files: InputFilesSummary
    counted_ids_digest: str


class CreatorPayouts(BaseModel):
    creator_id: str
    history: bool
    payouts: list[PayoutAnswer]


class TrendingVideo(BaseModel):
    """A video of a trending answer: its counted views in the window; by velocity also its views a
    minute in the window and in the baseline before it, and the rise (`counting.trends`)."""

    video_id: str
    views: int
    views_per_minute: float | None = None
    baseline_per_minute: float | None = None
    rise: float | None = None


class TrendingAnswer(BaseModel):
    by: str
    window_buckets: int
    baseline_buckets: int | None = None
    bucket_ms: int
    as_of: int
    videos: list[TrendingVideo]


class RankAnswer(BaseModel):
    """A video's place by counted views over the last `window_buckets` speed buckets: `rank` from 1
    (ties by video id), null when it has no views there; `of`: the videos with views there."""

    video_id: str
    window_buckets: int
    bucket_ms: int
    as_of: int
    views: int
    rank: int | None
    of: int


class CreatorStats(BaseModel):
    """A creator's videos together: the sums of their served counts, and `unique_viewers`, the
    viewers of any of them counted once (exact from the batch up to its cutoff, then the speed
    layer's first sightings; `approx` when a video outgrew its exact viewer set)."""

    creator_id: str
    videos: int
    views: int
    likes: int
    dislikes: int
    unique_viewers: int
    views_display: str
    unique_viewers_display: str
    as_of: int
    batch_cutoff: int | None
    approx: bool
    degraded: list[str]


class OverviewPoint(BaseModel):
    """One speed bucket of the whole platform: the events the counter consumed (by ingestion time),
    the views it counted and those it refused."""

    start_ms: int
    events: int
    views: int
    rejected: int


class RefusedReason(BaseModel):
    """The views refused for one reason, and their share of the judged views."""

    reason: str
    views: int
    share: float


class BotShare(BaseModel):
    """The refused views of the window, by reason and as a share of the judged views (counted +
    refused); `share` is null when no view was judged."""

    judged_views: int
    rejected_views: int
    share: float | None
    by_reason: list[RefusedReason]


class PartitionLag(BaseModel):
    """One partition of the events topic: the broker's end offset, the next offset the counter
    counts (its stored offset + 1; 0 before any) and the records between them; the broker's side is
    null when it did not answer."""

    partition: int
    end_offset: int | None
    next_offset: int
    lag: int | None


class ConsumerLag(BaseModel):
    """How far the counter is behind the events topic: per partition, and in all (null when the
    broker did not answer)."""

    topic: str
    total: int | None
    partitions: list[PartitionLag]


class BatchFreshness(BaseModel):
    """The served baseline: its run, cutoff (ms), publish time (ms), and its age, the seconds from
    its cutoff to `as_of`; `stale` once that is longer than the speed buckets' retention."""

    run_id: str
    rules_version: str
    cutoff: int
    published_at: int
    age_secs: float
    stale: bool


class MilestoneAnswer(BaseModel):
    """A step of the milestone ladder a video reached in a published baseline (`counting.milestones`)."""

    milestone_id: str
    video_id: str
    step: int
    step_display: str
    views: int  # the published views that reached it
    run_id: str
    cutoff: int
    recorded_at: str
    announced: bool
    webhook: str  # off, pending, delivered, dead


class OverviewAnswer(BaseModel):
    """The platform over the last `window_buckets` speed buckets, the current one counted up to
    `as_of`: `window_secs` from `from_ms` (the first bucket's start) to `as_of` inclusive; the rates
    are the window's counts over those seconds."""

    window_buckets: int
    bucket_ms: int
    from_ms: int
    as_of: int
    window_secs: float
    events: int
    views: int
    events_per_sec: float
    views_per_sec: float
    points: list[OverviewPoint]
    bot_share: BotShare
    consumer_lag: ConsumerLag
    batch: BatchFreshness | None
    top: list[TrendingVideo]
    rising: list[TrendingVideo]
    milestones: list[MilestoneAnswer]  # the last recorded, newest first
    degraded: list[str]
