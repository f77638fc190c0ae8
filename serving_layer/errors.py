"""Errors of the serving layer."""

from __future__ import annotations

from counting.errors import TallyError


class StoreUnavailable(TallyError):
    """Neither the speed store nor a baseline can answer."""


class UnknownCreator(TallyError, LookupError):
    """A creator id with no video in the catalog: the creator routes answer 404 naming it."""

    def __init__(self, creator_id: str) -> None:
        super().__init__(
            f"{creator_id!r} has no video in the catalog: list its creators with 'tally catalog list', "
            "load it with 'tally catalog load'"
        )
        self.creator_id = creator_id
