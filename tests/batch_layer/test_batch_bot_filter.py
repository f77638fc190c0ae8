"""The Spark job's bot filter on the generator's labelled traffic (at least 98 % of bot views
rejected, at most 0.5 % of human views), and its verdicts around the thresholds of the newer
signals and the allow-list equal to the oracle's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import pytest
from pyspark.sql import DataFrame, Row
from pyspark.testing import assertDataFrameEqual

from batch_layer.columns import REJECTED
from batch_layer.transform import classify, transform
from counting import bots, oracle, rules
from counting.botrules import parse_rules
from counting.bots import BotFilter
from counting.event import Event, parse_event, stamped
from counting.traffic import HUMAN, TrafficConfig, generate
from tests.batch_layer.test_batch_transform import row
from tests.rulesfiles import (
    agent_and_velocity_views,
    edited_rules_text,
    edited_rules_views,
    threshold_gamed_views,
)
from warehouse.baseline import COUNT_COLUMNS

pytestmark = pytest.mark.slow


def test_batch_rejects_bots_and_spares_humans(log_frame: Callable[[Sequence[Event]], DataFrame]) -> None:
    start = 1_795_000_000_000
    config = TrafficConfig(seed=31, videos=40, events=30_000, rate=300.0, start_ms=start, bot_fraction=0.15)
    events: list[Event] = []
    label_of: dict[str, str] = {}
    for item in generate(config):
        sent = start + item.send_at_ms
        event = stamped(parse_event(msgspec.json.encode(item.event), sent), sent)
        events.append(event)
        label_of.setdefault(event.event_id, item.label)

    rows = classify(log_frame(events)).where("type = 'view'").select("event_id", "outcome").collect()
    qualified = {e.event_id for e in events if rules.is_qualified_view(e)}
    outcomes = [(label_of[r["event_id"]], r["outcome"]) for r in rows if r["event_id"] in qualified]
    bots = [o for label, o in outcomes if label != HUMAN]
    humans = [o for label, o in outcomes if label == HUMAN]
    bot_recall = sum(o == REJECTED for o in bots) / len(bots)
    human_rejected = sum(o == REJECTED for o in humans) / len(humans)
    print(
        f"batch filter: {bot_recall:.2%} of {len(bots)} bot views rejected, "
        f"{human_rejected:.2%} of {len(humans)} human views rejected"
    )

    assert len(bots) > 1_000 and len(humans) > 1_000
    assert bot_recall >= 0.98
    assert human_rejected <= 0.005


def _oracle_rows(events: Sequence[Event], bot_filter: BotFilter) -> list[Row]:
    return [
        row(
            video,
            **{column: getattr(counts, column) for column in COUNT_COLUMNS},
            **{f"rejected_{reason}": n for reason, n in counts.rejected.items()},
        )
        for video, counts in oracle.count(events, None, bot_filter).items()
    ]


def test_the_spark_verdicts_equal_the_oracles_around_every_new_threshold(
    log_frame: Callable[[Sequence[Event]], DataFrame],
) -> None:
    """Watch ratio, threshold bunching (at and beside its minimum views and share, a video watched
    to its end, a view just past the window) and the allow-list, with the shipped and edited rules."""
    day = 1_795_046_400_000
    events = threshold_gamed_views(day) + edited_rules_views(day + 21 * 3_600_000)
    edited = BotFilter(parse_rules(edited_rules_text(), Path("edited.toml")))
    for bot_filter in (bots.SHIPPED, edited):
        expected = _oracle_rows(events, bot_filter)
        assertDataFrameEqual(transform(log_frame(events), bot_filter), expected)
    gamed = {r.video_id: r for r in _oracle_rows(events, bots.SHIPPED)}["vid-gamed"]
    assert gamed["rejected_threshold_bunching"] == 12  # the scenario is what its docstring says


def test_the_spark_verdicts_equal_the_oracles_around_the_address_and_agent_signals(
    log_frame: Callable[[Sequence[Event]], DataFrame],
) -> None:
    """The sliding 60 s of address velocity (a burst across a minute's edge, 30 and 31 in 60 s),
    agent rotation at and over its limit (blank and missing agents are none), missing and
    impossible agents, with the shipped and edited rules (a lower velocity limit)."""
    hour = 1_795_046_400_000 + 3_600_000
    events = agent_and_velocity_views(hour)
    edited = BotFilter(parse_rules(edited_rules_text(), Path("edited.toml")))
    for bot_filter in (bots.SHIPPED, edited):
        expected = _oracle_rows(events, bot_filter)
        assertDataFrameEqual(transform(log_frame(events), bot_filter), expected)
    counts = {r.video_id: r for r in _oracle_rows(events, bots.SHIPPED)}  # the scenario is what it says
    assert counts["vid-edge"]["rejected_address_velocity"] == 60
    assert (counts["vid-slide"]["views"], counts["vid-slide"]["rejected_address_velocity"]) == (31, 31)
    assert (counts["vid-agents"]["views"], counts["vid-agents"]["rejected_agent_rotation"]) == (17, 9)
    assert (counts["vid-missing"]["views"], counts["vid-missing"]["rejected_bad_ja3"]) == (1, 3)
    assert counts["vid-impossible"]["rejected_impossible_agent"] == 3
