"""What a validation found: success, the failed expectations in plain words, where the data docs are."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class SuiteOutcome:
    """One suite run over one frame: its name, rows checked, failures in plain words, its docs page."""

    suite: str
    rows: int
    failures: tuple[str, ...] = ()
    docs_page: Path | None = None
    # The index values (e.g. the file) of the failing rows shown as examples, each once.
    failing: tuple[str, ...] = ()

    @property
    def success(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class ValidationReport:
    """The outcome of one gate (the raw log of an interval, or one batch run's outputs)."""

    what: str
    outcomes: tuple[SuiteOutcome, ...] = ()
    notes: tuple[str, ...] = ()
    docs_index: Path | None = None
    files: tuple[str, ...] = field(default=())
    # What was checked, in words, for the verdict line (default: "over <rows checked> rows").
    scope: str | None = None

    @property
    def success(self) -> bool:
        return all(outcome.success for outcome in self.outcomes)

    @property
    def failures(self) -> tuple[str, ...]:
        return tuple(f"[{o.suite}] {failure}" for o in self.outcomes for failure in o.failures)

    @property
    def failing(self) -> tuple[str, ...]:
        """The index values (e.g. files) of the failing rows shown as examples, each once."""
        return tuple(dict.fromkeys(key for o in self.outcomes for key in o.failing))

    @property
    def docs_pages(self) -> tuple[Path, ...]:
        return tuple(o.docs_page for o in self.outcomes if o.docs_page is not None)

    def summary(self) -> str:
        """A few lines for a log or an exception: verdict, each failure, where to read more."""
        rows = sum(o.rows for o in self.outcomes)
        verdict = "passed" if self.success else f"FAILED ({len(self.failures)} expectations)"
        scope = f"; {self.scope}" if self.scope else f" over {rows} rows"
        lines = [f"validation of {self.what}: {verdict}{scope}"]
        lines += [f"  - {failure}" for failure in self.failures]
        lines += [f"  note: {note}" for note in self.notes]
        for page in self.docs_pages:
            lines.append(f"  data docs: {page}")
        if self.docs_index is not None:
            lines.append(f"  all validations: {self.docs_index}")
        return "\n".join(lines)
