"""The quality gates and the serving layer import without PySpark: the batch's output paths are in
`counting.batchpaths`, and the readers agree with it on the folders of a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["quality", "quality.validate", "serving_layer", "serving_layer.app"])
def test_the_module_imports_with_pyspark_blocked(module: str) -> None:
    code = (
        "import sys\n"
        "sys.modules['pyspark'] = None  # any import of pyspark fails\n"
        f"import {module}\n"
        "print(sorted(name for name in sys.modules if name.startswith(('pyspark', 'batch_layer'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=_ROOT, capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['pyspark']"  # only the blocked entry: no batch_layer module either
