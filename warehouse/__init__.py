"""The warehouse: the published batch baseline, DuckDB models and the relational store."""

from __future__ import annotations

from counting.requires import require

require("sqlalchemy", "warehouse", __name__)
require("alembic", "warehouse", __name__)

from warehouse.baseline import Baseline, BaselineRow, current_baseline, publish_baseline

__all__ = ["Baseline", "BaselineRow", "current_baseline", "publish_baseline"]
