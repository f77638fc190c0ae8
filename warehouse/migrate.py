"""Bring the relational store's schema to the latest Alembic revision, from code (no alembic.ini)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from warehouse.connection import Store, open_store
from warehouse.errors import StoreUnavailable

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config() -> Config:
    """An Alembic config whose script location is this package's migrations, whatever the cwd."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(store: Store) -> str | None:
    with store.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def migrate(url: str, revision: str = "head") -> str | None:
    """Upgrade the store at `url` to `revision` (default: the latest); returns the revision now in place."""
    store = open_store(url)
    config = alembic_config()
    engine = _transactional(store.engine)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
        return current_revision(store)
    except sa.exc.OperationalError as exc:
        safe = store.engine.url.render_as_string(hide_password=True)
        raise StoreUnavailable(
            f"cannot migrate the relational store at {safe} ({exc.orig}): check that the database "
            "server is up and the database exists, or set TALLY_DATABASE_URL"
        ) from exc
    finally:
        if engine is not store.engine:
            engine.dispose()
        store.close()


def _transactional(engine: sa.Engine) -> sa.Engine:
    """An engine whose transactions hold DDL too. PostgreSQL's do; Python's sqlite3 commits before
    each DDL statement by itself, so a process killed in the middle of a migration left a SQLite
    store half built (tables there, no revision stamped: the next start failed on "table already
    exists"). For SQLite: the driver's own transaction handling off, one BEGIN IMMEDIATE per
    transaction (SQLAlchemy's recipe for pysqlite), so a migration lands whole or not at all."""
    if engine.dialect.name != "sqlite":
        return engine
    migrating = sa.create_engine(engine.url)

    @sa.event.listens_for(migrating, "connect")
    def _no_implicit_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(migrating, "begin")
    def _begin(connection: sa.Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return migrating
