"""Errors of the data-quality gate: one base class, and the failed validation that stops a DAG."""

from __future__ import annotations

from typing import TYPE_CHECKING

from counting.errors import TallyError

if TYPE_CHECKING:
    from quality.report import ValidationReport


class QualityError(TallyError):
    """The data-quality gate could not run or refused the data."""


class ValidationFailed(QualityError):
    """A suite found bad data: nothing downstream of it (baseline, payouts) may use this data."""

    def __init__(self, report: ValidationReport) -> None:
        super().__init__(report.summary())
        self.report = report


class UnvalidatedInputs(QualityError):
    """A run read a raw file that is not validated with its current checksum."""


class MissingInputs(QualityError):
    """A raw file that passed validation is gone from the log (and not recorded in quarantine)."""


class QuarantineRefused(QualityError, ValueError):
    """A quarantine or release that cannot be done as asked (no such file, no reason given)."""


class CompactionFailed(QualityError):
    """A compaction found the files of an hour other than their validation recorded them."""
