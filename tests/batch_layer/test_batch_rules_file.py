"""The bot rules file through the real writers: the counter and a batch run count with the file the
settings name (equal to the oracle with the same rules, not the shipped ones), the run records the
file's version and keeps its rules, and the payout audit still proves the ledger after the file
changes again."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from batch_layer.audit import audit_payout
from batch_layer.payouts import run_payouts
from batch_layer.rules_used import run_bot_filter
from counting import bots
from counting.batchpaths import rules_used_path
from counting.botrules import DEFAULT_RULES_FILE, parse_rules
from counting.bots import BotFilter
from counting.catalog import CatalogRow
from counting.settings import Settings
from tests.logfiles import oracle_rows
from tests.rulesfiles import (
    EDITED_VELOCITY_LIMIT,
    EDITED_VERSION,
    edited_rules_text,
    edited_rules_views,
    write_edited_rules,
)
from tests.speed_layer.helpers import speed_counts
from tests.writers import writers
from warehouse.baseline import current_baseline
from warehouse.migrate import migrate
from warehouse.store import open_store, upsert_catalog

pytestmark = [pytest.mark.slow, pytest.mark.integration]
MINUTE_MS = 60_000


def test_the_counter_and_the_batch_count_with_the_settings_rules_file(
    settings: Settings, redis_client: redis.Redis, spark: SparkSession, tmp_path: Path
) -> None:
    rules_file = write_edited_rules(tmp_path)
    settings = settings.model_copy(update={"bot_rules_file": rules_file, "bucket_ms": MINUTE_MS})
    edited = BotFilter(parse_rules(edited_rules_text(), rules_file))
    start = (int(time.time() * 1000) // MINUTE_MS - 10) * MINUTE_MS
    events = edited_rules_views(start)
    cutoff = start + 2 * MINUTE_MS
    videos = sorted({e.video_id for e in events})
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, [CatalogRow(v, f"creator-{v}", 600.0, True) for v in videos])

    with writers(settings, lambda: spark) as tally:
        tally.ingest(events)
        tally.count()
        tally.archive()
        result = tally.batch(cutoff, run_id="rules-run")
        run_payouts(settings, "rules-run", cutoff, spark=spark)

    expected = oracle_rows(events, cutoff, edited)
    assert expected != oracle_rows(events, cutoff), "the edit must change some verdict"
    # The counter sees the burst's window fill: the first views up to the edited limit pass (the
    # batch corrects them); every other verdict is the batch's.
    burst = expected["vid-burst"].rejected[bots.ADDRESS_VELOCITY]
    speed_expected = {
        video: (row.views, row.rejected) for video, row in expected.items() if video != "vid-burst"
    } | {"vid-burst": (EDITED_VELOCITY_LIMIT, {bots.ADDRESS_VELOCITY: burst - EDITED_VELOCITY_LIMIT})}
    speed = {video: speed_counts(redis_client, video) for video in videos}
    assert {video: (c.views, c.rejected) for video, c in speed.items()} == speed_expected
    baseline = current_baseline(settings.baselines_dir)
    assert baseline is not None
    assert baseline.rows == expected
    assert result.rules_version == baseline.rules_version == edited.version
    assert edited.version.endswith(f"+{EDITED_VERSION}")
    assert rules_used_path(settings, "rules-run").exists()

    # The operator edits the file again (back to the shipped rules): the run's audit still counts
    # with the rules the run used, and proves every ledger row.
    rules_file.write_text(DEFAULT_RULES_FILE.read_text())
    assert run_bot_filter(settings, "rules-run").rules == edited.rules
    day = datetime.fromtimestamp(start / 1000, tz=UTC).date()
    for video in videos:
        if expected[video].views == 0:
            continue
        report = audit_payout(settings, f"creator-{video}", day)
        assert report.matches, report.render()
        assert report.log_views == expected[video].views
        assert not report.notes
