"""The payout route: a creator's ledger rows per day, with what each is derived from."""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from counting.event import VIDEO_ID_PATTERN
from counting.settings import Settings
from serving_layer.payouts import creator_payouts
from serving_layer.schemas import UNKNOWN_CREATOR, CreatorPayouts, error_answer


def payouts_router(settings: Settings) -> APIRouter:
    """A creator's payouts, read from the store's ledger."""
    router = APIRouter()

    @router.get("/v1/creators/{creator_id}/payouts", response_model=CreatorPayouts, responses=UNKNOWN_CREATOR)
    async def payouts(
        creator_id: Annotated[
            str, Path(pattern=VIDEO_ID_PATTERN, description="the creator id ([A-Za-z0-9_-]{1,64})")
        ],
        since: Annotated[date | None, Query(alias="from", description="first UTC day, YYYY-MM-DD")] = None,
        until: Annotated[date | None, Query(alias="to", description="last UTC day, YYYY-MM-DD")] = None,
        history: Annotated[
            bool, Query(description="every run's rows of each day, each marked current or not")
        ] = False,
    ) -> Any:
        """The creator's payout for each day: the current ledger row (the latest published run's)
        with its views, rate, amount, and the run, rules version, input files (count and digest)
        and counted-id digest that `tally audit payout` re-derives it from; `history=true` answers
        every run's rows, marked `current` or not. A creator of the catalog without payouts yet has
        none (`[]`); a creator with no video in the catalog is 404, as on its stats route."""
        if since is not None and until is not None and until < since:
            return error_answer(422, "to", f"must not be before 'from' (got from={since}, to={until})")
        rows = await asyncio.to_thread(creator_payouts, settings.store_url, creator_id, since, until, history)
        return {"creator_id": creator_id, "history": history, "payouts": rows}

    return router
