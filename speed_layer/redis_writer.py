"""Apply counter plans to Redis: one EVALSHA of the plan script per partition plan, all plans of a
micro-batch pipelined in one round trip."""

from __future__ import annotations

from dataclasses import dataclass, field

import redis.asyncio as aioredis

from speed_layer import script
from speed_layer.plan import PartitionPlan, owner_key


@dataclass(frozen=True)
class WriteResult:
    """What one atomic write did: offsets before and after, ops applied / duplicate / skipped, and
    whether it was refused because another worker owns the partition now (nothing was written)."""

    topic: str
    partition: int
    offset_before: int
    offset_after: int
    applied: int
    duplicates: int
    skipped: int
    fenced: bool = False
    written: tuple[list[int], list[int], list[int]] = field(default=([], [], []), compare=False, repr=False)


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
        results = []
        for plan, reply in zip(plans, replies, strict=True):
            before, after, applied, duplicates, skipped, fenced = (int(v) for v in reply[:6])
            if not fenced and plan.last_offset <= before:  # skipped whole: say how much
                skipped = len(plan.ops)
            buckets, sketches, markers = (
                ([int(i) for i in part] for part in reply[6:9]) if len(reply) > 6 else ([], [], [])
            )
            results.append(
                WriteResult(
                    plan.topic,
                    plan.partition,
                    before,
                    after,
                    applied,
                    duplicates,
                    skipped,
                    fenced == 1,
                    (buckets, sketches, markers),
                )
            )
        return results

    async def claim(self, topic: str, partitions: list[int]) -> dict[tuple[str, int], int]:
        """Become the owner of partitions (after an assignment): raise each one's owner generation, so
        plans of an earlier owner, still in flight, are refused from now on."""
        async with self._client.pipeline(transaction=False) as pipe:
            for partition in partitions:
                pipe.incr(owner_key(topic, partition))
            generations = await pipe.execute()
        return {(topic, p): int(g) for p, g in zip(partitions, generations, strict=True)}
