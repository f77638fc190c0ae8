"""The rejected-reason columns of the models come from the one list of reasons: today's reasons give
today's columns, and a new signal's reason shows in every model without editing its SQL."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pytest

from counting.signals import REASONS
from warehouse.build import reason_variables
from warehouse.models import MODELS_DIR, Model, load_models, render

NEW = "new_signal"
MODELS = ("stg_baseline", "stg_daily_video", "mart_daily_video_stats", "mart_rejected_by_reason_day")


def _models() -> dict[str, Model]:
    return {m.name: m for m in load_models(MODELS_DIR)}


def _build(reasons: Sequence[str], daily: list[tuple[object, ...]]) -> duckdb.DuckDBPyConnection:
    """The four models on a hand-made daily table, a baseline of one row and a catalog of one
    video, rendered with the reason columns of `reasons`."""
    con = duckdb.connect()
    rejected = ", ".join(f"rejected_{r} bigint" for r in reasons)
    con.execute(
        "create table daily_src (date date, video_id varchar, views bigint, likes bigint, dislikes bigint, "
        "unique_viewers bigint, short_views bigint, repeat_views bigint, flagged bigint, "
        f"{rejected}, run_id varchar, rules_version varchar)"
    )
    con.executemany(f"insert into daily_src values ({', '.join('?' * (len(reasons) + 11))})", daily)
    con.execute(
        "create table baseline_src (video_id varchar, views bigint, likes bigint, dislikes bigint, "
        f"unique_viewers bigint, short_views bigint, repeat_views bigint, flagged bigint, {rejected})"
    )
    numbered = ", ".join(str(i + 1) for i in range(len(reasons)))  # reason i: i + 1 rejected
    con.execute(f"insert into baseline_src values ('v1', 9, 1, 0, 5, 2, 1, 0, {numbered})")
    con.execute("create table stg_videos as select 'v1' as video_id, 'c1' as creator_id, true as monetized")
    variables = {
        **reason_variables(reasons),
        "daily_video": "daily_src",
        "baseline": "baseline_src",
        "baseline_run_id": "'run-1'",
        "baseline_cutoff": "7200000",
        "baseline_rules_version": "'r1'",
    }
    models = _models()
    for name in MODELS:
        kind = "view" if name.startswith("stg_") else "table"
        con.execute(f"create {kind} {name} as {render(models[name].sql, variables)}")
    return con


def _columns(con: duckdb.DuckDBPyConnection, model: str) -> list[str]:
    return [row[0] for row in con.execute(f"describe {model}").fetchall()]


def _daily_row(day: str, video: str, rejected: Sequence[int]) -> tuple[object, ...]:
    return (day, video, 3, 1, 0, 2, 1, 0, 0, *rejected, "run-1", "r1")


def test_todays_reasons_give_todays_columns() -> None:
    zero = [0] * len(REASONS)
    con = _build(REASONS, [_daily_row("2026-11-01", "v1", zero)])

    rejected = [f"rejected_{r}" for r in REASONS]
    assert _columns(con, "stg_baseline") == [
        "video_id",
        "views",
        "likes",
        "dislikes",
        "unique_viewers",
        "short_views",
        "repeat_views",
        *rejected,
        "run_id",
        "cutoff",
        "cutoff_time",
        "rules_version",
    ]
    assert _columns(con, "stg_daily_video") == [
        "date",
        "video_id",
        "views",
        "likes",
        "dislikes",
        "unique_viewers",
        "short_views",
        "repeat_views",
        "flagged",
        *rejected,
        "run_id",
        "rules_version",
    ]


@pytest.mark.parametrize("model", MODELS)
def test_every_model_renders_without_a_reason_typed_in_its_sql(model: str) -> None:
    """No model names a reason: they are all rendered from the list."""
    sql = _models()[model].sql
    assert [r for r in REASONS if r in sql] == []


def test_a_new_reason_shows_in_every_model() -> None:
    reasons = (*REASONS, NEW)
    day1 = [0] * len(REASONS) + [4]
    day1[0] = 1  # one view rejected as the first reason, four as the new one
    con = _build(
        reasons,
        [_daily_row("2026-11-01", "v1", day1), _daily_row("2026-11-02", "v1", [0] * len(reasons))],
    )

    assert f"rejected_{NEW}" in _columns(con, "stg_baseline")
    assert con.execute(f"select rejected_{NEW} from stg_baseline").fetchall() == [(len(reasons),)]
    assert f"rejected_{NEW}" in _columns(con, "stg_daily_video")
    assert con.execute(
        "select date::varchar, rejected_views from mart_daily_video_stats order by date"
    ).fetchall() == [("2026-11-01", 5), ("2026-11-02", 0)]
    assert con.execute(
        "select date::varchar, reason, rejected_views, videos, share_of_day::double "
        "from mart_rejected_by_reason_day"
    ).fetchall() == [("2026-11-01", NEW, 4, 1, 0.8), ("2026-11-01", REASONS[0], 1, 1, 0.2)]
