"""How a benchmark hands over its figures: written as JSON to its results file, printed as one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def report(result: dict[str, Any], output: Path) -> dict[str, Any]:
    """Write `result` to `output` (indented, its directory made if needed), print it as one line of
    JSON and return it."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return result
