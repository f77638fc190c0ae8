"""`python -m bench.broker`: the local broker takes the messages and hands every one to the reader,
sampled as it goes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import broker

pytestmark = pytest.mark.integration


def test_every_message_sent_is_read_and_each_window_is_sampled(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = [
        "--seconds",
        "7",
        "--rate",
        "500",
        "--window",
        "2",
        "--retention-ms",
        "600000",
        "--output",
        str(out),
    ]
    result = broker.main(args)

    assert result["sent"] >= 3_000 and result["read"] == result["sent"]  # nothing lost, nothing doubled
    assert result["reader_error"] is None
    assert [s["at_s"] for s in result["samples"]] == [2, 4, 6]
    assert all(s["broker_cores"] > 0 and s["broker_rss_mb"] > 0 for s in result["samples"])
    assert result["broker_rss_mb_end"] == result["samples"][-1]["broker_rss_mb"]
    second, last = result["samples"][1]["broker_cores"], result["samples"][2]["broker_cores"]
    assert result["cpu_growth"] == round(last / second, 3)  # the last window's CPU over the second's
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))


def test_a_run_shorter_than_a_window_is_refused_with_what_to_raise(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--seconds 1.0 is shorter than one --window \(2.0 s\): raise it"):
        broker.main(["--seconds", "1", "--window", "2", "--rate", "10", "--output", str(tmp_path / "o.json")])


def test_cpu_growth_needs_a_second_window() -> None:
    one = [{"at_s": 2, "broker_cores": 0.3}]
    assert broker.cpu_growth(one) is None
    assert broker.cpu_growth([*one, {"at_s": 4, "broker_cores": 0.0}]) is None
    later = [{"at_s": 4, "broker_cores": 0.4}, {"at_s": 6, "broker_cores": 0.5}]
    assert broker.cpu_growth([*one, *later]) == 1.25
