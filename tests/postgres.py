"""A fresh database on the machine's PostgreSQL for a test (`TALLY_TEST_POSTGRES_URL` names the
server's admin database), dropped at the end."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
import sqlalchemy as sa

ADMIN_URL = os.environ.get("TALLY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def require_server() -> None:
    """Skip the test, saying why, when the server does not answer."""
    try:
        psycopg.connect(ADMIN_URL, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable at {ADMIN_URL} ({exc}); set TALLY_TEST_POSTGRES_URL")


@contextmanager
def fresh_database(prefix: str) -> Iterator[str]:
    """Create a database named `prefix` and a random suffix; yield its SQLAlchemy URL (psycopg 3)."""
    require_server()
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'create database "{name}"')
        try:
            yield (
                sa.make_url(ADMIN_URL)
                .set(drivername="postgresql+psycopg", database=name)
                .render_as_string(hide_password=False)
            )
        finally:
            admin.execute(f'drop database if exists "{name}" with (force)')
