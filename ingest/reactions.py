"""The reaction state the ingest API keeps: each acknowledged reaction is applied at once, so a
user reading `user_liked` right after liking sees it (latest by ts, then event_id, wins)."""

from __future__ import annotations

from redis.asyncio import Redis

from counting import keys, rules, values
from counting.event import Event
from ingest.scripts import ScriptCalls

# KEYS[1]: the video's user-reactions hash. ARGV: user, ts, event_id, value (`values.encode_acknowledged`).
# The stored value is replaced only by a later (ts, event_id); the script reads the ts and event_id
# of that layout (`values.ACKNOWLEDGED_REACTION_LAYOUT`).
_APPLY = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  local sep = string.find(current, '|', 1, true)
  local ts = tonumber(string.sub(current, 1, sep - 1))
  local rest = string.sub(current, sep + 1)
  local id = string.sub(rest, 1, string.find(rest, '|', 1, true) - 1)
  local new_ts = tonumber(ARGV[2])
  if new_ts < ts or (new_ts == ts and ARGV[3] <= id) then
    return 0
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
return 1
"""


class ReactionState:
    """Applies acknowledged reactions to the per-video user-reaction hashes; the reactions of the
    requests acknowledged together (one produce answer) go out in one round trip. Applying one
    twice changes nothing (the latest reaction wins either way)."""

    def __init__(self, redis: Redis) -> None:
        self._script = ScriptCalls(redis, _APPLY)

    async def apply(self, events: list[Event]) -> None:
        calls = [
            (
                keys.user_reactions(e.video_id),
                (e.user_id, e.ts, e.event_id, values.encode_acknowledged(_reaction(e))),
            )
            for e in events
            if e.type in rules.REACTION_STATE and e.user_id is not None
        ]
        if not calls:
            return
        for answer in await self._script.run(calls):
            if isinstance(answer, Exception):
                raise answer


def _reaction(event: Event) -> values.Reaction:
    return values.Reaction(event.ts, event.event_id, rules.reaction_state(event.type))
