"""The one version string of Tally: the installed package's (pyproject.toml `version`)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("tally")
except PackageNotFoundError:  # run from a checkout that was never installed
    VERSION = "0+unknown"
