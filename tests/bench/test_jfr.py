"""`bench.jfr`: task samples by stage. The parsing is checked on a real recording by
`test_batch_stages.py` (a Spark run with `--profile`); here, the attribution on made-up samples."""

from __future__ import annotations

from typing import Any

from bench.jfr import Sample, _sample, hot_methods


def _stage(stage: int, start_ms: float, wall_s: float) -> dict[str, Any]:
    return {"stage": stage, "start_ms": start_ms, "wall_s": wall_s}


def test_each_sample_counts_for_the_stage_running_at_its_time() -> None:
    stages = [_stage(1, 1_000, 1.0), _stage(2, 3_000, 1.0)]
    samples = [Sample(1_100, "A.a"), Sample(1_200, "A.a"), Sample(1_900, "B.b"), Sample(3_500, "C.c")]
    samples.append(Sample(2_500, "Idle.between"))  # no stage runs then

    hot = hot_methods(samples, stages)

    assert hot == {
        1: {"samples": 3, "methods": [["A.a", 2], ["B.b", 1]]},
        2: {"samples": 1, "methods": [["C.c", 1]]},
    }


def test_overlapping_stages_give_a_sample_to_the_one_started_last() -> None:
    stages = [_stage(1, 0, 10.0), _stage(2, 4_000, 2.0)]

    hot = hot_methods([Sample(5_000, "X.x"), Sample(7_000, "Y.y")], stages)

    assert hot[2]["methods"] == [["X.x", 1]]
    assert hot[1]["methods"] == [["Y.y", 1]]


def test_only_the_top_methods_are_listed() -> None:
    samples = [Sample(10, f"M.m{i}") for i in range(8) for _ in range(i + 1)]

    hot = hot_methods(samples, [_stage(1, 0, 1.0)], top=2)

    assert hot[1]["samples"] == 36
    assert [name for name, _ in hot[1]["methods"]] == ["M.m7", "M.m6"]


def _event(thread: str, frames: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "values": {
            "startTime": "2026-11-25T01:49:53.500Z",
            "sampledThread": {"javaName": thread},
            "stackTrace": {"frames": frames},
        }
    }


def test_a_task_threads_event_becomes_its_top_method_and_others_are_left_out() -> None:
    frame = {
        "method": {"type": {"name": "org/apache/spark/unsafe/map/BytesToBytesMap"}, "name": "safeLookup"}
    }

    sample = _sample(_event("Executor task launch worker for task 0.0", [frame]))

    assert sample == Sample(1_795_571_393_500.0, "BytesToBytesMap.safeLookup")
    assert _sample(_event("dag-scheduler-event-loop", [frame])) is None
    assert _sample(_event("Executor task launch worker-1", [])) is None
