"""Migrations land whole or not at all, on SQLite too (a process killed mid-way leaves no half-built
store that the next start would fail on)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from warehouse import migrate as migrating
from warehouse.migrate import head_revision, migrate


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_migration_that_fails_half_way_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    real_upgrade = command.upgrade

    def upgrade_then_die(config: object, revision: str) -> None:
        real_upgrade(config, revision)  # type: ignore[arg-type]  # every table created...
        raise KeyboardInterrupt("killed before the end of the migration")  # ...then the process dies

    monkeypatch.setattr(migrating.command, "upgrade", upgrade_then_die)
    with pytest.raises(KeyboardInterrupt):
        migrate(url)
    assert _tables(url) == set()

    monkeypatch.setattr(migrating.command, "upgrade", real_upgrade)
    assert migrate(url) == head_revision()  # the next start migrates from nothing
    assert {"videos", "alembic_version"} <= _tables(url)
    assert migrate(url) == head_revision()  # and again: nothing to do
