"""The Spark job's bot filter on the generator's labelled traffic: at least 98 % of bot views
rejected, at most 0.5 % of human views."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import pytest
from pyspark.sql import DataFrame

from batch_layer.transform import REJECTED, classify
from counting import rules
from counting.event import Event, parse_event, stamped
from counting.traffic import HUMAN, TrafficConfig, generate

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
