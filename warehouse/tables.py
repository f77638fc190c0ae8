"""The relational store's tables (SQLAlchemy Core metadata) and the digests its ledger records."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

AMOUNT_PLACES = 6
_NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=_NAMING)


class ExactDecimal(TypeDecorator[Decimal]):
    """Money as an exact decimal: NUMERIC(20, 6) where the database has it, decimal text on SQLite
    (whose NUMERIC affinity would turn it into a binary float)."""

    impl = sa.Numeric(20, AMOUNT_PLACES, asdecimal=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.String(40))
        return dialect.type_descriptor(sa.Numeric(20, AMOUNT_PLACES, asdecimal=True))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, Decimal):
            raise TypeError(f"money must be a Decimal, never a float (got {value!r})")
        exact = value.quantize(Decimal(1).scaleb(-AMOUNT_PLACES))
        if exact != value:
            raise ValueError(f"money is kept to {AMOUNT_PLACES} decimal places (got {value!r})")
        return str(exact) if dialect.name == "sqlite" else exact

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        return None if value is None else Decimal(str(value))


UtcDateTime = sa.DateTime(timezone=True)

videos = sa.Table(
    "videos",
    metadata,
    sa.Column("video_id", sa.String(64), primary_key=True),
    sa.Column("creator_id", sa.String(64), nullable=False, index=True),
    sa.Column("duration_secs", sa.Float, nullable=False),
    sa.Column("monetized", sa.Boolean, nullable=False),
)

batch_runs = sa.Table(
    "batch_runs",
    metadata,
    sa.Column("run_id", sa.String(128), primary_key=True),
    sa.Column("cutoff", sa.BigInteger, nullable=False),
    sa.Column("rules_version", sa.String(32), nullable=False),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("finished_at", UtcDateTime, nullable=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("events_read", sa.BigInteger, nullable=True),
    sa.Column("input_files", sa.JSON, nullable=False),
    # When the run's baseline was switched in for readers (null: never served, e.g. a backfill).
    sa.Column("published_at", UtcDateTime, nullable=True),
    # Why the operator let this run's views fall below the served baseline's (null: not allowed).
    sa.Column("allow_decrease_reason", sa.Text, nullable=True),
    # Published without the data-quality gates (`tally batch run --skip-validation`).
    sa.Column("skip_validation", sa.Boolean, nullable=False, server_default=sa.false()),
    # Published over a served baseline of a later cutoff, or with no event read (`--force`).
    sa.Column("forced", sa.Boolean, nullable=False, server_default=sa.false()),
    # The raw files in quarantine when the run read the log (path -> reason): left out of it.
    sa.Column("excluded_files", sa.JSON, nullable=True),
    # Per video whose views fell below the served baseline's: the views the rules took back
    # (`quality.corrections`), recorded when the run was published.
    sa.Column("corrections", sa.JSON, nullable=True),
)

# Raw log files an operator took out of the log after they failed the raw-log gate (`tally batch
# quarantine`): moved aside, so no run reads them, until released (moved back and validated again).
quarantined_files = sa.Table(
    "quarantined_files",
    metadata,
    sa.Column("path", sa.String(1024), primary_key=True),  # relative to the raw directory
    sa.Column("sha256", sa.String(64), nullable=False),  # when it was quarantined
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("quarantined_at", UtcDateTime, nullable=False),
    sa.Column("released_at", UtcDateTime, nullable=True),
    sa.Column("release_reason", sa.Text, nullable=True),
)

# The raw log files that passed the raw-log suite, with the checksum they had then: a run reads
# only files recorded here with their current checksum (`quality.inputs`). The stat fields let a
# run skip re-hashing a file that was not rewritten since (any rewrite changes its ctime).
validated_files = sa.Table(
    "validated_files",
    metadata,
    sa.Column("path", sa.String(1024), primary_key=True),  # relative to the raw directory
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("mtime_ns", sa.BigInteger, nullable=False),
    sa.Column("ctime_ns", sa.BigInteger, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("validated_at", UtcDateTime, nullable=False),
    sa.Column("validated_by", sa.String(128), nullable=False),  # the run that validated it
)

# Raw log files merged into a larger one by `tally batch compact` (validated files of a closed hour
# and partition): where each one's rows are now, so the raw gate and the payout audit follow them.
compacted_files = sa.Table(
    "compacted_files",
    metadata,
    sa.Column("path", sa.String(1024), primary_key=True),  # the merged file, relative to the raw directory
    sa.Column("sha256", sa.String(64), nullable=False),  # its checksum as validated
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("into_path", sa.String(1024), nullable=False),  # the file that holds its rows now
    sa.Column("into_sha256", sa.String(64), nullable=False),  # that file's checksum when written
    sa.Column("compacted_at", UtcDateTime, nullable=False),
)

# A video reaching a step of the milestone ladder in a published baseline, once per (video, step):
# the outbox of its announcements (the milestones topic, an optional webhook).
milestones = sa.Table(
    "milestones",
    metadata,
    sa.Column("video_id", sa.String(64), primary_key=True),
    sa.Column("step", sa.BigInteger, primary_key=True),
    sa.Column("views", sa.BigInteger, nullable=False),  # the baseline's views that reached it
    sa.Column("run_id", sa.String(128), nullable=False),
    sa.Column("cutoff", sa.BigInteger, nullable=False),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
    sa.Column("announced_at", UtcDateTime, nullable=True),  # in the topic since
    sa.Column("webhook_state", sa.String(16), nullable=False),  # off, pending, delivered, dead
    sa.Column("webhook_attempts", sa.Integer, nullable=False),
    sa.Column("webhook_next_at", UtcDateTime, nullable=True),
    sa.Column("webhook_error", sa.String(500), nullable=True),
)

payout_ledger = sa.Table(
    "payout_ledger",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("creator_id", sa.String(64), nullable=False),
    sa.Column("day", sa.Date, nullable=False),
    sa.Column("run_id", sa.String(128), sa.ForeignKey("batch_runs.run_id"), nullable=False, index=True),
    sa.Column("rules_version", sa.String(32), nullable=False),
    sa.Column("monetizable_views", sa.BigInteger, nullable=False),
    sa.Column("rate_per_1000", ExactDecimal, nullable=False),
    sa.Column("currency", sa.String(3), nullable=False),
    sa.Column("amount", ExactDecimal, nullable=False),
    sa.Column("input_files", sa.JSON, nullable=False),
    # A summary of `input_files` for readers that do not need the list: `files_digest` of it.
    sa.Column("input_files_count", sa.Integer, nullable=True),
    sa.Column("input_files_digest", sa.String(64), nullable=True),
    sa.Column("counted_ids_digest", sa.String(64), nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.UniqueConstraint("creator_id", "day", "run_id"),
    sa.Index("ix_payout_ledger_creator_day", "creator_id", "day"),
)


def ids_digest(event_ids: Iterable[str]) -> str:
    """The ledger's `counted_ids_digest`: sha256 over the sha256 hex of each id, ids in sorted order.

    Hashing each id first makes the digest unambiguous whatever characters the ids hold.
    """
    outer = hashlib.sha256()
    for event_id in sorted(event_ids):
        outer.update(hashlib.sha256(event_id.encode()).hexdigest().encode())
    return outer.hexdigest()


def files_digest(input_files: Mapping[str, str]) -> str:
    """One sha256 over a list of files and their sha256 (`path<TAB>sha256<LF>`, paths sorted): what
    the read API answers in place of a ledger row's whole `input_files` list."""
    outer = hashlib.sha256()
    for path in sorted(input_files):
        outer.update(f"{path}\t{input_files[path]}\n".encode())
    return outer.hexdigest()


def file_digest(path: Path) -> str:
    """The sha256 hex of a file's bytes, as the ledger's `input_files` records it."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
