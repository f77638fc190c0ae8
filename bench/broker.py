"""Benchmark the local broker alone: what Tansu spends, as its log grows, to take a steady stream of
messages and hand them to a consumer that keeps up.

`python -m bench.broker [--seconds S] [--rate R] [--bytes B] [--retention-ms MS]` starts a broker as
the stack does (`tally.services.start_broker`: Tansu, memory storage), creates a 4-partition topic
(with `retention.ms` when asked), produces R messages a second of B bytes for S seconds and reads
them back from the start. Every `--window` seconds it samples the broker's CPU
(cores, from /proc) and resident memory; prints the samples and one line of JSON (the first and the
last full window's CPU, `cpu_growth`: the last window's CPU over the second's, and the memory at the
end beside the memory after the first window) and writes bench/results/broker.json.

Why: a long `bench.freshness` run saw the broker's CPU grow with its log until it took a core of
the machine's two; this isolates the broker from the platform's processes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.machine import machine, resident_bytes
from bench.report import report
from tally.services import free_port, start_broker

RESULTS = Path(__file__).parent / "results"
TOPIC = "bench-broker"
PARTITIONS = 4
TICKS = os.sysconf("SC_CLK_TCK")
# How long the reader may take, once the last message is sent, to read the rest.
CATCH_UP_S = 60.0


def cpu_seconds(pid: int) -> float:
    """User and system CPU the process has used (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Reader(threading.Thread):
    """A consumer assigned every partition from its start (no group to join: Tansu may take tens of
    seconds to settle one), counting what it reads."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.read = 0
        self.stopping = threading.Event()
        self.error: str | None = None
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "bench-broker", "auto.offset.reset": "earliest"}
        )

    def run(self) -> None:
        self._consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        try:
            while not self.stopping.is_set():
                for message in self._consumer.consume(1_000, 0.2):
                    error = message.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        self.error = str(error)
                    else:
                        self.read += 1
        finally:
            self._consumer.close()


def run(seconds: float, rate: int, size: int, retention_ms: int | None, window: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tally-bench-broker-") as tmp:
        broker = start_broker(free_port(), Path(tmp))
        bootstrap = f"127.0.0.1:{broker.port}"
        try:
            return _load(broker.process.pid, bootstrap, seconds, rate, size, retention_ms, window)
        finally:
            broker.stop()


def _load(
    pid: int, bootstrap: str, seconds: float, rate: int, size: int, retention_ms: int | None, window: float
) -> dict[str, Any]:
    config = {} if retention_ms is None else {"retention.ms": str(retention_ms)}
    topic = NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1, config=config)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until its futures are done
    for future in admin.create_topics([topic]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    reader = Reader(bootstrap)
    reader.start()
    payload = b"x" * size
    samples: list[dict[str, Any]] = []
    started = last = time.monotonic()
    last_cpu = cpu_seconds(pid)
    sent = 0
    while (now := time.monotonic()) - started < seconds:
        due = int((now - started) * rate)
        while sent < due:
            try:
                producer.produce(TOPIC, payload, key=str(sent).encode())
                sent += 1
            except BufferError:  # the client's queue is full: let it deliver
                producer.poll(0.01)
        producer.poll(0)
        time.sleep(0.005)
        if now - last >= window:
            cpu = cpu_seconds(pid)
            sample = {
                "at_s": round(now - started),
                "sent": sent,
                "read": reader.read,
                "broker_cores": round((cpu - last_cpu) / (now - last), 3),
                "broker_rss_mb": round(resident_bytes(pid) / 1e6),
            }
            samples.append(sample)
            print(json.dumps(sample), file=sys.stderr)
            last, last_cpu = now, cpu
    left = producer.flush(30)
    deadline = time.monotonic() + CATCH_UP_S
    while reader.read < sent - left and reader.error is None and time.monotonic() < deadline:
        time.sleep(0.1)
    reader.stopping.set()
    reader.join(30)
    if not samples:
        raise SystemExit(f"error: --seconds {seconds} is shorter than one --window ({window} s): raise it")
    return {
        "benchmark": "broker",
        "seconds": seconds,
        "rate": rate,
        "message_bytes": size,
        "retention_ms": retention_ms,
        "sent": sent - left,
        "read": reader.read,
        "reader_error": reader.error,
        "broker_cores_first_window": samples[0]["broker_cores"],
        "broker_cores_last_window": samples[-1]["broker_cores"],
        "cpu_growth": cpu_growth(samples),
        "broker_rss_mb_first_window": samples[0]["broker_rss_mb"],
        "broker_rss_mb_end": samples[-1]["broker_rss_mb"],
        "samples": samples,
        "machine": machine(),
    }


def cpu_growth(samples: list[dict[str, Any]]) -> float | None:
    """The last window's broker CPU over the second's (issue 48: at most 1.2 for a flat cost); the
    first window holds the start. None with fewer than two windows, or a second window without CPU."""
    if len(samples) < 2 or not samples[1]["broker_cores"]:
        return None
    return round(samples[-1]["broker_cores"] / samples[1]["broker_cores"], 3)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.broker", description=__doc__)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--rate", type=int, default=20_000, help="messages a second")
    parser.add_argument("--bytes", type=int, default=200, help="of a message")
    parser.add_argument("--retention-ms", type=int, help="the topic's retention.ms (default: none set)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds between samples")
    parser.add_argument("--output", type=Path, default=RESULTS / "broker.json")
    args = parser.parse_args(argv)
    for name in ("seconds", "rate", "bytes", "window"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be above 0 (got {getattr(args, name)})")
    result = run(args.seconds, args.rate, args.bytes, args.retention_ms, args.window)
    return report(result, args.output)


if __name__ == "__main__":
    main()
