"""The bot rules file: thresholds, weights, address ranges and fingerprints as data operators edit,
read and checked here (a file that does not pass is refused with its line and the reason)."""

from __future__ import annotations

import ipaddress
import re
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from counting.errors import FileError
from counting.rangefiles import MIN_IPV6_PREFIX, RangeFileError, read_range_file

DEFAULT_RULES_FILE = Path(__file__).with_name("bot_rules.toml")
_JA3 = re.compile(r"[0-9a-f]{32}")


class RulesError(FileError):
    """A bot rules file that cannot be used: `path`, the `line` (0: the whole file) and the reason."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Weight = Annotated[float, Field(ge=0.0, le=100.0)]


class Score(_Section):
    reject: float = Field(gt=0.0, description="a view whose signals weigh this much is not counted")
    soft: float = Field(gt=0.0, description="a counted view whose signals weigh this much is flagged")

    @model_validator(mode="after")
    def _soft_below_reject(self) -> Score:
        if self.soft > self.reject:
            raise ValueError(f"soft ({self.soft}) must not be above reject ({self.reject})")
        return self


class Weights(_Section):
    scripted_agent: Weight
    address_velocity: Weight
    replay_rate: Weight
    datacenter_ip: Weight
    bad_ja3: Weight
    watch_anomaly: Weight
    watch_ratio: Weight
    threshold_bunching: Weight
    missing_agent: Weight
    impossible_agent: Weight
    agent_rotation: Weight


class Thresholds(_Section):
    max_views_per_address_minute: int = Field(ge=1)
    max_replays_per_day: int = Field(ge=1)
    watch_overrun_factor: float = Field(ge=1.0)
    watch_overrun_slack_secs: float = Field(ge=0.0)
    max_watch_secs: float = Field(gt=0.0)
    min_watch_ratio: float = Field(ge=0.0, le=1.0)
    bunch_window_secs: float = Field(gt=0.0, le=600.0)
    bunch_min_views: int = Field(ge=1)
    bunch_min_share: float = Field(gt=0.0, le=1.0)
    max_agents_per_address_hour: int = Field(ge=1)


class Agents(_Section):
    scripted_pattern: str = Field(min_length=1)
    impossible_pattern: str = Field(min_length=1)

    @field_validator("scripted_pattern", "impossible_pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


def _networks(values: list[str]) -> list[str]:
    for at, value in enumerate(values):
        try:
            ipaddress.ip_network(value)
        except ValueError as exc:
            raise ValueError(f"item {at} is not an address range ({exc})") from None
    return values


class Addresses(_Section):
    datacenter: list[str]
    datacenter_files: list[str] = []
    allow: list[str]

    @field_validator("datacenter", "allow")
    @classmethod
    def _are_networks(cls, values: list[str]) -> list[str]:
        return _networks(values)

    @field_validator("datacenter")
    @classmethod
    def _narrow_enough(cls, values: list[str]) -> list[str]:
        for at, value in enumerate(values):
            network = ipaddress.ip_network(value)
            if network.version == 6 and network.prefixlen < MIN_IPV6_PREFIX:
                raise ValueError(
                    f"item {at} ({value}) is wider than /{MIN_IPV6_PREFIX}: a data-centre range is narrower"
                )
        return values


class Tls(_Section):
    bad_ja3: list[str]

    @field_validator("bad_ja3")
    @classmethod
    def _are_ja3(cls, values: list[str]) -> list[str]:
        for at, value in enumerate(values):
            if not _JA3.fullmatch(value):
                raise ValueError(
                    f"item {at} is not a JA3 fingerprint: 32 lowercase hex digits (got {value!r})"
                )
        return values


class BotRules(_Section):
    """One version of the bot rules, as its file holds them."""

    version: str = Field(pattern=r"^[A-Za-z0-9._-]{1,20}$")
    score: Score
    weights: Weights
    thresholds: Thresholds
    agents: Agents
    addresses: Addresses
    tls: Tls

    def weight(self, signal: str) -> float:
        return float(getattr(self.weights, signal))


def parse_rules(text: str, path: Path) -> BotRules:
    """The rules a file's text holds; raises `RulesError` with the line and the reason if it holds
    none (bad TOML, a key missing or unknown, a value out of range)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", 0) or _line_in_message(str(exc))
        raise RulesError(path, line, f"not TOML: {getattr(exc, 'msg', exc)}") from None
    try:
        rules = BotRules.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        location = tuple(first["loc"])
        name = ".".join(str(part) for part in location)
        line = _line_of(text, location)
        item = re.search(r"item (\d+)", str(first["msg"]))
        if item and isinstance(first["input"], list) and int(item.group(1)) < len(first["input"]):
            line = _line_of_item(text, line, str(first["input"][int(item.group(1))]))
        raise RulesError(path, line, f"{name}: {_reason(first)}") from None
    return _with_range_files(rules, path, text)


