"""Running a benchmark as its user does: `python -m bench.<name>` from the project root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m bench.<name> ARGS` from the project root, its output captured as text."""
    command = [sys.executable, "-m", f"bench.{name}", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
