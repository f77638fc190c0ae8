"""`tally audit payout`: re-derive a ledger figure from the raw log in plain Python (pyarrow and the
oracle, no Spark) and say whether it matches, and what differs when it does not."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from batch_layer.payouts import day_of_date, payout_amount
from batch_layer.rules_used import run_bot_filter
from counting import oracle, rules
from counting.batchpaths import payout_events_path
from counting.bots import BotFilter
from counting.event import Event
from counting.logschema import EVENT_COLUMNS, PARTITION_COLUMNS
from counting.settings import Settings
from warehouse.errors import PayoutNotFound, StoreError
from warehouse.store import (
    CompactedFile,
    LedgerRow,
    QuarantinedFile,
    RunRecord,
    catalog,
    compacted_files,
    get_run,
    latest_payout,
    open_store,
    quarantined_files,
)
from warehouse.tables import file_digest, files_digest, ids_digest

_SHOWN = 5  # ids or files named in one line before "..."


@dataclass(frozen=True)
class Derived:
    """What the log says today: the counted ids of the creator's monetized views of the day,
    their videos, and the files that hold a view of that day."""

    ids: frozenset[str]
    videos: dict[str, str]  # counted event id -> video id
    files: frozenset[str]


@dataclass(frozen=True)
class AuditReport:
    """The ledger's figure beside the one re-derived from the log, and what differs in plain words."""

    creator_id: str
    day: date
    run_id: str
    cutoff: int
    rules_version: str
    currency: str
    ledger_views: int
    log_views: int
    ledger_amount: Decimal
    log_amount: Decimal
    ledger_digest: str
    log_digest: str
    differences: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    input_files: dict[str, str] = field(default_factory=dict)  # the ledger row's, path -> sha256
    current: bool = True  # the row of the latest published run (the one the read API answers)

    @property
    def matches(self) -> bool:
        return not self.differences

    def render(self, files: bool = False) -> str:
        """The report in plain text; `files`: every input file of the row with its sha256."""
        cutoff = datetime.fromtimestamp(self.cutoff / 1000, tz=UTC).isoformat(timespec="seconds")
        which = "current row" if self.current else "an earlier run's row (not the current one)"
        lines = [
            f"payout of creator {self.creator_id} on {self.day.isoformat()} (UTC day of event time)",
            f"  run {self.run_id} ({which}), cutoff {self.cutoff} ({cutoff}), rules {self.rules_version}",
            f"  input files: {len(self.input_files)}, list digest {files_digest(self.input_files)}",
            f"  {'':8}{'ledger':>20}  {'raw log':>20}",
            f"  {'views':8}{self.ledger_views:>20}  {self.log_views:>20}",
            f"  {'amount':8}{self.ledger_amount:>20}  {self.log_amount:>20}  {self.currency}",
            f"  {'ids':8}{self.ledger_digest[:16]:>20}  {self.log_digest[:16]:>20}  (sha256 digest)",
        ]
        if self.matches:
            lines.append("MATCH: the ledger figure re-derives exactly from the raw log")
        else:
            lines.append(f"MISMATCH: {len(self.differences)} difference(s)")
            lines += [f"  - {d}" for d in self.differences]
        lines += [f"  note: {n}" for n in self.notes]
        if files:
            lines.append("input files (path, sha256):")
            lines += [f"  {path}  {sha}" for path, sha in sorted(self.input_files.items())]
        return "\n".join(lines)


