"""The `tally` command line and the local stack launcher: the one package that wires all others."""

from __future__ import annotations
