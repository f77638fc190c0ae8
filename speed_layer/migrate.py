"""Move the speed state an earlier Tally left in Redis to today's layouts (`tally speed migrate`),
so that the counter's script reads one layout only. Run it with the counter stopped."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from counting import keys, values

# The first byte of a msgpack array: what the counter's reaction history starts with.
_ARRAY_FIRST_BYTES = (range(0x90, 0xA0), (0xDC, 0xDD))


@dataclass(frozen=True)
class MigrationReport:
    """How many values each step rewrote."""

    reactions: int
    viewer_sets: int

    def render(self) -> str:
        return (
            f"rewrote {self.reactions} reaction values (text -> reaction history, layout "
            f"{values.REACTION_HISTORY_LAYOUT}) and {self.viewer_sets} viewer sets (set -> hash)"
        )


def _is_history(raw: bytes) -> bool:
    return bool(raw) and any(raw[0] in first for first in _ARRAY_FIRST_BYTES)


def _migrate_reactions(client: redis.Redis, key: bytes) -> int:
    """A user's `ts|event_id|state` of the earlier layout becomes a history of that one reaction,
    taken as ingested before every bucket (bucket 0), as the script used to read it."""
    old: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
    rewritten = {
        user: values.encode_history([values.Reaction(r.ts, r.event_id, r.state, 0)])
        for user, raw in old.items()
        if not _is_history(raw)
        for r in [values.decode_acknowledged(raw)]
    }
    if rewritten:
        client.hset(key, mapping=rewritten)  # type: ignore[arg-type]
    return len(rewritten)


def _migrate_viewer_set(client: redis.Redis, key: bytes) -> int:
    """A set of viewer digests of the earlier layout becomes the hash digest -> first bucket, each
    seen before every bucket (0). One transaction: the key is one slot."""
    if client.type(key) != b"set":
        return 0
    members: set[bytes] = client.smembers(key)  # type: ignore[assignment]
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    if members:
        pipe.hset(key, mapping=dict.fromkeys(members, 0))
    pipe.execute()
    return 1


def migrate(client: redis.Redis) -> MigrationReport:
    """Rewrite every value of an earlier layout; idempotent (a second run rewrites nothing)."""
    reactions = sum(
        _migrate_reactions(client, key)
        for key in client.scan_iter(match=keys.reactions("*"), count=1_000, _type="hash")
    )
    viewer_sets = sum(
        _migrate_viewer_set(client, key)
        for key in client.scan_iter(match=keys.viewers("*"), count=1_000, _type="set")
    )
    return MigrationReport(reactions, viewer_sets)
