"""Data quality: Great Expectations suites for the raw log and the batch outputs, and the gates
that stop a batch run before bad data reaches a baseline or a payout."""

from __future__ import annotations

from counting.requires import require

require("great_expectations", "batch", __name__)

import quality._gx  # noqa: F401  (first: Great Expectations imported quietly)
from quality.errors import QualityError, UnvalidatedInputs, ValidationFailed
from quality.inputs import require_validated_inputs
from quality.report import SuiteOutcome, ValidationReport
from quality.validate import require_valid, validate_outputs, validate_raw

__all__ = [
    "QualityError",
    "SuiteOutcome",
    "UnvalidatedInputs",
    "ValidationFailed",
    "ValidationReport",
    "require_valid",
    "require_validated_inputs",
    "validate_outputs",
    "validate_raw",
]
