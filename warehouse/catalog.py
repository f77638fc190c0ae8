"""The video catalog in the store: each video's creator, duration and whether it is monetized."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from counting.catalog import CatalogRow
from warehouse.connection import Store, transaction, upsert
from warehouse.tables import videos


def upsert_catalog(store: Store, rows: Iterable[CatalogRow]) -> int:
    """Insert or update videos (creator, duration, monetized); returns how many rows were given."""
    records = [row._asdict() for row in rows]
    with transaction(store) as connection:
        for start in range(0, len(records), 5_000):
            upsert(connection, videos, records[start : start + 5_000], ("video_id",))
    return len(records)


def catalog(store: Store) -> dict[str, CatalogRow]:
    """Every video of the catalog by id."""
    with transaction(store) as connection:
        result = connection.execute(sa.select(videos).order_by(videos.c.video_id))
        return {
            r.video_id: CatalogRow(r.video_id, r.creator_id, float(r.duration_secs), bool(r.monetized))
            for r in result
        }


def creator_videos(store: Store, creator_id: str) -> list[str]:
    """The ids of a creator's videos in the catalog, in id order."""
    with transaction(store) as connection:
        query = (
            sa.select(videos.c.video_id).where(videos.c.creator_id == creator_id).order_by(videos.c.video_id)
        )
        return [row.video_id for row in connection.execute(query)]


def creators(store: Store) -> dict[str, list[CatalogRow]]:
    """Every creator of the catalog with its videos, both in id order; empty while no catalog was
    loaded (the store not even migrated)."""
    with transaction(store) as connection:
        if not sa.inspect(connection).has_table(videos.name):
            return {}
        query = sa.select(videos).order_by(videos.c.creator_id, videos.c.video_id)
        found: dict[str, list[CatalogRow]] = {}
        for r in connection.execute(query):
            row = CatalogRow(r.video_id, r.creator_id, float(r.duration_secs), bool(r.monetized))
            found.setdefault(row.creator_id, []).append(row)
        return found
