"""One logging set-up for every Tally process: one line per record, `key=value` fields, the same
leading fields everywhere (`ts level process logger event`), then the record's own fields.

Code logs facts through a `Log` (`Log("tally.ingest").warning("broker_unavailable", error=exc)`);
a library's plain message becomes `event=message text="..."`. Each entry point calls `configure`
once with its process name (ingest, serving, counter, archiver, tally)."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

LEADING_FIELDS = ("ts", "level", "process", "logger", "event")
_MARK = "event="


def _format(value: object) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def kv(event: str, **fields: object) -> str:
    """One log message: `event=<event>` then the fields as key=value, values quoted when needed."""
    parts = [_MARK + _format(event)]
    parts.extend(f"{key}={_format(value)}" for key, value in fields.items())
    return " ".join(parts)


class Log:
    """A named logger whose records are facts: an event name and its fields."""

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)

    def info(self, event: str, **fields: object) -> None:
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info(kv(event, **fields))

    def warning(self, event: str, **fields: object) -> None:
        self.logger.warning(kv(event, **fields))

    def error(self, event: str, **fields: object) -> None:
        self.logger.error(kv(event, **fields))


class KeyValueFormatter(logging.Formatter):
    """Formats every record, Tally's or a library's, as one `key=value` line."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = _format(process)

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")
        level, name = record.levelname.lower(), _format(record.name)
        head = f"ts={moment} level={level} process={self.process} logger={name}"
        message = record.getMessage()
        if not message.startswith(_MARK):
            message = kv("message", text=message)
        line = f"{head} {message}"
        if record.exc_info:
            line += " exception=" + _format(self.formatException(record.exc_info))
        return line


def configure(process: str, level: str | int = "INFO", stream: TextIO | None = None) -> None:
    """Send every record of this process, at `level` and above, to `stream` (stderr) as key=value
    lines naming `process`; replaces whatever handlers the root logger had."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(KeyValueFormatter(process))
    root = logging.getLogger()
    root.handlers.clear()
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)


def parse(line: str) -> dict[str, str]:
    """The fields of one line this module wrote (for tests and tools that read the logs)."""
    fields: dict[str, str] = {}
    i, n = 0, len(line)
    while i < n:
        eq = line.index("=", i)
        key = line[i:eq]
        i = eq + 1
        if i < n and line[i] == '"':
            j, value = i + 1, []
            while line[j] != '"':
                if line[j] == "\\":
                    j += 1
                    value.append("\n" if line[j] == "n" else line[j])
                else:
                    value.append(line[j])
                j += 1
            fields[key] = "".join(value)
            i = j + 2
        else:
            end = line.find(" ", i)
            end = n if end < 0 else end
            fields[key] = line[i:end]
            i = end + 1
    return fields
