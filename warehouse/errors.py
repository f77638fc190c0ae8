"""Errors of the warehouse package."""

from __future__ import annotations

from counting.errors import TallyError


class BaselineError(TallyError):
    """A baseline could not be published or read."""


class StoreError(TallyError):
    """The relational store could not be opened, migrated or written."""


class StoreUnavailable(StoreError):
    """The relational store's database cannot be reached."""


class PayoutNotFound(StoreError, LookupError):
    """The ledger holds no payout for the asked creator and day."""


class ModelError(TallyError, ValueError):
    """A warehouse model file cannot be loaded, ordered or rendered."""


class WarehouseBuildError(TallyError):
    """The warehouse file could not be built; the previous file, if any, is left as it was."""
