"""The workers' Prometheus metrics: served at /metrics, a taken port only logs a warning."""

from __future__ import annotations

import socket
import urllib.request

from speed_layer import metrics
from tally.services import free_port


def test_metrics_are_served_and_a_taken_port_is_not_fatal() -> None:
    port = free_port()
    metrics.OPS.labels("applied").inc(3)
    metrics.LAG.labels("counter", "events", "0").set(7)
    assert metrics.serve(port, "counter")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    assert 'tally_counter_ops_total{result="applied"}' in text
    assert 'tally_speed_consumer_lag{partition="0",topic="events",worker="counter"} 7.0' in text
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        assert not metrics.serve(taken.getsockname()[1], "archiver")
