"""The guard each part runs first: a third-party module its extra installs is missing -> the pip
command that installs it, instead of a bare `No module named ...` from deep inside the part."""

from __future__ import annotations

from importlib.util import find_spec


def require(module: str, extra: str, part: str) -> None:
    """Raise `ModuleNotFoundError` naming `module` and the command that installs `part`'s `extra`,
    unless `module` (a top-level name) can be imported. Finds the module without importing it."""
    if find_spec(module) is None:
        raise ModuleNotFoundError(
            f"{part} needs {module}, which is not installed: pip install 'tally[{extra}]' "
            f"(in a checkout: pip install -e '.[{extra}]')",
            name=module,
        )
