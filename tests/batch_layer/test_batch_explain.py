"""The explanations a batch run keeps, through the real writers (ingest, counter, archiver, a real
run): every view the oracle refuses or flags, and no other, with its verdict, reason, score and
signals, and the run's thresholds and rules version; read back as the serving layer reads them."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
import redis
from pyspark.sql import SparkSession

from counting import bots, oracle
from counting.settings import Settings
from tests.rulesfiles import agent_and_velocity_views, threshold_gamed_views
from tests.writers import writers
from warehouse.explanations import (
    EXPLAINED_SCHEMA,
    FLAGGED,
    REFUSED,
    explained_path,
    explanation_of,
    explanations_of_video,
)

pytestmark = [pytest.mark.slow, pytest.mark.integration]
HOUR_MS = 3_600_000


def test_a_run_explains_every_view_it_refuses_or_flags_and_no_other(
    settings: Settings, redis_client: redis.Redis, spark: SparkSession
) -> None:
    settings = settings.model_copy(update={"bucket_ms": 60_000})
    hour = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    events = agent_and_velocity_views(hour) + threshold_gamed_views(hour - 21 * HOUR_MS)
    cutoff = hour + 2 * HOUR_MS
    with writers(settings, lambda: spark) as tally:
        tally.ingest(events)
        tally.count()
        tally.archive()
        result = tally.batch(cutoff, run_id="explained-run")

    judged = oracle.judged_views(oracle.dedup(events))
    expected = {
        j.event.event_id: (REFUSED if j.outcome == oracle.REJECTED else FLAGGED, j.reason, j.mask)
        for j in judged
        if j.outcome == oracle.REJECTED or j.flagged
    }
    table = pq.read_table(explained_path(settings.batch_dir, result.run_id))
    assert [(f.name, f.type) for f in table.schema] == [(f.name, f.type) for f in EXPLAINED_SCHEMA]
    rows = {row["event_id"]: row for row in table.to_pylist()}
    assert rows.keys() == expected.keys()
    verdicts = {verdict for verdict, _, _ in expected.values()}
    assert verdicts == {REFUSED, FLAGGED}  # the scenario has both
    for event_id, (verdict, reason, mask) in expected.items():
        row = rows[event_id]
        signals = bots.SHIPPED.signals_of(mask)
        assert (row["verdict"], row["reason"]) == (verdict, reason), event_id
        assert row["signals"] == [s.name for s in signals], event_id
        assert row["score"] == bots.score(signals), event_id
        assert (row["reject_score"], row["soft_score"]) == (
            bots.SHIPPED.reject_score,
            bots.SHIPPED.soft_score,
        )
        assert row["rules_version"] == result.rules_version == bots.SHIPPED.version
    # What the serving layer reads: one view, a video's, a view neither refused nor flagged.
    some = next(iter(expected))
    assert explanation_of(settings.batch_dir, result.run_id, some) == rows[some]
    accepted = next(j.event.event_id for j in judged if j.event.event_id not in expected)
    assert explanation_of(settings.batch_dir, result.run_id, accepted) is None
    edge = explanations_of_video(settings.batch_dir, result.run_id, "vid-edge")
    assert edge is not None and {r["event_id"] for r in edge} == {
        j.event.event_id for j in judged if j.event.video_id == "vid-edge"
    }
    with pytest.raises(FileNotFoundError):
        explanation_of(settings.batch_dir, "no-such-run", some)
