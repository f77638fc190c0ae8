"""Apply counter plans to Redis: one EVALSHA of the plan script per partition plan, all plans of a
micro-batch pipelined in one round trip."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from speed_layer import script
from speed_layer.counter import PartitionPlan


@dataclass(frozen=True)
class WriteResult:
    """What one atomic write did: offsets before and after, ops applied / duplicate / skipped."""

    topic: str
    partition: int
    offset_before: int
    offset_after: int
    applied: int
    duplicates: int
    skipped: int


class RedisWriter:
    """Runs the plan script; each plan is atomic on its own (Redis runs a script alone)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._script = client.register_script(script.LUA)

    async def apply(self, plans: list[PartitionPlan]) -> list[WriteResult]:
        """Apply the plans in order, in one pipelined round trip (scripts are loaded when missing)."""
        if not plans:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for plan in plans:
                await self._script(keys=plan.keys, args=[plan.script_arg()], client=pipe)
            replies = await pipe.execute()
        return [
            WriteResult(plan.topic, plan.partition, *(int(v) for v in reply))
            for plan, reply in zip(plans, replies, strict=True)
        ]