def audit_payout(settings: Settings, creator_id: str, day: date, run_id: str | None = None) -> AuditReport:
    """Check the current ledger row of (creator, day) (the latest published run's; or run
    `run_id`'s) against the raw log read afresh.

    Reads the files under `settings.raw_dir` ingested before the run's cutoff (any file, so files
    added or removed since the run show), counts with `counting.oracle`, compares views, amount,
    the counted-ids digest and each input file's sha256. The catalog is the store's current one;
    the bot rules are the ones the run kept (`rules_used`).
    """
    with open_store(settings.store_url) as store:
        row = latest_payout(store, creator_id, day, run_id)
        current = latest_payout(store, creator_id, day)
        if row is None:
            of_run = f" of run {run_id!r}" if run_id is not None else ""
            raise PayoutNotFound(
                f"no payout{of_run} in the ledger for creator {creator_id!r} on {day.isoformat()}: "
                "check the creator id, the day (UTC day of event time) and the run, or run the batch "
                "with payouts first ('tally catalog load', then 'tally batch run')"
            )
        run = get_run(store, row.run_id)
        videos = catalog(store)
        held = quarantined_files(store)
        moved = compacted_files(store)
    if run is None:  # the ledger's foreign key makes this a damaged store
        raise StoreError(f"ledger row {row.id} names run {row.run_id!r}, which batch_runs does not hold")
    cutoff = run.cutoff
    paid = {v.video_id for v in videos.values() if v.creator_id == creator_id and v.monetized}
    bot_filter = run_bot_filter(settings, row.run_id)
    derived = derive(settings.raw_dir, cutoff, day, paid, bot_filter)
    log_digest = ids_digest(derived.ids)
    log_amount = payout_amount(len(derived.ids), row.rate_per_1000)
    differences = _file_differences(settings.raw_dir, row.input_files, derived.files, moved)
    if len(derived.ids) != row.monetizable_views:
        differences.append(f"views {row.monetizable_views} != {len(derived.ids)} (ledger != raw log)")
    if log_amount != row.amount:
        differences.append(f"amount {row.amount} != {log_amount} {row.currency} (ledger != raw log)")
    if log_digest != row.counted_ids_digest:
        differences.append(_id_differences(settings, row, derived))
    return AuditReport(
        creator_id=creator_id,
        day=day,
        run_id=row.run_id,
        cutoff=cutoff,
        rules_version=row.rules_version,
        currency=row.currency,
        ledger_views=row.monetizable_views,
        log_views=len(derived.ids),
        ledger_amount=row.amount,
        log_amount=log_amount,
        ledger_digest=row.counted_ids_digest,
        log_digest=log_digest,
        differences=tuple(differences),
        notes=(*_notes(settings, row, bot_filter), *_quarantine_notes(run, row, held)),
        input_files=dict(row.input_files),
        current=current is not None and current.id == row.id,
    )


def _notes(settings: Settings, row: LedgerRow, bot_filter: BotFilter) -> Iterator[str]:
    if row.rules_version != bot_filter.version:
        yield f"the ledger used rules {row.rules_version}, this audit counts with rules {bot_filter.version}"
    if row.rate_per_1000 != settings.payout_rate_per_1000_views:
        yield (
            f"the ledger's rate {row.rate_per_1000} per 1000 views differs from the current setting "
            f"{settings.payout_rate_per_1000_views}; the audit uses the ledger's"
        )


def _quarantine_notes(run: RunRecord, row: LedgerRow, held: Mapping[str, QuarantinedFile]) -> Iterator[str]:
    """The raw files the run left out (in quarantine then), and the row's files quarantined since."""
    for path, reason in sorted((run.excluded_files or {}).items()):
        now = "still in quarantine" if path in held else "released since: the next run counts it"
        yield f"run {run.run_id} left out {path}, in quarantine then ({reason}); {now}"
    for path in sorted(set(row.input_files) & set(held)):
        yield f"{path} went into quarantine after the run ({held[path].reason}): the log read here lacks it"


def _file_differences(
    raw_dir: Path, recorded: dict[str, str], found: frozenset[str], moved: Mapping[str, CompactedFile]
) -> list[str]:
    """How the row's input files differ from the log's files that hold views of the day now. A file
    compacted since the run is followed into the file that holds its rows (`moved`), which must be
    the one the compaction wrote."""
    differences = []
    digests: dict[str, str] = {}
    standing_in: set[str] = set()  # files that hold the rows of recorded files compacted since
    for path, sha in sorted(recorded.items()):
        label, now_path, now_sha = f"file {path}", path, sha
        if not (raw_dir / path).is_file() and path in moved:
            record = moved[path]
            if record.sha256 != sha:
                differences.append(
                    f"file {path} changed before it was compacted into {record.into_path} "
                    f"(sha256 {sha[:12]}... != {record.sha256[:12]}...)"
                )
                continue
            label = f"file {path} (compacted into {record.into_path})"
            now_path, now_sha = record.into_path, record.into_sha256
            standing_in.add(now_path)
        full = raw_dir / now_path
        if not full.is_file():
            differences.append(f"{label} is missing (it held views of the day at the run)")
            continue
        now = digests.get(now_path) or digests.setdefault(now_path, file_digest(full))
        if now != now_sha:
            differences.append(f"{label} changed (sha256 {now_sha[:12]}... != {now[:12]}...)")
        elif now_path not in found:
            differences.append(f"{label} no longer holds a view of the day")
    for path in sorted(found - set(recorded) - standing_in):
        differences.append(f"file {path} holds views of the day but was not an input of the run")
    return differences


def _named(ids: Iterable[str]) -> str:
    listed = sorted(ids)
    more = ", ..." if len(listed) > _SHOWN else ""
    return f" ({', '.join(listed[:_SHOWN])}{more})" if listed else ""


