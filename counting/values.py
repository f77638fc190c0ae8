"""The layouts of the values Tally keeps in Redis hashes, each defined once with its encoder and
decoder, and the version of each: every writer and reader in Python goes through this module."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from counting import rules
from counting.errors import TallyError

# One number per layout; raise it when a layout changes, and move old values with a command.
ACKNOWLEDGED_REACTION_LAYOUT = 1  # `ts|event_id|state` text
REACTION_HISTORY_LAYOUT = 2  # msgpack array of [ts, event_id, state, bucket] (1 was the text above)
SHARD_PLAN_LAYOUT = 2  # `shards@active_from_ms` text (1 was the shard count alone, still read)
PEER_STATE_LAYOUT = 1  # JSON object {"in_sync_at": ms or null, "error": text or null}

_STATES = frozenset((rules.LIKED, rules.DISLIKED, rules.NONE))
_history_decoder = msgspec.msgpack.Decoder(list[tuple[int, str, str, int]])
_history_encoder = msgspec.msgpack.Encoder()


class UnknownLayout(TallyError, ValueError):
    """A value in Redis is not in the layout this version of Tally reads."""

    def __init__(
        self,
        what: str,
        raw: bytes | str,
        expected: str,
        remedy: str = "upgrade this process or the writer, then rewrite the value",
    ) -> None:
        shown = raw[:40] if isinstance(raw, str) else raw[:40].hex(" ")
        super().__init__(
            f"{what} is not in the layout this Tally reads ({expected}; got {shown!r}): it was written "
            f"by another Tally version; {remedy}"
        )
        self.what = what


@dataclass(frozen=True, order=True)
class Reaction:
    """One reaction of a user to a video: its event time and id (the order), the state it leaves,
    and the speed bucket it was ingested in (-1 where the layout does not keep one)."""

    ts: int
    event_id: str
    state: str
    bucket: int = -1

    @property
    def order(self) -> tuple[int, str]:
        """What decides the latest reaction (`counting.rules.reaction_order`)."""
        return (self.ts, self.event_id)


def encode_acknowledged(reaction: Reaction) -> str:
    """The user-reactions value the ingest API keeps on acknowledgement: `ts|event_id|state`."""
    return f"{reaction.ts}|{reaction.event_id}|{reaction.state}"


def decode_acknowledged(raw: bytes | str) -> Reaction:
    """The reaction of an `encode_acknowledged` value; UnknownLayout for anything else."""
    expected = f"layout {ACKNOWLEDGED_REACTION_LAYOUT}: ts|event_id|state"
    try:
        text = raw.decode() if isinstance(raw, bytes) else raw
        ts, rest = text.split("|", 1)
        event_id, state = rest.rsplit("|", 1)
        reaction = Reaction(int(ts), event_id, state)
    except (UnicodeDecodeError, ValueError):
        raise UnknownLayout("an acknowledged reaction", raw, expected) from None
    if state not in _STATES or not event_id:
        raise UnknownLayout("an acknowledged reaction", raw, expected)
    return reaction


def encode_history(history: list[Reaction]) -> bytes:
    """The reactions hash value the counter keeps per user."""
    return encode_history_rows([[r.ts, r.event_id, r.state, r.bucket] for r in history])


def encode_history_rows(rows: list[list[object]]) -> bytes:
    """`encode_history` of rows [ts, event_id, state, bucket] (as the counter's state keeps them)."""
    return _history_encoder.encode(rows)


def decode_history(raw: bytes) -> list[Reaction]:
    """The reactions a counted user's value keeps, in bucket and reaction order; UnknownLayout
    for anything else."""
    expected = f"layout {REACTION_HISTORY_LAYOUT}: msgpack array of [ts, event_id, state, bucket]"
    try:
        entries = _history_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise UnknownLayout("a counted reaction history", raw, expected) from None
    history = [Reaction(ts, event_id, state, bucket) for ts, event_id, state, bucket in entries]
    if not history or any(r.state not in _STATES for r in history):
        raise UnknownLayout("a counted reaction history", raw, expected)
    return history


def latest(reactions: list[Reaction]) -> Reaction | None:
    """The reaction that decides the state now: the latest by (ts, event_id)."""
    return max(reactions, key=lambda r: r.order, default=None)


@dataclass(frozen=True)
class ShardPlan:
    """A video's shard count and the ingestion time it holds from (`keys.shard_plans`): an event ingested
    earlier is routed with one shard. A plan without a time (the first layout) holds always."""

    shards: int = 1
    active_from: int = 0

    def shards_at(self, ingest_ts: int) -> int:
        return self.shards if ingest_ts >= self.active_from else 1


def encode_shard_plan(plan: ShardPlan) -> str:
    return f"{plan.shards}@{plan.active_from}"


def decode_shard_plan(raw: bytes | str) -> ShardPlan:
    text = raw.decode() if isinstance(raw, bytes) else raw
    count, _, since = text.partition("@")
    try:
        shards, active_from = int(count), int(since or 0)
    except ValueError:
        raise UnknownLayout("a shard plan", raw, "`shards@active_from_ms`") from None
    return ShardPlan(max(1, shards), active_from)


class PeerState(msgspec.Struct, frozen=True):
    """What the replicator knows of a peer region (`keys.region_peers`): when it last read the
    peer's components to their end (ms; None: never) and its last error (None once in sync)."""

    in_sync_at: int | None = None
    error: str | None = None


_peer_decoder = msgspec.json.Decoder(PeerState)


def encode_peer_state(state: PeerState) -> bytes:
    return msgspec.json.encode(state)


def decode_peer_state(raw: bytes | str) -> PeerState:
    try:
        return _peer_decoder.decode(raw)
    except msgspec.DecodeError:
        raise UnknownLayout("a peer region's state", raw, '`{"in_sync_at": ms, "error": text}`') from None
