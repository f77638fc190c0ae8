"""The extra guard: a part whose third-party modules are missing names them and the pip command."""

from __future__ import annotations

import importlib
import sys

import pytest

from counting.requires import require


def test_a_missing_module_names_itself_and_the_command_that_installs_it() -> None:
    with pytest.raises(ModuleNotFoundError) as caught:
        require("tally_no_such_module", "batch", "batch_layer")
    assert str(caught.value) == (
        "batch_layer needs tally_no_such_module, which is not installed: pip install 'tally[batch]' "
        "(in a checkout: pip install -e '.[batch]')"
    )
    assert caught.value.name == "tally_no_such_module"


def test_a_blocked_module_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "msgspec", None)
    with pytest.raises(ImportError, match=r"^ingest needs msgspec, .*pip install 'tally\[ingest\]'"):
        require("msgspec", "ingest", "ingest")


def test_a_present_module_passes_without_importing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "this", raising=False)  # `import this` prints the Zen of Python
    require("this", "ingest", "ingest")
    assert "this" not in sys.modules


@pytest.mark.parametrize(
    ("part", "module", "extra"),
    [
        ("ingest", "fastapi", "ingest"),
        ("ingest", "aiokafka", "ingest"),
        ("speed_layer", "faust", "speed"),
        ("batch_layer", "pyspark", "batch"),
        ("serving_layer", "fastapi", "serving"),
        ("serving_layer", "sqlalchemy", "serving"),
        ("warehouse", "sqlalchemy", "warehouse"),
        ("warehouse", "alembic", "warehouse"),
        ("quality", "great_expectations", "batch"),
    ],
)
def test_a_part_without_its_extra_fails_with_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, part: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.delitem(sys.modules, part, raising=False)
    with pytest.raises(ModuleNotFoundError) as caught:
        importlib.import_module(part)
    assert str(caught.value) == (
        f"{part} needs {module}, which is not installed: pip install 'tally[{extra}]' "
        f"(in a checkout: pip install -e '.[{extra}]')"
    )