def _id_differences(settings: Settings, row: LedgerRow, derived: Derived) -> str:
    """The counted ids that differ, named from the run's id list when the ledger digest vouches for it."""
    recorded = _recorded_ids(settings, row)
    if recorded is None:
        return (
            f"counted event ids differ (sha256 {row.counted_ids_digest[:12]}... != "
            f"{ids_digest(derived.ids)[:12]}...); the run's id list is missing or altered, so they "
            "cannot be named"
        )
    missing = set(recorded) - derived.ids
    extra = derived.ids - set(recorded)
    by_video = Counter(recorded[i] for i in missing) + Counter(derived.videos[i] for i in extra)
    videos = ", ".join(f"{v}: {n}" for v, n in sorted(by_video.items())[:_SHOWN])
    return (
        f"event ids differ: {len(missing)} missing{_named(missing)}, {len(extra)} extra{_named(extra)}; "
        f"by video {videos}"
    )


def _recorded_ids(settings: Settings, row: LedgerRow) -> dict[str, str] | None:
    """The run's counted ids of (creator, day) -> video, if its id list exists and its digest holds."""
    folder = payout_events_path(settings, row.run_id) / f"date={row.day.isoformat()}"
    if not folder.is_dir():
        return None
    table = pq.read_table(folder, columns=["creator_id", "video_id", "event_id"])
    table = table.filter(pc.equal(table["creator_id"], row.creator_id))
    recorded = dict(zip(table["event_id"].to_pylist(), table["video_id"].to_pylist(), strict=True))
    return recorded if ids_digest(recorded) == row.counted_ids_digest else None


# --- re-deriving the counted views from the raw log ----------------------------------------------


def derive(
    raw_dir: Path, cutoff: int, day: date, videos: set[str], bot_filter: BotFilter | None = None
) -> Derived:
    """The counted views of `videos` with event time on `day`, from the log ingested before `cutoff`,
    judged by the oracle over all of that day's views (bot windows span videos and creators, never
    days) with the rules of `bot_filter`."""
    number = day_of_date(day)
    events, files = day_events(raw_dir, cutoff, day)
    counted = [
        e
        for e in oracle.counted_views(events, cutoff, bot_filter)
        if rules.day_of(e.ts) == number and e.video_id in videos
    ]
    return Derived(
        ids=frozenset(e.event_id for e in counted),
        videos={e.event_id: e.video_id for e in counted},
        files=files,
    )


def day_events(raw_dir: Path, cutoff: int, day: date) -> tuple[list[Event], frozenset[str]]:
    """Every copy of the events with a copy on `day` (event time) in the log ingested before
    `cutoff`, in the batch's order of copies, and the files holding views of that day.

    Two passes: the event ids with a copy of that day, then every copy of those ids (the first copy
    of an id decides, whichever day its copies carry).
    """
    low = day_of_date(day) * rules.DAY_MS
    high = low + rules.DAY_MS
    ids: set[str] = set()
    files: set[str] = set()
    for path, table in _log_files(raw_dir, cutoff, ["event_id", "type", "ts", "ingest_ts"]):
        of_day = table.filter(pc.and_(pc.greater_equal(table["ts"], low), pc.less(table["ts"], high)))
        ids.update(of_day["event_id"].to_pylist())
        if pc.any(pc.equal(of_day["type"], "view")).as_py():
            files.add(path)
    wanted = pa.array(sorted(ids), pa.string())
    columns = [*EVENT_COLUMNS, "kafka_partition", "kafka_offset"]
    rows = []
    for _, table in _log_files(raw_dir, cutoff, columns):
        rows += table.filter(pc.is_in(table["event_id"], value_set=wanted)).to_pylist()
    # The batch breaks ties between copies ingested in the same millisecond by Kafka position.
    rows.sort(key=lambda r: (r["ingest_ts"], r["kafka_partition"] or 0, r["kafka_offset"] or 0))
    return [Event(**{c: r[c] for c in EVENT_COLUMNS}) for r in rows], frozenset(files)


def _log_files(raw_dir: Path, cutoff: int, columns: list[str]) -> Iterator[tuple[str, pa.Table]]:
    """Each raw Parquet file of a partition that can hold rows ingested before `cutoff`, with
    those rows (the batch's `read_log` reads the same), as (path relative to raw_dir, rows)."""
    last = datetime.fromtimestamp((cutoff - 1) / 1000, tz=UTC)
    limit = (last.strftime("%Y-%m-%d"), last.strftime("%H"))
    for path in sorted(raw_dir.rglob("*.parquet")) if raw_dir.is_dir() else []:
        relative = path.relative_to(raw_dir)
        if any(part.startswith((".", "_")) for part in relative.parts):
            continue
        partition = dict(part.split("=", 1) for part in relative.parts[:-1] if "=" in part)
        key = tuple(partition.get(name) or "" for name in PARTITION_COLUMNS)
        if "" in key or key > limit:
            continue
        table = pq.read_table(path, columns=columns, partitioning=None)
        yield relative.as_posix(), table.filter(pc.less(table["ingest_ts"], cutoff))
