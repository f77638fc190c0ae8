"""The warehouse's SQL models: load `warehouse/models/*.sql`, order them by what they read, render
their `{{ name }}` variables (SQL text the builder supplies) and quote literals safely."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from warehouse.errors import ModelError

MODELS_DIR = Path(__file__).resolve().parent / "models"

_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_READS = re.compile(r"\b(?:from|join)\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)
_COMMENT = re.compile(r"--[^\n]*")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Model:
    """One model file: its name (the file stem), SQL text, and how it is materialized.

    `stg_*` models are views (they read the Parquet files live); every other model is a table.
    """

    name: str
    sql: str

    @property
    def materialized(self) -> str:
        return "view" if self.name.startswith("stg_") else "table"

    def reads(self, names: Iterable[str]) -> set[str]:
        """The models among `names` this model reads (`from x` / `join x`, comments ignored)."""
        body = _COMMENT.sub("", self.sql)
        wanted = set(names)
        return {match for match in _READS.findall(body) if match in wanted and match != self.name}

    def variables(self) -> set[str]:
        return set(_VARIABLE.findall(_COMMENT.sub("", self.sql)))


def load_models(models_dir: Path = MODELS_DIR) -> list[Model]:
    """Every `*.sql` model under `models_dir`, ordered so that a model comes after those it reads."""
    models = {}
    for path in sorted(models_dir.glob("*.sql")):
        if not _NAME.fullmatch(path.stem):
            raise ModelError(f"model file names must match {_NAME.pattern}.sql (got {path.name!r})")
        models[path.stem] = Model(path.stem, path.read_text())
    return order_models(list(models.values()))


def order_models(models: list[Model]) -> list[Model]:
    """Dependencies first, otherwise by name; raise on a cycle."""
    names = [m.name for m in models]
    needs = {m.name: m.reads(names) for m in models}
    by_name = {m.name: m for m in models}
    ordered: list[Model] = []
    done: set[str] = set()
    while len(ordered) < len(models):
        ready = sorted(n for n in names if n not in done and needs[n] <= done)
        if not ready:
            stuck = sorted(n for n in names if n not in done)
            raise ModelError(f"models read each other in a cycle: {stuck}")
        for name in ready:
            ordered.append(by_name[name])
            done.add(name)
    return ordered


def render(sql: str, variables: Mapping[str, str]) -> str:
    """Replace each `{{ name }}` with `variables[name]`, which is SQL text (quote literals with
    `literal`). Raise on a variable that has no value."""
    missing = sorted(set(_VARIABLE.findall(sql)) - set(variables))
    if missing:
        raise ModelError(f"no value for the SQL variables {missing}")
    return _VARIABLE.sub(lambda match: variables[match.group(1)], sql)


def literal(value: object) -> str:
    """A SQL literal: strings single-quoted with quotes doubled, numbers as written, None as null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ModelError(f"no SQL literal for the number {value!r}")
        return repr(value)
    text = str(value)
    return "'" + text.replace("'", "''") + "'"


def list_literal(values: Iterable[object]) -> str:
    """A SQL list literal `[v1, v2, ...]` of quoted values."""
    return "[" + ", ".join(literal(v) for v in values) + "]"
