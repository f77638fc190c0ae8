"""A batch run's stages as they start and end, told to a callback (`Progress`): `tally batch run`
shows them with their times, a scheduled run logs them; the layers themselves print nothing."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage:
    """One report of a stage: it started (`seconds` None), or ended after `seconds`, `failed` when it
    raised; `detail` says what it made ("1,234 events")."""

    name: str
    seconds: float | None = None
    failed: bool = False
    detail: str = ""


Progress = Callable[[Stage], None]


@dataclass
class StageNote:
    """What a running stage made, for its end report: set `detail` inside the `stage` block."""

    detail: str = ""


def log_progress(report: Stage) -> None:
    """The default `Progress`: a log line as each stage starts and ends."""
    if report.seconds is None:
        log.info("batch stage %s started", report.name)
    elif report.failed:
        log.warning("batch stage %s failed after %.1f s", report.name, report.seconds)
    else:
        made = f" ({report.detail})" if report.detail else ""
        log.info("batch stage %s done in %.1f s%s", report.name, report.seconds, made)


@contextmanager
def stage(progress: Progress, name: str) -> Iterator[StageNote]:
    """Report `name` to `progress` as the block starts, then as it ends with its duration (failed,
    if it raises: the exception goes on)."""
    note = StageNote()
    progress(Stage(name))
    started = time.monotonic()
    try:
        yield note
    except BaseException:
        progress(Stage(name, time.monotonic() - started, failed=True))
        raise
    progress(Stage(name, time.monotonic() - started, detail=note.detail))