def _with_range_files(rules: BotRules, path: Path, text: str) -> BotRules:
    """The rules with the ranges of their `datacenter_files` (paths relative to the rules file)
    added to the data-centre ranges, so that the rules hold every range they judge with."""
    files = rules.addresses.datacenter_files
    if not files:
        return rules
    ranges = list(rules.addresses.datacenter)
    for name in files:
        try:
            ranges += read_range_file(path.parent / name)
        except RangeFileError as exc:
            line = _line_of_item(text, _line_of(text, ("addresses", "datacenter_files")), name)
            raise RulesError(path, line, f"addresses.datacenter_files: {exc}") from None
    unique = list(dict.fromkeys(ranges))
    return rules.model_copy(update={"addresses": rules.addresses.model_copy(update={"datacenter": unique})})


def load_rules(path: Path) -> BotRules:
    """The rules of the file at `path` (see `parse_rules`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(
            path, 0, f"cannot be read ({exc.strerror or exc}): check TALLY_BOT_RULES_FILE"
        ) from None
    return parse_rules(text, path)


@lru_cache(maxsize=1)
def shipped_rules() -> BotRules:
    """The rules shipped with Tally (`counting/bot_rules.toml`)."""
    return load_rules(DEFAULT_RULES_FILE)


def _reason(error: Any) -> str:
    kind, message = error["type"], str(error["msg"])
    if kind == "missing":
        return "is missing: add it (see the rules shipped in counting/bot_rules.toml)"
    if kind == "extra_forbidden":
        return f"is not a rule (got {error['input']!r}): remove it or fix its name"
    message = message.removeprefix("Value error, ")
    if isinstance(error["input"], list):  # the message names the item
        return message
    return f"{message} (got {error['input']!r})"


def _line_in_message(message: str) -> int:
    found = re.search(r"line (\d+)", message)
    return int(found.group(1)) if found else 0


def _line_of_item(text: str, key_line: int, item: str) -> int:
    """The first line from `key_line` on that holds `item` as a quoted string, else `key_line`."""
    lines = text.splitlines()
    for number in range(max(key_line, 1), len(lines) + 1):
        if f'"{item}"' in lines[number - 1] or f"'{item}'" in lines[number - 1]:
            return number
    return key_line


def _line_of(text: str, location: tuple[Any, ...]) -> int:
    """The line of the key at `location` (a table, then a key), or of its table if the key is not
    written (a missing key), or 0 if neither is."""
    names = [part for part in location if isinstance(part, str)]
    table, key = ".".join(names[:-1]), names[-1] if names else ""
    current, table_line = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = re.fullmatch(r"\[([^\]]+)\]\s*(#.*)?", line)
        if header:
            current = header.group(1).strip()
            if current == key and not table:
                return number
            if current == table:
                table_line = number
            continue
        if current == table and re.match(rf"{re.escape(key)}\s*=", line):
            return number
    return table_line
