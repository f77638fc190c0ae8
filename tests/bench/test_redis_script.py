"""`python -m bench.redis_script`: the write script and its cut variants run on a real redis-server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import redis_script
from speed_layer import script

# serial: the benchmark measures Redis's CPU time an event: alone on the machine.
pytestmark = [pytest.mark.integration, pytest.mark.serial]


def test_every_variant_runs_and_the_full_script_stores_every_offset(tmp_path: Path) -> None:
    now_ms = 1_780_272_000_000
    plans = redis_script.plans_of(3_000, now_ms)
    last: dict[int, int] = {}
    for plan in plans:
        last[plan.partition] = max(last.get(plan.partition, -1), plan.last_offset)

    result = redis_script.main(["--events", "3000", "--output", str(tmp_path / "out.json")])

    figures = result["redis_cpu_us_per_event"]
    assert list(figures) == ["unpack", "main_loop", "no_uniques", "no_marker_setnx", "full"]
    assert all(value > 0 for value in figures.values())
    assert result["offsets_stored"] == last
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads(json.dumps(result))


def test_the_cut_variants_are_cut_where_they_say() -> None:
    found = redis_script.variants(script.LUA)

    assert found["full"] == script.LUA
    assert "PFADD" not in found["main_loop"] and "HSETNX" in found["main_loop"]
    assert "PFADD" not in found["no_uniques"] and "ZINCRBY" in found["no_uniques"]
    assert "call('HSETNX', markers[m][1]" not in found["no_marker_setnx"]
