"""Read a user's reaction to a video: the later of what the ingest API recorded on
acknowledgement and what the speed layer counted, by (ts, event_id)."""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from counting import keys, rules, values


async def read_user_reaction(
    redis: Redis, video_id: str, user_id: str, owners: Sequence[str] = ()
) -> tuple[str, bool]:
    """liked, disliked or none, and whether any of the `owners` keys exists (a counter's state is
    in this Redis), in one round trip; `values.UnknownLayout` when a stored value is in a layout
    this version does not read."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hget(keys.user_reactions(video_id), user_id)
        pipe.hget(keys.reactions(video_id), user_id)
        for owner in owners:  # one EXISTS each: on a Redis Cluster the owners lie in many slots
            pipe.exists(owner)
        acknowledged, counted, *owned = await pipe.execute()
    known: list[values.Reaction] = []
    if acknowledged is not None:
        known.append(values.decode_acknowledged(acknowledged))
    if counted is not None:
        known += values.decode_history(counted)
    decided = values.latest(known)
    return (decided.state if decided is not None else rules.NONE), any(int(found) for found in owned)
