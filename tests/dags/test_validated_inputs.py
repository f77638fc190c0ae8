"""Validated means published, through real `dag.test()` runs on small data (real Spark, real Great
Expectations, a real Airflow metadata DB): a bad file in an interval no run validated stops the next
run, whatever interval it belongs to; a data repair that lowers the counts is blocked until an
operator gives a reason, which is then recorded with the run and copied into the warehouse."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
import redis
import sqlalchemy as sa

from counting.event import Event
from counting.settings import Settings
from counting.traffic import TrafficConfig, catalog_rows
from tally import pipeline
from tests.dags.test_tally_batch import HOUR_MS, _moment, _page_text, _states, _traffic
from tests.logfiles import WriteLog, hour_folder, log_rows, oracle_rows, write_rows
from tests.writers import archived_until
from warehouse import tables
from warehouse.baseline import current_baseline
from warehouse.migrate import migrate
from warehouse.store import get_run, open_store, upsert_catalog, validated_files

_AIRFLOW_OWN_DEPRECATION = (
    r"ignore:The `airflow\.utils\.operator_helpers\.determine_kwargs` attribute is deprecated:FutureWarning"
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings(_AIRFLOW_OWN_DEPRECATION),
    pytest.mark.filterwarnings("ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"),
]

BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36"


def _load_catalog(settings: Settings, config: TrafficConfig) -> None:
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, catalog_rows(config))


def _ledger_runs(settings: Settings) -> set[str]:
    """The runs that have rows in the payout ledger."""
    engine = sa.create_engine(settings.store_url)
    try:
        with engine.connect() as connection:
            return set(connection.execute(sa.select(tables.payout_ledger.c.run_id).distinct()).scalars())
    finally:
        engine.dispose()


def _batch_dag(dag_bag: Any) -> Any:
    dag = dag_bag.get_dag("tally_batch")
    for task in dag.tasks:
        if task.task_id != "validate_raw":  # a failed validation is never retried anyway
            task.retries = 0  # any other failure here is a bug: show it at once
    return dag


def test_a_bad_file_in_a_skipped_interval_stops_the_next_run(
    dag_bag: Any, tally_env: Settings, redis_client: redis.Redis, write_log: WriteLog
) -> None:
    settings = tally_env
    start = int(datetime(2026, 11, 22, 4, tzinfo=UTC).timestamp() * 1000)
    first, later = start + HOUR_MS, start + 3 * HOUR_MS
    config, traffic = _traffic(start, seed=11)
    events = [e for e in traffic if (e.ingest_ts or 0) < later - HOUR_MS]  # [06:00, 07:00) gets none
    write_log(settings.raw_dir, events)
    _load_catalog(settings, config)
    archived_until(settings, later + HOUR_MS)
    dag = _batch_dag(dag_bag)

    run = dag.test(logical_date=_moment(first))  # the interval [04:00, 05:00)

    assert run.state == "success", _states(run)
    assert _ledger_runs(settings) == {f"interval-{first}"}
    # Airflow skips [05:00, 06:00) (paused, restarted, catchup off); a file of that hour is bad.
    skipped = [e for e in events if first <= (e.ingest_ts or 0) < first + HOUR_MS][:2]
    bad = log_rows(skipped, first_offset=70_000)
    bad[0]["event_id"] = None
    bad_file = write_rows(hour_folder(settings.raw_dir, first), "events-p0-70000-70001.parquet", bad)
    assert max(e.ingest_ts or 0 for e in events) >= first + HOUR_MS // 2  # the skipped hour has traffic

    run = dag.test(logical_date=_moment(later))  # the interval [06:00, 07:00)

    states = _states(run)
    assert run.state == "failed", states
    assert states["validate_raw"] == "failed"
    [validation] = [ti for ti in run.get_task_instances() if ti.task_id == "validate_raw"]
    assert validation.try_number == 1
    downstream = ("compute", "validate_outputs", "publish", "write_payouts", "build_warehouse")
    assert {states[task] for task in downstream} == {"upstream_failed"}
    served = current_baseline(settings.baselines_dir)
    assert served is not None and (served.run_id, served.cutoff) == (f"interval-{first}", first)
    assert _ledger_runs(settings) == {f"interval-{first}"}  # no payout of the failed run
    with open_store(settings.store_url) as store:
        assert get_run(store, f"interval-{later}") is None
        recorded = validated_files(store)
    relative = bad_file.relative_to(settings.raw_dir).as_posix()
    assert relative not in recorded  # nothing of a failed validation is recorded as validated
    assert {r.validated_by for r in recorded.values()} == {f"interval-{first}"}
    [page] = [p for p in (settings.quality_dir / "gx").rglob("*.html") if f"raw-interval-{later}-" in str(p)]
    assert "event_id is present 1 unexpected values found" in _page_text(page)
    # The verdict counts the rows of the run's own interval, not those of whole hour partitions.
    from quality import ValidationFailed  # (imports Great Expectations: inside the test's filters)

    with pytest.raises(ValidationFailed) as failed:
        pipeline.validate_raw(settings, later - HOUR_MS, later, f"interval-{later}")
    verdict = str(failed.value).splitlines()[0]
    assert "FAILED" in verdict
    assert (
        "0 of them ingested in the run's interval [2026-11-22 06:00:00 UTC, 2026-11-22 07:00:00 UTC)"
        in verdict
    )
    assert relative in str(failed.value)

    bad_file.unlink()  # the repair: the bad file is gone, the skipped hour's good files stay

    run = dag.test(logical_date=_moment(later + HOUR_MS))

    assert run.state == "success", _states(run)
    served = current_baseline(settings.baselines_dir)
    assert served is not None and served.run_id == f"interval-{later + HOUR_MS}"
    assert served.rows == oracle_rows(events, later + HOUR_MS)


def _replayed_views(video_id: str, hour_start: int, count: int) -> list[Event]:
    """Views that pass every rule (humans, distinct addresses), replayed by mistake into the log:
    valid rows, wrong data, which no suite can tell from real traffic."""
    return [
        Event(
            event_id=f"replay-{i}",
            type="view",
            video_id=video_id,
            ts=hour_start + 60_000 + i * 1_000,
            user_id=f"replay-user-{i}",
            session_id=f"replay-session-{i}",
            ip=f"81.2.{70 + i // 250}.{i % 250 + 1}",
            user_agent=BROWSER,
            watch_secs=60.0,
            video_duration_secs=120.0,
            ingest_ts=hour_start + 60_500 + i * 1_000,
        )
        for i in range(count)
    ]


def _warehouse_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_a_repair_that_lowers_the_counts_publishes_only_with_a_recorded_reason(
    dag_bag: Any, tally_env: Settings, redis_client: redis.Redis, write_log: WriteLog
) -> None:
    settings = tally_env
    start = int(datetime(2026, 11, 23, 4, tzinfo=UTC).timestamp() * 1000)
    first, second, third = start + HOUR_MS, start + 2 * HOUR_MS, start + 3 * HOUR_MS
    config, events = _traffic(start, seed=12)
    write_log(settings.raw_dir, events)
    _load_catalog(settings, config)
    monetized = next(v for v in catalog_rows(config) if v.monetized)
    replayed = _replayed_views(monetized.video_id, start, 300)
    replay_file = write_rows(
        hour_folder(settings.raw_dir, start), "events-p9-0-299.parquet", log_rows(replayed, first_offset=0)
    )
    inflated = oracle_rows([*events, *replayed], first)[monetized.video_id].views
    assert inflated - oracle_rows(events, first)[monetized.video_id].views == 300  # all counted
    assert oracle_rows(events, second)[monetized.video_id].views < inflated
    archived_until(settings, third)
    dag = _batch_dag(dag_bag)

    run = dag.test(logical_date=_moment(first))  # publishes the replayed views, which pass every rule

    assert run.state == "success", _states(run)
    served = current_baseline(settings.baselines_dir)
    assert served is not None and served.rows[monetized.video_id].views == inflated

    replay_file.unlink()  # the repair

    blocked = dag.test(logical_date=_moment(second))

    states = _states(blocked)
    assert blocked.state == "failed", states
    assert states["validate_raw"] == "failed"  # a validated file is gone: its views would drop unseen
    downstream = ("compute", "validate_outputs", "publish", "write_payouts", "build_warehouse")
    assert {states[t] for t in downstream} == {"upstream_failed"}
    served = current_baseline(settings.baselines_dir)
    assert served is not None and served.run_id == f"interval-{first}"
    assert _ledger_runs(settings) == {f"interval-{first}"}
    from quality import QualityError  # (imports Great Expectations: inside the test's filters)
    from quality.quarantine import quarantine

    relative = replay_file.relative_to(settings.raw_dir).as_posix()
    with pytest.raises(QualityError, match="gone from the log") as gone:
        pipeline.validate_raw(settings, first, second, f"interval-{second}")
    assert f"{relative} (300 rows, validated by interval-{first}" in str(gone.value)

    reason = f"removed {replay_file.name}: a load test replayed into the log (ticket OPS-42)"
    quarantine(settings, relative, reason)  # `tally batch quarantine FILE --reason`: the removal recorded
    allowed = dag.test(logical_date=_moment(third), run_conf={"allow_decrease_reason": reason})

    assert allowed.state == "success", _states(allowed)
    served = current_baseline(settings.baselines_dir)
    assert served is not None and served.run_id == f"interval-{third}"
    assert served.rows == oracle_rows(events, third)
    assert served.rows[monetized.video_id].views < inflated
    with open_store(settings.store_url) as store:
        record = get_run(store, f"interval-{third}")
        assert get_run(store, f"interval-{second}") is None
    assert record is not None and record.published_at is not None
    assert (record.allow_decrease_reason, record.skip_validation, record.forced) == (reason, False, False)
    assert record.excluded_files == {relative: reason}
    assert record.corrections is not None
    fell = record.corrections[monetized.video_id]
    assert (fell["served_views"], fell["views"]) == (inflated, served.rows[monetized.video_id].views)
    assert fell["unexplained"] > 0  # no rule took the replayed views back: the reason allowed it
    assert _ledger_runs(settings) == {f"interval-{first}", f"interval-{third}"}
    runs = _warehouse_rows(
        settings.warehouse_path,
        "select run_id, allow_decrease_reason from stg_batch_runs order by cutoff",
    )
    assert runs == [(f"interval-{first}", None), (f"interval-{third}", reason)]
    current = _warehouse_rows(
        settings.warehouse_path,
        "select distinct run_id, allow_decrease_reason from mart_creator_payouts",
    )
    assert current == [(f"interval-{third}", reason)]
