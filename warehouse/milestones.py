"""The milestones table: each (video, step) a published baseline reached, written once, and the
state of its announcements (the milestones topic, the webhook): the outbox they are sent from. Its
times are UTC, timezone-aware both ways (written converted to UTC, read back with UTC attached)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import sqlalchemy as sa

from warehouse.connection import Store, as_utc
from warehouse.tables import milestones

OFF, PENDING, DELIVERED, DEAD = "off", "pending", "delivered", "dead"


@dataclass(frozen=True)
class Milestone:
    video_id: str
    step: int
    views: int
    run_id: str
    cutoff: int
    recorded_at: datetime
    announced_at: datetime | None = None
    webhook_state: str = OFF
    webhook_attempts: int = 0
    webhook_next_at: datetime | None = None
    webhook_error: str | None = None


def _of(row: sa.Row[tuple[object, ...]]) -> Milestone:
    """A milestone read back, its times in UTC (SQLite gives them back without an offset)."""
    m = Milestone(**row._asdict())
    return replace(
        m,
        recorded_at=as_utc(m.recorded_at),
        announced_at=_maybe(m.announced_at, as_utc),
        webhook_next_at=_maybe(m.webhook_next_at, as_utc),
    )


def _in_utc(m: Milestone) -> Milestone:
    """A milestone to write, its times converted to UTC."""
    return replace(
        m,
        recorded_at=_utc(m.recorded_at),
        announced_at=_maybe(m.announced_at, _utc),
        webhook_next_at=_maybe(m.webhook_next_at, _utc),
    )


def _utc(moment: datetime) -> datetime:
    """A time to write, in UTC (SQLite keeps no offset: what it stores must be UTC already)."""
    if moment.tzinfo is None:
        raise ValueError(f"a milestone's times must be timezone-aware (got {moment.isoformat()!r})")
    return moment.astimezone(UTC)


def _maybe(moment: datetime | None, convert: Callable[[datetime], datetime]) -> datetime | None:
    return None if moment is None else convert(moment)


def record_milestones(store: Store, found: Iterable[Milestone]) -> list[Milestone]:
    """Insert the milestones not recorded yet (a (video, step) is recorded once, by the first run
    that reached it); returns those inserted."""
    candidates = {(m.video_id, m.step): m for m in found}
    if not candidates:
        return []
    with store.engine.begin() as connection:
        known = {
            (row.video_id, row.step)
            for row in connection.execute(
                sa.select(milestones.c.video_id, milestones.c.step).where(
                    milestones.c.video_id.in_({video for video, _ in candidates})
                )
            )
        }
        new = [_in_utc(m) for key, m in sorted(candidates.items()) if key not in known]
        if new:
            connection.execute(milestones.insert(), [m.__dict__ for m in new])
    return new


def milestones_of(store: Store, video_id: str) -> list[Milestone]:
    """A video's milestones, lowest step first."""
    with store.engine.begin() as connection:
        query = sa.select(milestones).where(milestones.c.video_id == video_id).order_by(milestones.c.step)
        return [_of(row) for row in connection.execute(query)]


def recent_milestones(store: Store, limit: int) -> list[Milestone]:
    """The milestones recorded last, newest first (the higher step first within a run)."""
    with store.engine.begin() as connection:
        query = (
            sa.select(milestones)
            .order_by(milestones.c.recorded_at.desc(), milestones.c.step.desc(), milestones.c.video_id)
            .limit(limit)
        )
        return [_of(row) for row in connection.execute(query)]


def unannounced(store: Store) -> list[Milestone]:
    """The milestones not yet in the topic, oldest first."""
    with store.engine.begin() as connection:
        query = (
            sa.select(milestones)
            .where(milestones.c.announced_at.is_(None))
            .order_by(milestones.c.recorded_at, milestones.c.video_id, milestones.c.step)
        )
        return [_of(row) for row in connection.execute(query)]


def mark_announced(store: Store, keys: Iterable[tuple[str, int]], at: datetime) -> None:
    with store.engine.begin() as connection:
        for video_id, step in keys:
            connection.execute(
                milestones.update()
                .where((milestones.c.video_id == video_id) & (milestones.c.step == step))
                .values(announced_at=_utc(at))
            )


def webhook_due(store: Store, now: datetime) -> list[Milestone]:
    """The milestones whose webhook delivery is pending and due."""
    with store.engine.begin() as connection:
        query = (
            sa.select(milestones)
            .where(milestones.c.webhook_state == PENDING)
            .where(sa.or_(milestones.c.webhook_next_at.is_(None), milestones.c.webhook_next_at <= _utc(now)))
            .order_by(milestones.c.recorded_at, milestones.c.video_id, milestones.c.step)
        )
        return [_of(row) for row in connection.execute(query)]


def set_webhook(
    store: Store, m: Milestone, state: str, attempts: int, next_at: datetime | None, error: str | None
) -> None:
    with store.engine.begin() as connection:
        connection.execute(
            milestones.update()
            .where((milestones.c.video_id == m.video_id) & (milestones.c.step == m.step))
            .values(
                webhook_state=state,
                webhook_attempts=attempts,
                webhook_next_at=_maybe(next_at, _utc),
                webhook_error=None if error is None else error[:500],
            )
        )
