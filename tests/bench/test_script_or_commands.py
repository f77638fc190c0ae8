"""`python -m bench.script_or_commands`: both passes write the same thing, so the benchmark compares
like with like, and it runs end to end on a redis-server of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from bench import script_or_commands

pytestmark = pytest.mark.integration


def _stored(client: redis.Redis, videos: int) -> list[object]:
    return [(client.hgetall(f"v{n}"), client.zrange(f"p{n}", 0, -1, withscores=True)) for n in range(videos)]


def test_the_script_and_the_commands_store_the_same_values(redis_client: redis.Redis) -> None:
    videos = [script_or_commands.video(n, 5_000) for n in range(3)]  # over one chunk of the script
    script_or_commands.write_pass(redis_client, "script", videos)
    by_script = _stored(redis_client, 3)
    script_or_commands.write_pass(redis_client, "commands", videos)

    assert _stored(redis_client, 3) == by_script
    assert sum(len(fields) for fields, _ in by_script) == 15_000  # type: ignore[misc]


def test_a_run_prints_and_writes_redis_cpu_for_each_way(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = script_or_commands.main(["--elements", "200", "--rounds", "3", "--output", str(out)])

    # Redis's CPU clock may not tick over so small a run: the figures are only checked to be there.
    assert result["script_redis_us_per_pair"] >= 0 and result["commands_redis_us_per_pair"] >= 0
    assert [len(runs) for runs in result["runs_redis_us_per_pair"].values()] == [3, 3]
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
