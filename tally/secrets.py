"""The local stack's secrets: generated once into `<run_dir>/secrets.json` (mode 0600), read after;
`stack_secret` reads one without ever creating the file (for commands that talk to a running stack)."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from pathlib import Path

from counting.settings import SECRETS, Settings
from tally.errors import StackError
from tally.launch import command_line

SECRETS_FILE = "secrets.json"


def secrets_path(settings: Settings) -> Path:
    return settings.run_dir / SECRETS_FILE


def _read(path: Path) -> dict[str, str]:
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise StackError(f"{path} is not valid JSON ({exc}): delete it to generate new secrets") from None
    if not isinstance(stored, dict) or not all(isinstance(v, str) and v for v in stored.values()):
        raise StackError(
            f"{path} must hold a JSON object of non-empty strings: delete it to generate new ones"
        )
    return stored


def _write(path: Path, stored: dict[str, str]) -> None:
    """Write the file aside with mode 0600, then move it in place."""
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        os.fchmod(descriptor, 0o600)
        json.dump(stored, handle, indent=2)
        handle.flush()
        os.fsync(descriptor)
    os.replace(aside, path)


def with_local_secrets(settings: Settings) -> Settings:
    """The settings with every secret they leave empty taken from `<run_dir>/secrets.json`, which is
    created (mode 0600, `secrets.token_urlsafe(32)` each) for the ones it does not hold yet. A secret
    set in the environment, or in the settings, is kept as it is and never written to the file."""
    missing = [name for name in SECRETS if not getattr(settings, name)]
    if not missing:
        return settings
    path = secrets_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)  # two commands starting at once agree on one set
        stored = _read(path)
        if any(name not in stored for name in missing):
            stored = {**stored, **{n: secrets.token_urlsafe(32) for n in missing if n not in stored}}
            _write(path, stored)
        elif path.stat().st_mode & 0o077:
            path.chmod(0o600)
    finally:
        os.close(folder)  # and with it the lock
    return settings.model_copy(update={name: stored[name] for name in missing})


def stack_secret(settings: Settings, name: str) -> str:
    """The secret `name` (one of `SECRETS`) of the settings, else the local stack's, read from
    `<run_dir>/secrets.json` as 'tally up' wrote it. Nothing is created: a secret that neither holds
    raises `StackError` naming the file, since a new one would not be the one the stack runs with."""
    given = str(getattr(settings, name))
    if given:
        return given
    path = secrets_path(settings)
    stored = _read(path)
    if name in stored:
        return stored[name]
    where = path.absolute()
    found = f"{where} has no {name!r}" if path.exists() else f"no local stack's secrets at {where}"
    raise StackError(
        f"{found}: start the stack with '{command_line(settings, 'up')}', or pass --data-dir of the "
        f"running stack (or set TALLY_{name.upper()} to the secret it runs with)"
    )
