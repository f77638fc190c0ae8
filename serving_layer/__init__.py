"""The read API: merges the batch baseline with the speed layer's recent deltas."""

from __future__ import annotations

from counting.requires import require

require("fastapi", "serving", __name__)
require("sqlalchemy", "serving", __name__)

from serving_layer.app import create_app
from serving_layer.merge import Stats, corrected_by_batch, merge

__all__ = ["Stats", "corrected_by_batch", "create_app", "merge"]
