"""`tally rules check FILE`: check a bot rules file, say how it differs from the rules in use, and
count one day of the log with both (a dry run: nothing is written)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from batch_layer.audit import day_events
from batch_layer.payouts import date_of_day, day_of_date
from counting import oracle, rules
from counting.botrules import RulesError, parse_rules
from counting.bots import BotFilter, filter_of
from counting.event import MAX_FUTURE_MS, Event
from counting.settings import Settings

TOP_VIDEOS = 10
MAX_LISTED = 10  # list items a change names one by one; more are counted


@dataclass(frozen=True)
class DayCounts:
    """The views and rejections of one day's views of each video, by one version of the rules."""

    views: dict[str, int]
    rejected: dict[str, dict[str, int]]
    flagged: int = 0  # counted views in the soft band

    def total_views(self) -> int:
        return sum(self.views.values())

    def rejected_by_reason(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for reasons in self.rejected.values():
            for reason, n in reasons.items():
                totals[reason] = totals.get(reason, 0) + n
        return dict(sorted(totals.items()))


@dataclass(frozen=True)
class RulesCheck:
    """A rules file that passed the check, what it changes, and a day counted with both rules."""

    path: Path
    proposed: BotFilter
    in_use: BotFilter
    changes: list[str]
    day: date | None  # None: no day given and the log holds no view
    events: int
    before: DayCounts
    after: DayCounts
    picked: bool = False  # the day was not given: the latest with views in the log

    def render(self) -> str:
        lines = [f"{self.path}: the rules pass the check (version {self.proposed.rules.version})"]
        addresses = self.proposed.rules.addresses
        files = (
            f", with those of {', '.join(addresses.datacenter_files)}" if addresses.datacenter_files else ""
        )
        lines.append(f"data-centre ranges: {len(addresses.datacenter):,}{files}")
        if not self.changes:
            lines.append(
                f"they are the rules in use (version {self.in_use.rules.version}): nothing would change"
            )
            return "\n".join(lines)
        lines.append(f"changes from the rules in use (version {self.in_use.rules.version}):")
        lines += [f"  {change}" for change in self.changes]
        if self.proposed.rules.version == self.in_use.rules.version:
            lines.append(
                f"  warning: the version is still {self.in_use.rules.version!r}: bump it, or counts "
                "made with both rules carry one version"
            )
        if self.day is None:
            lines.append(
                "no dry run: the log holds no view to count (send traffic, or give a day with --day)"
            )
            return "\n".join(lines)
        which = "; the latest day with views in the log, pick another with --day" if self.picked else ""
        lines.append(
            f"dry run on {self.day.isoformat()} (event time, UTC{which}): {self.events:,} events in the log"
        )
        if not self.events:
            lines.append("  the log holds no event of that day: pick another with --day")
            return "\n".join(lines)
        before, after = self.before.total_views(), self.after.total_views()
        lines.append(f"  views counted: {before:,} -> {after:,} ({after - before:+,})")
        lines.append(f"  of them flagged: {self.before.flagged:,} -> {self.after.flagged:,}")
        reasons = sorted(set(self.before.rejected_by_reason()) | set(self.after.rejected_by_reason()))
        old, new = self.before.rejected_by_reason(), self.after.rejected_by_reason()
        for reason in reasons:
            lines.append(f"  rejected as {reason}: {old.get(reason, 0):,} -> {new.get(reason, 0):,}")
        moved = sorted(
            (v for v in set(self.before.views) | set(self.after.views) if self._delta(v)),
            key=lambda v: (-abs(self._delta(v)), v),
        )
        if moved:
            lines.append(
                f"  videos whose views change ({len(moved)}; the {min(len(moved), TOP_VIDEOS)} most):"
            )
            for video in moved[:TOP_VIDEOS]:
                was, now = self.before.views.get(video, 0), self.after.views.get(video, 0)
                lines.append(f"    {video}: {was:,} -> {now:,} ({now - was:+,})")
        else:
            lines.append("  no video's views change on that day")
        return "\n".join(lines)

    def _delta(self, video: str) -> int:
        return self.after.views.get(video, 0) - self.before.views.get(video, 0)


def check_rules(settings: Settings, path: Path, day: date | None = None) -> RulesCheck:
    """Check the rules file at `path`, the command's FILE (raises `RulesError` with the line and the
    reason), compare it with the rules in use (the settings' file, else the shipped ones) and count
    `day` of the settings' log with both (default: the latest day with views in the log)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(
            path,
            0,
            f"cannot be read ({exc.strerror or exc}): check the FILE argument (the rules file to check)",
        ) from None
    proposed = BotFilter(parse_rules(text, path))
    in_use = filter_of(settings.bot_rules_file)
    now_ms = int(time.time() * 1000)
    picked = day is None
    day = day or latest_view_day(settings.raw_dir, now_ms)
    events = [] if day is None else day_events(settings.raw_dir, now_ms, day)[0]
    return RulesCheck(
        path=path,
        proposed=proposed,
        in_use=in_use,
        changes=rule_changes(in_use, proposed),
        day=day,
        events=len(events),
        before=_count_day(events, day, in_use),
        after=_count_day(events, day, proposed),
        picked=picked,
    )


def latest_view_day(raw_dir: Path, before_ms: int) -> date | None:
    """The latest UTC day of event time with a view in the log under `raw_dir` ingested before
    `before_ms`; None when there is none. Reads the newest ingest dates first and stops at one whose
    events cannot be later (an event's time is at most `MAX_FUTURE_MS` past its ingestion)."""
    by_date: dict[str, list[Path]] = {}
    for path in sorted(raw_dir.rglob("*.parquet")) if raw_dir.is_dir() else []:
        parts = path.relative_to(raw_dir).parts
        if any(part.startswith((".", "_")) for part in parts):  # a file still being written
            continue
        ingested = next((p.split("=", 1)[1] for p in parts[:-1] if p.startswith("ingest_date=")), None)
        if ingested:
            by_date.setdefault(ingested, []).append(path)
    latest: int | None = None
    for ingested in sorted(by_date, reverse=True):
        last_ms = (day_of_date(date.fromisoformat(ingested)) + 1) * rules.DAY_MS - 1 + MAX_FUTURE_MS
        if latest is not None and latest >= rules.day_of(last_ms):
            break
        for path in by_date[ingested]:
            table = pq.read_table(path, columns=["type", "ts", "ingest_ts"], partitioning=None)
            views = table.filter(
                pc.and_(pc.equal(table["type"], "view"), pc.less(table["ingest_ts"], before_ms))
            )
            newest = pc.max(views["ts"]).as_py()
            if newest is not None:
                latest = max(latest or 0, rules.day_of(newest))
    return None if latest is None else date_of_day(latest)


def rule_changes(old: BotFilter, new: BotFilter) -> list[str]:
    """Each rule that differs, as `section.key: old -> new` (lists: the items added and removed)."""
    changes = []
    before, after = _flat(old.rules.model_dump()), _flat(new.rules.model_dump())
    for key in sorted(set(before) | set(after)):
        was, now = before.get(key), after.get(key)
        if was == now:
            continue
        if isinstance(was, list) and isinstance(now, list):
            added = [item for item in now if item not in was]
            removed = [item for item in was if item not in now]
            parts = [f"+{item}" for item in added] + [f"-{item}" for item in removed]
            if len(parts) > MAX_LISTED:
                parts = [f"+{len(added)} items", f"-{len(removed)} items"]
            changes.append(f"{key}: {', '.join(parts) if parts else 'reordered'}")
        else:
            changes.append(f"{key}: {was!r} -> {now!r}")
    return changes


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _count_day(events: list[Event], day: date | None, bot_filter: BotFilter) -> DayCounts:
    """The oracle's outcome of each view of `day` among `events`, by the rules of `bot_filter`."""
    if day is None:
        return DayCounts({}, {})
    number = day_of_date(day)
    views: dict[str, int] = {}
    rejected: dict[str, dict[str, int]] = {}
    flagged = 0
    for event, outcome, reason, _, is_flagged in oracle.judged_views(oracle.dedup(events), bot_filter):
        if rules.day_of(event.ts) != number:
            continue
        if outcome == oracle.COUNTED:
            views[event.video_id] = views.get(event.video_id, 0) + 1
            flagged += is_flagged
        elif outcome == oracle.REJECTED and reason is not None:
            of_video = rejected.setdefault(event.video_id, {})
            of_video[reason] = of_video.get(reason, 0) + 1
    return DayCounts(views, rejected, flagged)
