"""What the state counter plans for a micro-batch: each partition's commit (its changelog entry,
snapshot, counts of what it applied, plans to announce and hand-offs due), and a partition this
worker owns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from counting.values import ShardPlan
from speed_layer.errors import PoisonRecord
from speed_layer.records import Record
from speed_layer.state.partition import PartitionState
from speed_layer.state.partition_store import Chunk
from speed_layer.state.snapshot import SnapshotBuild


@dataclass
class Commit:
    """One partition's part of a planned batch."""

    partition: int
    generation: int
    first_offset: int
    last_offset: int
    # The partition's state the batch was planned on: its write sinks that state's values, even when the
    # worker has released the partition or claimed it again since.
    owned: Owned
    entry: dict[str, Any] = field(default_factory=dict)
    records: int = 0
    events: int = 0
    applied: int = 0
    duplicates: int = 0
    skipped: int = 0
    held: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    chunk: Chunk | None = None  # of a snapshot build: msgpack when planned, compressed by the write
    build: SnapshotBuild | None = None  # the build the chunk is of
    encoded: bytes = b""
    sketches: bytes = b""
    same_offset: bool = False  # no new record, but changes (a hand-off taken over, a plan)
    announce: dict[str, ShardPlan] = field(default_factory=dict)
    closing: list[str] = field(default_factory=list)

    @property
    def due(self) -> bool:
        """Whether it commits anything."""
        return self.last_offset >= self.first_offset or self.same_offset


@dataclass
class StatePlan:
    """A planned micro-batch: each partition's changes to commit, the records that could not be
    decoded (for the dead-letter topic) and the hot videos whose shard counts it raised."""

    topic: str
    commits: list[Commit] = field(default_factory=list)
    dead_letters: list[tuple[Record, PoisonRecord]] = field(default_factory=list)
    hot: dict[str, int] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return sum(c.events for c in self.commits)

    @property
    def positions(self) -> list[tuple[str, int, int]]:
        return [(self.topic, c.partition, c.last_offset) for c in self.commits]


@dataclass
class Owned:
    state: PartitionState
    generation: int
    log_bytes: int = 0  # of the changelog entries a restore reads after the snapshot
    snapshot_bytes: int = 0  # of the snapshot's chunks
    build: SnapshotBuild | None = None  # a snapshot being built, a chunk a batch
    # Videos whose hand-off a planned commit will write: a batch planned while that commit is being
    # written does not write it again.
    handing: set[str] = field(default_factory=set)
