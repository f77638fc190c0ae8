"""Data-quality fixtures: a Great Expectations file context per test, and log rows to break."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

# Great Expectations 1.24 imports the deprecated `sre_constants` and `sre_parse` modules; import it
# once here, quietly, so that the test modules can import `quality` at collection.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "module 'sre_(constants|parse)' is deprecated", DeprecationWarning)
    import great_expectations  # noqa: F401

from quality.context import open_context


@pytest.fixture
def gx_context(tmp_path: Path) -> Any:
    """A fresh file context under the test's own quality directory."""
    return open_context(tmp_path / "quality")
