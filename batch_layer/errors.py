"""Errors of the batch layer: one base class, small subclasses that say what to do."""

from __future__ import annotations

from counting.errors import TallyError


class BatchError(TallyError):
    """A batch run could not run or could not publish its baseline."""


class CutoffNotOnBucketEdge(BatchError, ValueError):
    """The cutoff is not a multiple of the bucket width, so the speed layer cannot resume from it."""


class CutoffNotClosed(BatchError):
    """The archiver has not yet written every event ingested before the cutoff."""


class WatermarkUnavailable(BatchError):
    """The archiver watermark cannot be read (Redis down, key missing or not an integer)."""


class InvalidRunId(BatchError, ValueError):
    """A run id that cannot name the run's output directories."""


class CutoffBehindServed(BatchError):
    """Publishing the run would move serving back: its cutoff is older than the served baseline's."""


class NothingRead(BatchError):
    """The run read no event: publishing it would serve an empty baseline."""


class PayoutsUnavailable(BatchError, LookupError):
    """The run's payouts cannot be written: it was not published, or its payouts were not computed."""
