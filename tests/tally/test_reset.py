"""`tally up --reset` forgets the log: with its files, the store's records of having validated or
quarantined them (else the next run would refuse their absence); the catalog stays."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from counting.catalog import CatalogRow
from counting.settings import Settings
from tally.launch import reset_state
from tests.logfiles import write_log
from tests.writers import archived_until
from warehouse.migrate import migrate
from warehouse.store import catalog, open_store, quarantined_files, upsert_catalog, validated_files

pytestmark = pytest.mark.filterwarnings(
    "ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"
)


def test_a_reset_forgets_the_files_of_the_log_it_wipes(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    from quality import validate_raw
    from quality.quarantine import quarantine
    from tests.batch_layer.test_batch_payouts import TRAFFIC, traffic_events

    settings = Settings(data_dir=tmp_path / "data", redis_url=redis_url, bucket_ms=60_000)
    events = traffic_events(TRAFFIC)[:200]
    write_log(settings.raw_dir, events)
    cutoff = (max(e.ingest_ts or 0 for e in events) // 60_000 + 1) * 60_000
    archived_until(settings, cutoff)
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, [CatalogRow("v1", "c1", 60.0, True)])
    assert validate_raw(settings, cutoff).success
    first = sorted(settings.raw_dir.rglob("*.parquet"))[0]
    quarantine(settings, first.relative_to(settings.raw_dir).as_posix(), "a test")
    with open_store(settings.store_url) as store:
        assert validated_files(store) and quarantined_files(store)

    reset_state(settings)

    assert not settings.raw_dir.exists() and not settings.quarantine_dir.exists()
    with open_store(settings.store_url) as store:
        assert (validated_files(store), quarantined_files(store)) == ({}, {})
        assert list(catalog(store)) == ["v1"]
