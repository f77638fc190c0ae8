"""A bot window the batch sees fill across two intervals: the first run counts an address's views,
the second, seeing the address rotate more agents within the same hour of event time, refuses them.
Through real `dag.test()` runs both publish, with no override, and the second records which views
it took back and by which rule."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from counting.catalog import CatalogRow
from counting.event import Event
from counting.settings import Settings
from tests.dags.test_tally_batch import HOUR_MS, _moment, _states
from tests.dags.test_validated_inputs import _batch_dag
from tests.logfiles import WriteLog, oracle_rows
from tests.writers import archived_until
from warehouse.baseline import current_baseline
from warehouse.migrate import migrate
from warehouse.store import get_run, open_store, upsert_catalog

_AIRFLOW_OWN_DEPRECATION = (
    r"ignore:The `airflow\.utils\.operator_helpers\.determine_kwargs` attribute is deprecated:FutureWarning"
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings(_AIRFLOW_OWN_DEPRECATION),
    pytest.mark.filterwarnings("ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"),
]

MINUTE_MS = 60_000
FARM = "203.0.113.50"


def _view(event_id: str, video: str, viewer: str, ts: int, ingest_ts: int, ip: str, agent: str) -> Event:
    return Event(
        event_id=event_id,
        type="view",
        video_id=video,
        ts=ts,
        user_id=viewer,
        session_id=f"session-{viewer}",
        ip=ip,
        user_agent=agent,
        watch_secs=60.0,
        video_duration_secs=120.0,
        ingest_ts=ingest_ts,
    )


def _agent(i: int) -> str:
    return f"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0.{6000 + i}.0 Safari/537.36"


def test_views_a_later_interval_proves_bots_are_taken_back_and_recorded(
    dag_bag: Any, tally_env: Settings, redis_client: redis.Redis, write_log: WriteLog
) -> None:
    settings = tally_env
    start = int(datetime(2026, 11, 24, 4, tzinfo=UTC).timestamp() * 1000)
    first, second = start + HOUR_MS, start + 2 * HOUR_MS
    # Six agents from one address in the hour [04:00, 05:00) of event time: counted (at most 8).
    early = [
        _view(
            f"farm-{i}",
            "rot",
            f"f{i}",
            start + (10 + i) * MINUTE_MS,
            start + (10 + i) * MINUTE_MS + 900,
            FARM,
            _agent(i),
        )
        for i in range(6)
    ]
    # Three more agents of the same address and hour, sent late: ingested in the next interval.
    late = [
        _view(
            f"farm-{i}",
            "rot",
            f"f{i}",
            start + (20 + i) * MINUTE_MS,
            first + (5 + i) * MINUTE_MS,
            FARM,
            _agent(i),
        )
        for i in range(6, 9)
    ]
    humans = [
        _view(f"human-{i}", "calm", f"h{i}", at, at + 700, f"198.51.100.{i + 1}", _agent(0))
        for i, at in enumerate(start + k * 7 * MINUTE_MS for k in range(1, 16))
    ]
    events = [*early, *late, *humans]
    write_log(settings.raw_dir, events)
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, [CatalogRow("rot", "c1", 120.0, True), CatalogRow("calm", "c2", 120.0, True)])
    archived_until(settings, second)
    assert oracle_rows(events, first)["rot"].views == 6
    assert oracle_rows(events, second)["rot"].views == 0  # the ninth agent proves the farm
    dag = _batch_dag(dag_bag)

    runs = [dag.test(logical_date=_moment(cutoff)) for cutoff in (first, second)]

    assert [run.state for run in runs] == ["success", "success"], [_states(run) for run in runs]
    served = current_baseline(settings.baselines_dir)
    assert served is not None and served.run_id == f"interval-{second}"
    assert served.rows == oracle_rows(events, second)
    with open_store(settings.store_url) as store:
        record = get_run(store, f"interval-{second}")
        earlier = get_run(store, f"interval-{first}")
    assert earlier is not None and earlier.corrections is None
    assert record is not None and record.allow_decrease_reason is None
    assert record.corrections == {
        "rot": {
            "served_views": 6,
            "views": 0,
            "taken_back_count": 6,
            "by_reason": {"agent_rotation": 6},
            "taken_back": [{"event_id": e.event_id, "reason": "agent_rotation"} for e in early],
            "unexplained": 0,
        }
    }
