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

# What Python's `str.strip` strips (a blank agent is a missing one).
_WHITESPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())


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
        "velocity_span_ms": literal(rules.VELOCITY_WINDOW_MS - 1),
        "hour_ms": literal(rules.HOUR_MS),
        "max_agents_per_address_hour": literal(bots.SHIPPED.max_agents_per_address_hour),
        "impossible_agent_pattern": literal(bots.SHIPPED.impossible_pattern),
        "whitespace": literal(_WHITESPACE),
        "max_replays_per_day": literal(bots.SHIPPED.max_replays_per_day),
        "reject_score": literal(bots.SHIPPED.reject_score),
        "soft_score": literal(bots.SHIPPED.soft_score),
        "min_watch_ratio": literal(bots.SHIPPED.min_watch_ratio),
        "near_threshold_below": literal(bots.SHIPPED.near_threshold_below),
        "bunch_window_secs": literal(bots.SHIPPED.bunch_window_secs),
        "bunch_min_views": literal(bots.SHIPPED.bunch_min_views),
        "bunch_min_share": literal(bots.SHIPPED.bunch_min_share),
        "reaction_states": _reaction_states_relation(),
        "liked": literal(rules.LIKED),
        "disliked": literal(rules.DISLIKED),
    }
    variables.update(_signal_variables())
    return variables


def _signal_variables() -> dict[str, str]:
    """The SQL of every signal, from `counting.bots.REASONS` and the shipped weights: the score (the
    weights of the hits, `hit_<reason>`), that of the static signals alone, the candidates of the
    reason (heaviest first, ties to the first listed) and the per-reason counts."""
    signals = [bots.SHIPPED.signals[reason] for reason in bots.REASONS]
    window = {bots.ADDRESS_VELOCITY, bots.REPLAY_RATE, bots.THRESHOLD_BUNCHING, bots.AGENT_ROTATION}
    return {
        "static_score": " + ".join(
            f"(case when hit_{s.name} then {literal(float(s.weight))} else 0.0 end)"
            for s in signals
            if s.name not in window
        ),
        "score": "\n        + ".join(
            f"(case when hit_{s.name} then {literal(float(s.weight))} else 0.0 end)" for s in signals
        ),
        "reason_candidates": ",\n                        ".join(
            f"{{'weight': -({literal(float(s.weight))}), 'rank': {rank}, 'reason': {literal(s.name)}, "
            f"'hit': hit_{s.name}}}"
            for rank, s in enumerate(signals)
        ),
        "rejected_counts": ",\n        ".join(
            f"count_if(outcome = 'rejected' and reason = {literal(s.name)}) as rejected_{s.name}"
            for s in signals
        ),
        "rejected_columns": ",\n        ".join(
            f"coalesce(view_counts.rejected_{s.name}, 0)::bigint as rejected_{s.name}" for s in signals
        ),
    }


def rules_sql(log: str, cutoff_ms: int) -> str:
    """The rules query, rendered: per-video counts with the baseline's columns, ordered by video."""
    return render(SQL_PATH.read_text(), rules_variables(log, cutoff_ms))


def count_videos(con: duckdb.DuckDBPyConnection, log: str, cutoff_ms: int) -> pa.Table:
    """Run the rules query on `con` and return its per-video counts as an Arrow table."""
    return con.sql(rules_sql(log, cutoff_ms)).to_arrow_table()
