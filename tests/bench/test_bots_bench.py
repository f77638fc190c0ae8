"""The bot-filter benchmark in its quickest mode: every label's views are there, the bots whose signal
fires on every view are rejected, humans are not, and the speed layer served views."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bots
from counting.traffic import (
    AGENT_ROTATION,
    BOT_KINDS,
    DATACENTER,
    HEADLESS_FARM,
    HUMAN,
    REPLAY_LOOP,
    VELOCITY,
)

# Not serial: the test checks what the benchmark counts and that its figures are there, not their
# values, so it runs beside the others (the figures of record come from `python -m bench.…` alone).
pytestmark = [pytest.mark.slow, pytest.mark.integration]

# The kinds whose signal fires on each of their views (the batch sees a burst whole).
EVERY_VIEW = (HEADLESS_FARM, DATACENTER, VELOCITY, REPLAY_LOOP, AGENT_ROTATION)


def test_quick_bots_bench_rejects_the_bots_and_spares_the_humans(tmp_path: Path) -> None:
    out = tmp_path / "bots.json"
    result = bots.main(["--quick", "--out", str(out)])

    assert json.loads(out.read_text()) == result
    assert result["ok"] is True
    assert result["dead_letters"] == 0
    assert result["views_missing_from_batch"] == 0
    assert set(result["labels"]) == {HUMAN, *BOT_KINDS}
    for label, figures in result["labels"].items():
        assert figures["views"] > 0, label
        assert figures["flagged"] == figures["outcomes"].get("flagged", 0), label
        share = (figures["rejected"] + figures["flagged"]) / figures["views"]
        assert figures["rejected_or_flagged_share"] == round(share, 5), label
        assert sum(figures["reasons"].values()) == figures["rejected"], label
    for kind in EVERY_VIEW:
        assert result["labels"][kind]["rejected_share"] >= 0.98, kind
    assert result["labels"][HUMAN]["rejected_or_flagged_share"] <= 0.01
    assert result["human_rejected_or_flagged_share"] == result["labels"][HUMAN]["rejected_or_flagged_share"]
    assert result["speed_served_views"] > 0
    assert result["human_counted_views"] > 0
    assert set(result["targets_met"]) == {
        "bot_rejected_min_share",
        "human_rejected_or_flagged_share",
        "speed_over_human_before_batch",
    }
    assert result["rules_version"]
    assert result["machine"]["cpus"] >= 1
