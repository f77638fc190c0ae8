"""Alembic environment: migrate the connection `warehouse.migrate` hands over, against the metadata."""

from __future__ import annotations

from alembic import context

from warehouse.tables import metadata

config = context.config


def _run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through warehouse.migrate.migrate(url), which passes a connection")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        # The whole upgrade in the caller's one transaction (warehouse.migrate makes SQLite's hold
        # DDL too): a migration killed half way leaves the store as it was.
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    _run_online()
