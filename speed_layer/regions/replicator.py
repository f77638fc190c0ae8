"""The replicator (decision 0006): reads each other region's components topic from that region's
broker, applies the components to this region's Redis and writes the reactions accepted there to
this region's events topic (its counter applies them by the like rule), then commits its position
there; a peer it cannot reach is retried while this region counts on. Its state per peer
(`keys.region_peers`): when it last reached the end of the peer's topic, and the last error."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from prometheus_client import Counter
from redis.exceptions import RedisError

from counting import keys, redisconn
from counting import logs as logging_setup
from counting.regions import decode_exchange
from counting.settings import Settings
from counting.values import PeerState, decode_peer_state, encode_peer_state
from ingest.errors import BrokerUnavailable
from ingest.publisher import Publisher
from speed_layer import logs, metrics
from speed_layer.regions.regions import apply_components

APPLIED = Counter("tally_region_components", "Components received from a peer region", ["peer"])
UNDECODABLE = Counter(
    "tally_region_undecodable", "Component messages a peer sent that did not decode", ["peer"]
)
FORWARDED = Counter(
    "tally_region_reactions", "Reactions of a peer region written to the events topic", ["peer"]
)
POLL_MS = 200
RETRY_S = 1.0
MAX_RECORDS = 2_000


def group_of(settings: Settings) -> str:
    """The consumer group this region reads every peer's components topic with."""
    return f"tally-replicator-{settings.region}"


class Replicator:
    """One peer's components, into this region's Redis."""

    def __init__(
        self,
        settings: Settings,
        client: aioredis.Redis,
        publisher: Publisher,
        peer: str,
        bootstrap: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._client = client
        self._publisher = publisher
        self.peer = peer
        self._bootstrap = bootstrap
        self._clock = clock
        self.applied = 0

    def _now(self) -> int:
        return int(self._clock() * 1000)

    async def run(self, stop: asyncio.Event) -> None:
        """Read and apply until `stop` is set; an unreachable peer is retried every RETRY_S."""
        while not stop.is_set():
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap,
                group_id=group_of(self._settings),
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=10_000,
                heartbeat_interval_ms=3_000,
            )
            try:
                await consumer.start()
                consumer.subscribe([self._settings.components_topic], listener=_FromStart(self, consumer))
                logs.info("peer_reached", peer=self.peer, broker=self._bootstrap)
                while not stop.is_set():
                    await self.step(consumer)
            except BrokerUnavailable as exc:  # this region's broker: the batch is read again
                logs.warning("forward_failed", peer=self.peer, error=str(exc))
                await self._record(error=str(exc))
                await _sleep_unless(stop, RETRY_S)
            except RedisError as exc:  # this region's Redis: the batch is read again once it is back
                redis_url = self._settings.redis_url
                logs.warning("store_unavailable", peer=self.peer, redis=redis_url, error=repr(exc))
                await _sleep_unless(stop, RETRY_S)
            except (KafkaError, OSError) as exc:
                logs.warning("peer_unreachable", peer=self.peer, broker=self._bootstrap, error=repr(exc))
                await self._record(error=f"{type(exc).__name__}: {exc}")
                await _sleep_unless(stop, RETRY_S)
            finally:
                await consumer.stop()

    async def step(self, consumer: AIOKafkaConsumer) -> int:
        """One poll: apply what came, commit it, and note when the peer's topic was read to its end."""
        batch = await consumer.getmany(timeout_ms=POLL_MS, max_records=MAX_RECORDS)
        components, reactions = [], []
        for messages in batch.values():
            for message in messages:
                try:
                    exchange = decode_exchange(message.value or b"")
                    components += exchange.components
                    reactions += exchange.reactions
                except ValueError as exc:  # msgspec's errors are ValueErrors
                    UNDECODABLE.labels(self.peer).inc()
                    logs.error(
                        "component_undecodable",
                        peer=self.peer,
                        partition=message.partition,
                        offset=message.offset,
                        error=repr(exc),
                        hint="skipped: check that every region runs the same Tally version",
                    )
        if components:
            await apply_components(self._client, self._settings, components, self._now())
            APPLIED.labels(self.peer).inc(len(components))
            self.applied += len(components)
        if reactions:  # the counter here skips the copies it has seen (event ids)
            await self._publisher.forward(reactions)
            FORWARDED.labels(self.peer).inc(len(reactions))
        if batch:
            await consumer.commit()
        assigned = consumer.assignment()
        ends = await consumer.end_offsets(list(assigned)) if assigned else {}
        positions = {tp: await consumer.position(tp) for tp in ends}
        if assigned and all(positions[tp] >= end for tp, end in ends.items()):
            await self._record(in_sync_at=self._now())
        return len(components)

    async def in_sync_before(self) -> bool:
        """Whether this region's Redis holds what was read from the peer (it noted an end reached);
        False when Redis cannot say (reading the peer again changes nothing but time)."""
        try:
            raw = await self._client.hget(keys.region_peers(), self.peer)
        except RedisError:
            return False
        return raw is not None and decode_peer_state(raw).in_sync_at is not None

    async def _record(self, **fields: object) -> None:
        """Note this peer's state for the stats answer (best effort: Redis may be the one away)."""
        try:
            await self._update(**fields)
        except RedisError as exc:
            logs.warning("peer_state_unrecorded", peer=self.peer, error=repr(exc))

    async def _update(self, **fields: object) -> None:
        name = keys.region_peers()
        raw = await self._client.hget(name, self.peer)
        known = decode_peer_state(raw) if raw else PeerState()
        if "in_sync_at" in fields:  # in sync: the last error is over
            known = PeerState(int(fields["in_sync_at"]), None)  # type: ignore[call-overload]
        else:
            known = PeerState(known.in_sync_at, str(fields.get("error")))
        await self._client.hset(name, self.peer, encode_peer_state(known))


class _FromStart(ConsumerRebalanceListener):
    """On assignment: read the peer's topic from its start when this region's Redis holds nothing
    read from it (a new region, or one whose Redis was emptied: its committed position on the
    peer's broker is past what it lost)."""

    def __init__(self, replicator: Replicator, consumer: AIOKafkaConsumer) -> None:
        self._replicator = replicator
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        return None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if assigned and not await self._replicator.in_sync_before():
            await self._consumer.seek_to_beginning(*assigned)
            logs.info("peer_read_from_start", peer=self._replicator.peer, partitions=len(assigned))


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def replicate(settings: Settings, stop: asyncio.Event) -> None:
    """Run a replicator for every peer of `settings` until `stop` is set."""
    client = redisconn.async_client(settings)
    publisher = Publisher(settings)
    try:
        replicators = [Replicator(settings, client, publisher, p, b) for p, b in settings.peers.items()]
        logs.info("replicator_started", region=settings.region, peers=settings.peers)
        await asyncio.gather(*(r.run(stop) for r in replicators))
    finally:
        await publisher.stop()
        await client.aclose()


def run_replicator(settings: Settings, loglevel: str = "INFO") -> int:
    """The replicator process: until SIGTERM or SIGINT; its /metrics on `replicator_port`."""
    logging_setup.configure("replicator", loglevel)
    if not settings.peers:
        logs.error("replicator_without_peers", hint="set TALLY_REGION_PEERS, e.g. us=10.0.0.7:9092")
        return 2
    metrics.serve(settings.replicator_port, "replicator", host=settings.faust_web_host)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await replicate(settings, stop)

    asyncio.run(main())
    logs.info("worker_stopped", worker="replicator", code=0)
    return 0
