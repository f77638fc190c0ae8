"""Read a user's reaction to a video: the later of what the ingest API recorded on
acknowledgement and what the speed layer derived, by (ts, event_id)."""

from __future__ import annotations

from redis.asyncio import Redis

from counting import keys, rules


def _parse(raw: bytes | str | None) -> tuple[int, str, str] | None:
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else raw
    ts, rest = text.split("|", 1)
    event_id, state = rest.rsplit("|", 1)
    return int(ts), event_id, state


async def read_user_reaction(redis: Redis, video_id: str, user_id: str) -> str:
    """liked, disliked or none."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hget(keys.user_reactions(video_id), user_id)
        pipe.hget(keys.reactions(video_id), user_id)
        acknowledged, counted = await pipe.execute()
    known = [r for r in (_parse(acknowledged), _parse(counted)) if r is not None]
    if not known:
        return rules.NONE
    return max(known, key=lambda r: (r[0], r[1]))[2]
