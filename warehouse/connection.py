"""The relational store's connection: open it (`open_store`), run a transaction that reports what
failed (`transaction`), upsert rows (`upsert`) and read datetimes back in UTC (`as_utc`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from warehouse.errors import StoreError, StoreUnavailable


@dataclass(frozen=True)
class Store:
    """An open relational store: its engine (a connection pool) and the URL it was opened with."""

    engine: Engine

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(url: str, echo: bool = False) -> Store:
    """Open the store at a SQLAlchemy URL (`sqlite:///...`, `postgresql+psycopg://...`)."""
    try:
        engine = sa.create_engine(url, echo=echo, pool_pre_ping=True)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise StoreError(f"cannot open the relational store at {_safe(url)}: {exc}") from exc
    if engine.dialect.name == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        database = engine.url.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)  # the data directory may be new
    return Store(engine)


def _sqlite_pragmas(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _safe(url: str) -> str:
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparseable URL>"


@contextmanager
def transaction(store: Store) -> Iterator[Connection]:
    """A connection in one transaction, its failures raised as `StoreError` (a refused write) or
    `StoreUnavailable` (the database failed)."""
    try:
        with store.engine.begin() as connection:
            yield connection
    except sa.exc.IntegrityError as exc:
        raise StoreError(f"the relational store refused the write: {exc.orig}") from exc
    except sa.exc.OperationalError as exc:
        url = store.engine.url.render_as_string(hide_password=True)
        raise StoreUnavailable(
            f"the relational store at {url} failed ({exc.orig}): check that the database is up and "
            "migrated ('tally' migrates it before use), or set TALLY_DATABASE_URL"
        ) from exc


def upsert(connection: Connection, table: sa.Table, rows: list[dict[str, Any]], key: Sequence[str]) -> None:
    """Insert rows, updating every non-key column of rows whose key exists (SQLite, PostgreSQL)."""
    if not rows:
        return
    name = connection.dialect.name
    if name == "postgresql":
        pg = postgresql.insert(table)
        pg_updates = {c.name: pg.excluded[c.name] for c in table.columns if c.name not in key}
        connection.execute(pg.on_conflict_do_update(index_elements=list(key), set_=pg_updates), rows)
    elif name == "sqlite":
        lite = sqlite.insert(table)
        lite_updates = {c.name: lite.excluded[c.name] for c in table.columns if c.name not in key}
        connection.execute(lite.on_conflict_do_update(index_elements=list(key), set_=lite_updates), rows)
    else:
        raise StoreError(f"the relational store supports SQLite and PostgreSQL (got {name!r})")


def as_utc(moment: datetime) -> datetime:
    """Datetimes come back naive from SQLite; the store only ever writes UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
