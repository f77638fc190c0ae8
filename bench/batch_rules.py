"""The batch counting rules as one DuckDB query (`bench/sql/batch_rules.sql`), rendered with the
constants of `counting`, so the benchmark compares Spark with the engine an analyst would reach for."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from counting import bots, rules
from warehouse.models import literal, render

SQL_PATH = Path(__file__).resolve().parent / "sql" / "batch_rules.sql"

# The SQL names each signal by its reason; its variables are `<reason>_weight` and `<reason>_rank`.
_SIGNAL_REASONS = frozenset(bots.REASONS)


def _networks_relation() -> str:
    """The shipped data-centre ranges as a VALUES relation of (version, first, last) integers."""
    rows = []
    for text in bots.SHIPPED.rules.addresses.datacenter:
        network = ipaddress.ip_network(text)
        first, last = int(network.network_address), int(network.broadcast_address)
        rows.append(f"({network.version}, {first}::uhugeint, {last}::uhugeint)")
    return "(values " + ", ".join(rows) + ") as t(version, first_address, last_address)"


def _reaction_states_relation() -> str:
    rows = ", ".join(f"({literal(kind)}, {literal(state)})" for kind, state in rules.REACTION_STATE.items())
    return f"(values {rows}) as t(type, state)"


def log_relation(files: Sequence[Path] | str) -> str:
    """`read_parquet` over the log's files (or a glob), with the hive partition columns."""
    source = (
        literal(files) if isinstance(files, str) else "[" + ", ".join(literal(str(f)) for f in files) + "]"
    )
    return f"read_parquet({source}, hive_partitioning = true)"


def rules_variables(log: str, cutoff_ms: int) -> dict[str, str]:
    """Every variable of the rules SQL: the log relation, the cutoff and the constants of counting."""
    variables = {
        "log": log,
        "cutoff": literal(cutoff_ms),
        "anon_prefix": literal(rules.ANON_VIEWER_PREFIX),
        "minute_ms": literal(rules.MINUTE_MS),
        "day_ms": literal(rules.DAY_MS),
        "view_window_ms": literal(rules.VIEW_WINDOW_MS),
        "min_watch_secs": literal(rules.MIN_WATCH_SECS),
        "scripted_agent_pattern": literal(bots.SHIPPED.scripted_pattern),
        "bad_ja3": "(" + ", ".join(literal(v) for v in sorted(bots.SHIPPED.bad_ja3)) + ")",
        "datacenter_networks": _networks_relation(),
        "max_watch_secs": literal(bots.SHIPPED.max_watch_secs),
        "watch_overrun_factor": literal(bots.SHIPPED.watch_overrun_factor),
        "watch_overrun_slack_secs": literal(bots.SHIPPED.watch_overrun_slack_secs),
        "max_views_per_address_minute": literal(bots.SHIPPED.max_views_per_address_minute),
        "max_replays_per_day": literal(bots.SHIPPED.max_replays_per_day),
        "reject_score": literal(bots.SHIPPED.reject_score),
        "min_watch_ratio": literal(bots.SHIPPED.min_watch_ratio),
        "near_threshold_below": literal(bots.SHIPPED.near_threshold_below),
        "bunch_window_secs": literal(bots.SHIPPED.bunch_window_secs),
        "bunch_min_views": literal(bots.SHIPPED.bunch_min_views),
        "bunch_min_share": literal(bots.SHIPPED.bunch_min_share),
        "reaction_states": _reaction_states_relation(),
        "liked": literal(rules.LIKED),
        "disliked": literal(rules.DISLIKED),
    }
    for rank, signal in enumerate(tuple(bots.SHIPPED.signals.values())):
        variables[f"{signal.name}_weight"] = literal(float(signal.weight))
        variables[f"{signal.name}_rank"] = literal(rank)
    return variables


def rules_sql(log: str, cutoff_ms: int) -> str:
    """The rules query, rendered: per-video counts with the baseline's columns, ordered by video."""
    return render(SQL_PATH.read_text(), rules_variables(log, cutoff_ms))


def count_videos(con: duckdb.DuckDBPyConnection, log: str, cutoff_ms: int) -> pa.Table:
    """Run the rules query on `con` and return its per-video counts as an Arrow table."""
    return con.sql(rules_sql(log, cutoff_ms)).to_arrow_table()
