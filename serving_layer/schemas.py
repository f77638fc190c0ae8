"""Models of the serving API's error answers, for its OpenAPI description."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field
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


class RegionState(BaseModel):
    """A region whose counts this one serves: itself (`local`), or a peer with the age of the
    components read from it (null: never read to their end) and the replicator's error."""

    local: bool
    age_ms: int | None
    error: str | None = None


class StatsAnswer(BaseModel):
    """A video's served counts: the batch baseline as of `batch_cutoff` plus the speed layer's buckets
    from it on (`serving_layer.merge`), each with a readable form; the refused views by reason; the
    served run; `approx` with the `degraded` reasons when a part may be missing or estimated."""

    video_id: str
    views: int
    likes: int
    dislikes: int
    unique_viewers: int
    watching_now: int
    views_display: str
    likes_display: str
    dislikes_display: str
    unique_viewers_display: str
    rejected: dict[str, int]
    flagged: int = Field(
        description="counted views whose bot score is in the rules' soft band (counted, flagged for "
        "review): the baseline's, then the speed layer's from the cutoff on"
    )
    as_of: int
    batch_cutoff: int | None
    batch_run_id: str | None
    rules_version: str
    approx: bool
    corrected_by_batch: int | None = Field(
        description="views the served batch took off the speed layer's count of the buckets before "
        "its cutoff (its views there less the baseline's; negative: it added views); null when not "
        "known: no baseline, or the speed buckets before the cutoff expired or were lost"
    )
    degraded: list[str]
    regions: dict[str, RegionState] | None = Field(
        default=None, description="with several regions: each region whose counts are served here"
    )
    user_liked: bool | None = Field(default=None, description="with `user_id`: null when unreadable")
    user_disliked: bool | None = Field(default=None, description="with `user_id`: null when unreadable")


class Scope(BaseModel):
    """What a figure of an answer counts, so that a window does not read as a total: `source`
    `speed` (the speed layer's buckets as it counted them, before any batch corrects them: a bot
    burst the batch later refuses is in them) or `merged` (the batch baseline plus the speed
    buckets from its cutoff, as the stats route answers); `window_buckets`: the recent speed
    buckets summed (null: all time); `text`: the same in words."""

    source: Literal["speed", "merged"]
    window_buckets: int | None
    text: str


class TrendingVideo(BaseModel):
    """A video of a trending answer: its counted views in the window; by velocity also its views a
    minute in the window and in the baseline before it, and the rise (`counting.trends`)."""

    video_id: str
    views: int
    views_per_minute: float | None = None
    baseline_per_minute: float | None = None
    rise: float | None = None


class TrendingAnswer(BaseModel):
    """Videos by their counted views (or velocity) over the last `window_buckets` speed buckets:
    `scope` says so (the views are the window's, not the videos' totals)."""

    by: str
    window_buckets: int
    baseline_buckets: int | None = None
    bucket_ms: int
    as_of: int
    scope: Scope
    videos: list[TrendingVideo]


class RankAnswer(BaseModel):
    """A video's place by counted views over the last `window_buckets` speed buckets: `rank` from 1
    (ties by video id), null when it has no views there; `of`: the videos with views there."""

    video_id: str
    window_buckets: int
    bucket_ms: int
    as_of: int
    scope: Scope
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


class TopVideo(BaseModel):
    """A video of the overview's top list: `views`, its total as the stats route serves it (baseline
    + speed buckets from the cutoff), and `window_views`, the speed layer's counted views over the
    window, which the list is ordered by."""

    video_id: str
    views: int
    window_views: int


class OverviewScopes(BaseModel):
    """What each part of the overview counts (`Scope`): `counts` (the events, views, rates and
    `points`), `bot_share`, `top` and `rising`."""

    counts: Scope
    bot_share: Scope
    top: Scope
    rising: Scope


class OverviewAnswer(BaseModel):
    """The platform over the last `window_buckets` speed buckets, the current one counted up to
    `as_of`: `window_secs` from `from_ms` (the first bucket's start) to `as_of` inclusive; the rates
    are the window's counts over those seconds. Every figure but the top list's `views` is the
    speed layer's over the window, not corrected by a batch: `scopes` says so for each part."""

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
    top: list[TopVideo]
    rising: list[TrendingVideo]
    milestones: list[MilestoneAnswer]  # the last recorded, newest first
    scopes: OverviewScopes
    degraded: list[str]
