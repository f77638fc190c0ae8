"""Alembic migrations of the relational store (run through `warehouse.migrate.migrate`)."""
