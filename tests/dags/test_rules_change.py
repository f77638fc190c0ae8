"""A bot rules change through `tally_recompute`: the recompute of two days with an edited rules
file changes the baseline and the payouts of the day the edit touches only, records the new rules
version, and the payout audit proves every ledger row with the rules its run used."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis
from pyspark.sql import SparkSession

from batch_layer.audit import audit_payout
from counting import bots
from counting.botrules import DEFAULT_RULES_FILE, parse_rules
from counting.bots import BotFilter
from counting.catalog import CatalogRow
from counting.event import Event
from counting.rules import DAY_MS
from counting.settings import Settings
from tests.logfiles import oracle_rows
from tests.rulesfiles import threshold_gamed_views
from tests.writers import writers
from warehouse.baseline import current_baseline
from warehouse.migrate import migrate
from warehouse.store import LedgerRow, ledger_rows, open_store, upsert_catalog

_AIRFLOW_OWN_DEPRECATION = (
    r"ignore:The `airflow\.utils\.operator_helpers\.determine_kwargs` attribute is deprecated:FutureWarning"
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings(_AIRFLOW_OWN_DEPRECATION),
    pytest.mark.filterwarnings("ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"),
]


def _relabelled(events: list[Event], prefix: str) -> list[Event]:
    return [msgspec.structs.replace(e, event_id=f"{prefix}-{e.event_id}") for e in events]


def _ledger(settings: Settings, creators: list[str]) -> dict[tuple[str, date], LedgerRow]:
    with open_store(settings.store_url) as store:
        return {(row.creator_id, row.day): row for c in creators for row in ledger_rows(store, c)}


def _recompute(dag_bag: Any, first: date, last: date) -> None:
    dag = dag_bag.get_dag("tally_recompute")
    for task in dag.tasks:
        task.retries = 0
    run = dag.test(run_conf={"start": first.isoformat(), "end": last.isoformat()})
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert run.state == "success", states


def test_a_rules_change_recomputed_changes_the_days_it_touches_only(
    dag_bag: Any,
    tally_env: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = tally_env
    today = int(time.time() * 1000) // DAY_MS * DAY_MS
    day1, day2 = today - 2 * DAY_MS, today - DAY_MS
    # The same videos both days: only humans on the first, gamed views on the second.
    humans = [e for e in threshold_gamed_views(day1) if (e.watch_secs or 0) >= 31.0]
    events = _relabelled(humans, "d1") + _relabelled(threshold_gamed_views(day2), "d2")
    videos = sorted({e.video_id for e in events})
    creators = [f"creator-{v}" for v in videos]
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, [CatalogRow(v, f"creator-{v}", 1_200.0, True) for v in videos])
    with writers(settings, lambda: spark) as tally:
        tally.ingest(events)
        tally.archive()
    first, second = (datetime.fromtimestamp(d / 1000, tz=UTC).date() for d in (day1, day2))

    _recompute(dag_bag, first, second)
    before_rows = current_baseline(settings.baselines_dir)
    before = _ledger(settings, creators)

    edited = DEFAULT_RULES_FILE.read_text().replace("bunch_min_views = 10", "bunch_min_views = 1000")
    edited = edited.replace(f'version = "{bots.SHIPPED.rules.version}"', 'version = "2026.11.3-fewer"')
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text(edited)
    monkeypatch.setenv("TALLY_BOT_RULES_FILE", str(rules_file))
    _recompute(dag_bag, first, second)
    after_rows = current_baseline(settings.baselines_dir)
    after = _ledger(settings, creators)

    new_rules = BotFilter(parse_rules(edited, rules_file))
    assert before_rows is not None and after_rows is not None
    assert before_rows.rules_version == bots.SHIPPED.version
    assert after_rows.rules_version == new_rules.version
    cutoff = after_rows.cutoff
    assert before_rows.rows == oracle_rows(events, cutoff)
    assert after_rows.rows == oracle_rows(events, cutoff, new_rules)
    moved = {v for v in videos if before_rows.rows[v].views != after_rows.rows[v].views}
    assert moved == {"vid-gamed", "vid-share-in"}  # the two bunched days of the scenario
    # The payouts: the first day's rows are as they were; on the second, the gamed creators' grow.
    assert set(before) == set(after)
    for (creator, day), row in after.items():
        was = before[(creator, day)].monetizable_views
        if day == first or creator.removeprefix("creator-") not in moved:
            assert row.monetizable_views == was, (creator, day)
        else:
            assert row.monetizable_views > was, (creator, day)
        assert row.rules_version == new_rules.version
        report = audit_payout(settings, creator, day)
        assert report.matches, report.render()
