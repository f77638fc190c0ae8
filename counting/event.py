"""The event model and its validation: every field rule of the design, errors naming the field."""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Any, Literal, NamedTuple

import msgspec

from counting.errors import InvalidEvent

EventType = Literal["view", "like", "unlike", "dislike", "undislike", "heartbeat", "leave"]
EVENT_TYPES: tuple[str, ...] = ("view", "like", "unlike", "dislike", "undislike", "heartbeat", "leave")
REACTION_TYPES: frozenset[str] = frozenset({"like", "unlike", "dislike", "undislike"})
SESSION_TYPES: frozenset[str] = frozenset({"view", "heartbeat", "leave"})

VIDEO_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_FUTURE_MS = 24 * 3_600_000
MAX_AGE_MS = 30 * 24 * 3_600_000
MAX_BATCH_EVENTS = 10_000
MAX_BODY_BYTES = 4 * 1024 * 1024
_VIDEO_ID_RE = re.compile(VIDEO_ID_PATTERN)

Id64 = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
# The pattern is checked by `check_video_id` (from `check_rules` and `counting.wire`), not by msgspec:
# a `pattern` constraint runs the regex on every decode, half of the decoding time of a record.
VideoId = Id64
Millis = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=1e9)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0, le=1e9)]


class Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """One accepted event; `ingest_ts` (and, with several regions, `region`: where it was accepted,
    decision 0006) are stamped by the ingest API, never by the client."""

    event_id: Id64
    type: EventType
    video_id: VideoId
    ts: Millis
    user_id: Id64 | None = None
    session_id: Id64 | None = None
    ip: Annotated[str, msgspec.Meta(max_length=45)] | None = None
    user_agent: Annotated[str, msgspec.Meta(max_length=512)] | None = None
    watch_secs: Seconds | None = None
    video_duration_secs: PositiveSeconds | None = None
    ja3: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    ingest_ts: Millis | None = None
    region: Annotated[str, msgspec.Meta(max_length=32)] | None = None


class _Batch(msgspec.Struct, forbid_unknown_fields=True):
    events: list[msgspec.Raw]


class _Events(msgspec.Struct, forbid_unknown_fields=True):
    events: list[Event]


_FIELD_RE = re.compile(r"at `\$\.([A-Za-z0-9_]+)")
_UNKNOWN_RE = re.compile(r"unknown field `([^`]*)`")
_MISSING_RE = re.compile(r"missing required field `([^`]*)`")


def _error_from_msgspec(exc: msgspec.ValidationError | msgspec.DecodeError, prefix: str = "") -> InvalidEvent:
    text = str(exc)
    for pattern in (_UNKNOWN_RE, _MISSING_RE):
        match = pattern.search(text)
        if match:
            what = "unknown field" if pattern is _UNKNOWN_RE else "required field is missing"
            return InvalidEvent(prefix + match.group(1), what)
    match = _FIELD_RE.search(text)
    field = match.group(1) if match else "body"
    reason = text.split(" - at ")[0]
    return InvalidEvent(prefix + field, reason)


# Video ids already seen to match the pattern (a set lookup instead of a regex per event).
_valid_video_ids: set[str] = set()
_MAX_REMEMBERED_IDS = 1_000_000


def is_valid_video_id(value: str) -> bool:
    """Whether the whole value matches VIDEO_ID_PATTERN (`re.match` with `$` would also let a
    trailing newline through)."""
    return value in _valid_video_ids or _VIDEO_ID_RE.fullmatch(value) is not None


def check_video_id(video_id: str) -> None:
    """Raise InvalidEvent unless the video id matches VIDEO_ID_PATTERN."""
    if video_id in _valid_video_ids:
        return
    if not is_valid_video_id(video_id):
        raise InvalidEvent(
            "video_id", f"must be 1-64 letters, digits, '_' or '-' ({VIDEO_ID_PATTERN}; got {video_id!r})"
        )
    if len(_valid_video_ids) >= _MAX_REMEMBERED_IDS:
        _valid_video_ids.clear()
    _valid_video_ids.add(video_id)


# A dotted-quad IPv4 address as `ipaddress` accepts one (0-255, no leading zero, ASCII digits): one
# match instead of its parse (about 3 µs an event on the ingest path); anything else is asked of it.
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"(?:{_OCTET}\.){{3}}{_OCTET}")


# Addresses already seen to be valid: a viewer sends many events, and an IPv6 address's parse by
# `ipaddress` costs about 15 µs.
_valid_ips: set[str] = set()


def is_ip_address(text: str) -> bool:
    """Whether `text` is an IPv4 or IPv6 address (`ipaddress.ip_address` accepts it)."""
    if text in _valid_ips:
        return True
    if not _IPV4.fullmatch(text):
        try:
            ipaddress.ip_address(text)
        except ValueError:
            return False
    if len(_valid_ips) >= _MAX_REMEMBERED_IDS:
        _valid_ips.clear()
    _valid_ips.add(text)
    return True


