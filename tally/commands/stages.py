"""The stages of a batch run on stderr as they start and end, with their times: a spinner on the
running stage at a terminal, a line as each starts otherwise (a log file, CI), and a line as each
ends."""

from __future__ import annotations

import time

from rich.console import Console
from rich.status import Status

from batch_layer.progress import Stage


class StageDisplay:
    """A `batch_layer.progress.Progress` that shows the stages on `console` (stderr): call `close`
    when the run ends, whichever way, to stop the spinner."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._status: Status | None = None
        self._started = time.monotonic()

    def __call__(self, report: Stage) -> None:
        if report.seconds is None:
            self._start(report.name)
        else:
            self._end(report)

    def _start(self, name: str) -> None:
        text = f"batch: {name} ..."
        if not self._console.is_terminal:
            self._say(text)
        elif self._status is None:
            self._status = self._console.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def _end(self, report: Stage) -> None:
        self.close()
        outcome = "FAILED after" if report.failed else "done in"
        made = f"  ({report.detail})" if report.detail else ""
        self._say(f"batch: {report.name:<17} {outcome} {report.seconds:6.1f} s{made}")

    def close(self) -> None:
        """Stop the spinner, if one runs."""
        if self._status is not None:
            self._status.stop()
            self._status = None

    def total(self) -> float:
        """The seconds since the display was made (the whole run's)."""
        return time.monotonic() - self._started

    def _say(self, text: str) -> None:
        self._console.print(text, markup=False, highlight=False, soft_wrap=True)
