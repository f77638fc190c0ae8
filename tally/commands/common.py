"""What every `tally` command shares: the console, the settings of the options, the data directory
option and the one-line error."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import Annotated, ParamSpec, Protocol, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from counting.errors import TallyError
from counting.settings import Settings

console = Console()
P = ParamSpec("P")
R = TypeVar("R")

DataDir = Annotated[Path | None, typer.Option(help="data directory (default: TALLY_DATA_DIR or ./data)")]


class Named(Protocol):
    name: str


def clear_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Print a Tally error as one line saying what to do, and exit with status 2."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except TallyError as exc:
            console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
            raise typer.Exit(2) from None
        except ValidationError as exc:  # a TALLY_* setting the platform cannot run with
            for error in exc.errors():
                name = "TALLY_" + "_".join(str(part) for part in error["loc"]).upper()
                console.print(f"[red]error:[/red] {escape(name)}: {escape(error['msg'])}", soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def settings_of(data_dir: Path | None = None, **overrides: object) -> Settings:
    """The settings of the environment and the options; the secrets left unset are the local
    stack's, from `<data dir>/run/secrets.json` (created on first use)."""
    from tally.secrets import with_local_secrets

    updates = {k: v for k, v in overrides.items() if v is not None}
    if data_dir is not None:
        updates["data_dir"] = data_dir
    return with_local_secrets(Settings(**updates))  # type: ignore[arg-type]


def print_json(value: object) -> None:
    """Print `value` as JSON, its times in ISO 8601 (`2026-11-28T00:00:00+00:00`)."""
    console.print_json(json.dumps(value, default=_plain))


def _plain(value: object) -> str:
    return value.isoformat() if isinstance(value, date) else str(value)


def say(text: str) -> None:
    """Print `text` as it is: no markup, no highlighting, no wrapping."""
    console.print(text, soft_wrap=True, markup=False, highlight=False)


def say_stopped(stopped: Sequence[Named], exited: Sequence[Named], nothing: str) -> None:
    """What a `down` command did: the processes it stopped, those already gone, or `nothing`."""
    if not stopped and not exited:
        say(nothing)
    if stopped:
        say(f"stopped {', '.join(p.name for p in stopped)}")
    if exited:
        say(f"already exited: {', '.join(p.name for p in exited)}")
