"""Several regions (decision 0006): what one region tells the others of its counts, and the merge.

A component is one partition's part of a video's bucket in one region: absolute counts as of the
partition's offset, its version (`speed_layer/sink/sink.lua` keeps the same parts of local partitions).
The merge keeps, per identity, the component of the greatest version: a join on a total order, so
merging is idempotent, commutative and associative, and a delayed, repeated or reordered exchange
changes nothing. Reactions do not cross as counts: a pair's state is its latest reaction event by
`rules.reaction_order`, which `latest_reactions` merges the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import msgspec

from counting import rules
from counting.errors import InvalidSetting
from counting.event import Event

REGION_PATTERN = r"^[a-z][a-z0-9-]{0,31}$"
_REGION_RE = re.compile(REGION_PATTERN)

# Count fields that stay in their region: reactions cross as events (decision 0006, point 3).
REGIONAL_FIELDS = frozenset({"likes", "dislikes"})

PLATFORM = ""  # the video id of a platform component (every video's counts of a bucket)


def accepted_here(event: Event, region: str) -> bool:
    """Whether this region accepted the event (one without a region: a single-region platform, or
    the own log read back); another region's event is counted there and kept in its log."""
    return event.region is None or event.region == region


def check_region(name: str, setting: str = "TALLY_REGION") -> str:
    """A region's name as settings, keys and part names use it; a clear error otherwise."""
    if not _REGION_RE.match(name):
        raise InvalidSetting(
            f"{setting}: {name!r} is not a region name: use 1-32 lowercase letters, digits or '-', "
            "a letter first (e.g. eu-west)"
        )
    return name


def parse_peers(value: str, region: str = "") -> dict[str, str]:
    """`TALLY_REGION_PEERS`: 'us=host:9092,ap=host:9092' -> {region: broker bootstrap}; this
    `region` may not be among them."""
    peers: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, bootstrap = item.partition("=")
        if not sep or ":" not in bootstrap:
            raise InvalidSetting(
                f"TALLY_REGION_PEERS: {item!r} is not region=host:port (e.g. us=10.0.0.7:9092)"
            )
        peer = check_region(name.strip(), "TALLY_REGION_PEERS")
        if peer == region:
            raise InvalidSetting(f"TALLY_REGION_PEERS names this region ({region!r}): list the others only")
        peers[peer] = bootstrap.strip()
    return peers


class Component(msgspec.Struct, frozen=True, array_like=True):
    """Region `region`'s counts of `video_id` (PLATFORM: every video) in `bucket`, from one partition
    of its events topic, as of `offset`; `sketches`: viewer digests counted in the bucket, `firsts`:
    those the partition first counted in it (both sets only grow: a merge unites them)."""

    region: str
    topic: str
    partition: int
    video_id: str
    bucket: int
    offset: int
    counts: dict[str, int]
    sketches: list[str] = []
    firsts: list[str] = []

    @property
    def identity(self) -> tuple[str, str, int, str, int]:
        return (self.region, self.topic, self.partition, self.video_id, self.bucket)

    @property
    def part(self) -> str:
        """The name of this partition's part beside a bucket's sums (`keys.bucket_parts`)."""
        return part_name(self.region, self.topic, self.partition)


def part_name(region: str, topic: str, partition: int) -> str:
    """A remote partition's part: the region before the local part's `<topic>:<partition>`."""
    return f"{region}/{topic}:{partition}"


def _order(component: Component) -> tuple[int, list[tuple[str, int]]]:
    return (component.offset, sorted(component.counts.items()))


def newer(a: Component, b: Component) -> Component:
    """Two components of one identity merged: the later one's counts (ties of offset: the greater
    value), the union of both's digests."""
    later = a if _order(a) >= _order(b) else b
    sketches = sorted(set(a.sketches) | set(b.sketches))
    firsts = sorted(set(a.firsts) | set(b.firsts))
    if sketches == later.sketches and firsts == later.firsts:
        return later
    return msgspec.structs.replace(later, sketches=sketches, firsts=firsts)


Identity = tuple[str, str, int, str, int]


def merge(held: Mapping[Identity, Component], incoming: Iterable[Component]) -> dict[Identity, Component]:
    """`held` with `incoming` merged in: the newer component of each identity."""
    merged = dict(held)
    for component in incoming:
        known = merged.get(component.identity)
        merged[component.identity] = component if known is None else newer(known, component)
    return merged


Pair = tuple[str, str]


def latest_reactions(held: Mapping[Pair, Event], incoming: Iterable[Event]) -> dict[Pair, Event]:
    """Each (user, video) pair's latest reaction event by `rules.reaction_order` (the design's like
    rule), `held` with `incoming` merged in."""
    merged = dict(held)
    for event in incoming:
        pair = (event.user_id or "", event.video_id)
        known = merged.get(pair)
        if known is None or rules.reaction_order(event) > rules.reaction_order(known):
            merged[pair] = event
    return merged


def served_fields(component: Component) -> dict[str, int]:
    """The fields of a remote component a region adds to its own: every count but the reactions."""
    return {name: n for name, n in component.counts.items() if name not in REGIONAL_FIELDS}


class Exchange(msgspec.Struct, frozen=True):
    """One message of a region's components topic: what one partition's committed batch changed,
    and the reaction events accepted in this region that it applied (they cross as events)."""

    components: list[Component] = []
    reactions: list[Event] = []


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Exchange)


def encode_exchange(exchange: Exchange) -> bytes:
    return _encoder.encode(exchange)


def decode_exchange(raw: bytes) -> Exchange:
    return _decoder.decode(raw)
