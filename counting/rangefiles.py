"""Address range files a bot rules file names: the lists cloud providers publish (AWS
`ip-ranges.json`, Google `cloud.json`, Azure service tags) or plain text, one CIDR a line."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

from counting.errors import FileError

# The keys under which the providers' JSON lists hold their ranges.
PREFIX_KEYS = ("ip_prefix", "ipv6_prefix", "ipv4Prefix", "ipv6Prefix", "addressPrefixes")
# An IPv6 range of the data-centre list is a /16 or narrower: the batch matches addresses by the
# text of their first group (see `batch_layer.verdict`), one entry per group a range spans.
MIN_IPV6_PREFIX = 16


class RangeFileError(FileError):
    """A range file that cannot be used: its path, the line (0: the whole file) and the reason."""


def read_range_file(path: Path) -> list[str]:
    """The address ranges of one file, in its order: a `.json` file in a provider's format, else
    text with one CIDR a line (blank lines and `#` comments skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RangeFileError(path, 0, f"cannot be read ({exc.strerror or exc})") from None
    if path.suffix == ".json":
        return _json_ranges(path, text)
    ranges = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if line:
            ranges.append(_checked(path, number, line))
    if not ranges:
        raise RangeFileError(path, 0, "holds no address range: one CIDR a line, e.g. 52.0.0.0/10")
    return ranges


def _json_ranges(path: Path, text: str) -> list[str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RangeFileError(path, exc.lineno, f"not JSON: {exc.msg}") from None
    found: list[str] = []
    _collect(data, found)
    if not found:
        raise RangeFileError(
            path, 0, f"holds no address range under any of the keys {', '.join(PREFIX_KEYS)}"
        )
    return [_checked(path, 0, value) for value in found]


def _collect(data: Any, found: list[str]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            if key in PREFIX_KEYS and isinstance(value, str):
                found.append(value)
            elif key in PREFIX_KEYS and isinstance(value, list):
                found.extend(v for v in value if isinstance(v, str))
            else:
                _collect(value, found)
    elif isinstance(data, list):
        for item in data:
            _collect(item, found)


def _checked(path: Path, line: int, value: str) -> str:
    try:
        network = ipaddress.ip_network(value)
    except ValueError as exc:
        raise RangeFileError(path, line, f"not an address range: {exc}") from None
    if network.version == 6 and network.prefixlen < MIN_IPV6_PREFIX:
        raise RangeFileError(
            path, line, f"{value} is wider than /{MIN_IPV6_PREFIX}: a data-centre range is narrower"
        )
    return str(network)
