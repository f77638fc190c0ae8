"""Great Expectations, imported once without its own import-time noise: GE 1.24 imports the
deprecated `sre_constants` and `sre_parse` modules (a warning that is GE's, not ours)."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "module 'sre_(constants|parse)' is deprecated", DeprecationWarning)
    import great_expectations  # noqa: F401
