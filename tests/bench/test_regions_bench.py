"""`python -m bench.regions` with two regions, each a whole local stack (`tally up` with
TALLY_REGION_PEERS: its own broker, Redis, counter, archiver, replicator and APIs; one log root):
the batch over the union of the logs gives every region the oracle's counts as baseline + its
buckets, no region refuses a write while the link is cut, they diverge during the cut and the stats
answer ages the cut peer's components, after it every region serves the oracle's counts of all
events, and a region restarted empty (Redis lost) catches up from its log and the other's
components."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import regions

# Not serial: the test checks counts and convergence within the benchmark's waits (180 s each), not
# how long they took; a write refused under load is retried (`post_traffic`), so it runs beside the
# others (the figures of record come from `python -m bench.regions` alone).
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_regions_converge_on_the_oracles_counts_after_a_cut(tmp_path: Path) -> None:
    cut_s = 3.0
    out = tmp_path / "regions.json"
    result = regions.main(["--regions", "2", "--events", "200", "--cut-s", str(cut_s), "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["events"] == 800  # two phases of 200 events in each of two regions, all acknowledged
    assert result["batch_cutoff"] and result["baseline_everywhere"] is True
    assert result["refused_during_cut"] == 0
    assert result["max_divergence"] > 0  # the cut kept each region's new events from the other
    assert result["cut_peer_age_ms"] >= cut_s * 1000
    assert (result["lost"], result["doubled"], result["converged"]) == (0, 0, True)
    assert result["restart_converged"] is True