def check_rules(event: Event, now_ms: int) -> None:
    """Cross-field and clock rules that a schema cannot say; raise InvalidEvent naming the field."""
    check_video_id(event.video_id)
    if event.type in REACTION_TYPES and event.user_id is None:
        raise InvalidEvent("user_id", f"required for a {event.type!r} event")
    if event.type in SESSION_TYPES and event.session_id is None:
        raise InvalidEvent("session_id", f"required for a {event.type!r} event")
    if event.watch_secs is not None:
        if event.type != "view":
            raise InvalidEvent("watch_secs", f"only allowed on 'view' events (got type {event.type!r})")
        if not math.isfinite(event.watch_secs):
            raise InvalidEvent("watch_secs", f"must be a finite number (got {event.watch_secs!r})")
    if event.ts > now_ms + MAX_FUTURE_MS:
        raise InvalidEvent("ts", f"more than 24 h in the future (got {event.ts}, now {now_ms})")
    if event.ts < now_ms - MAX_AGE_MS:
        raise InvalidEvent("ts", f"older than 30 days (got {event.ts}, now {now_ms})")
    if event.ip is not None and not is_ip_address(event.ip):
        raise InvalidEvent("ip", f"not an IPv4 or IPv6 address (got {event.ip!r})")
    if event.ingest_ts is not None:
        raise InvalidEvent("ingest_ts", "set by the server; leave it out")
    if event.region is not None:
        raise InvalidEvent("region", "set by the server; leave it out")


def parse_event(raw: bytes | str, now_ms: int) -> Event:
    """Decode and validate one JSON event; raise InvalidEvent naming the field and the reason."""
    try:
        event = msgspec.json.decode(raw, type=Event)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _error_from_msgspec(exc) from None
    check_rules(event, now_ms)
    return event


def event_from_dict(data: dict[str, Any], now_ms: int) -> Event:
    """Validate an already-decoded JSON object (the single-event routes build one)."""
    try:
        event = msgspec.convert(data, type=Event)
    except msgspec.ValidationError as exc:
        raise _error_from_msgspec(exc) from None
    check_rules(event, now_ms)
    return event


class ParsedBatch(NamedTuple):
    """A batch body validated: the valid events, one error per bad event, and the place of each
    valid event in the body's `events` (for answers that name it)."""

    events: list[Event]
    errors: list[dict[str, Any]]
    indices: list[int]


def parse_batch(body: bytes, now_ms: int) -> ParsedBatch:
    """Validate a batch body `{"events": [...]}`: the valid events, and one error per bad event.

    A body that is not such an object raises InvalidEvent for the whole request.
    """
    if len(body) > MAX_BODY_BYTES:
        raise InvalidEvent("body", f"larger than {MAX_BODY_BYTES} bytes (got {len(body)})")
    try:
        events = msgspec.json.decode(body, type=_Events).events  # every event in one call
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _parse_each(body, now_ms)  # again an event at a time: each error names its event
    _check_batch_size(len(events))
    accepted: list[Event] = []
    errors: list[dict[str, Any]] = []
    indices: list[int] = []
    for index, event in enumerate(events):
        try:
            check_rules(event, now_ms)
        except InvalidEvent as exc:
            errors.append({"index": index, "field": exc.field, "reason": exc.reason})
        else:
            accepted.append(event)
            indices.append(index)
    return ParsedBatch(accepted, errors, indices)


def _parse_each(body: bytes, now_ms: int) -> ParsedBatch:
    """`parse_batch` of a body some event of which the schema refuses: each event decoded alone."""
    try:
        batch = msgspec.json.decode(body, type=_Batch)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _error_from_msgspec(exc) from None
    _check_batch_size(len(batch.events))
    accepted: list[Event] = []
    errors: list[dict[str, Any]] = []
    indices: list[int] = []
    for index, raw in enumerate(batch.events):
        try:
            accepted.append(parse_event(raw, now_ms))
        except InvalidEvent as exc:
            errors.append({"index": index, "field": exc.field, "reason": exc.reason})
        else:
            indices.append(index)
    return ParsedBatch(accepted, errors, indices)


def _check_batch_size(events: int) -> None:
    if events > MAX_BATCH_EVENTS:
        raise InvalidEvent("events", f"at most {MAX_BATCH_EVENTS} events a batch (got {events})")


def stamped(event: Event, ingest_ts: int, region: str | None = None) -> Event:
    """The event as the log keeps it: with the server's ingestion time (and, with several regions,
    the region that accepted it)."""
    return msgspec.structs.replace(event, ingest_ts=ingest_ts, region=region)
