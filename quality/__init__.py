"""Data quality: Great Expectations suites for the raw log and the batch outputs, and the gates
that stop a batch run before bad data reaches a baseline or a payout."""

from __future__ import annotations

from quality.errors import QualityError, ValidationFailed
from quality.report import SuiteOutcome, ValidationReport
from quality.validate import require_valid, validate_outputs, validate_raw

__all__ = [
    "QualityError",
    "SuiteOutcome",
    "ValidationFailed",
    "ValidationReport",
    "require_valid",
    "validate_outputs",
    "validate_raw",
]
