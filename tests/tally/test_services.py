"""The local services' helpers: the ports the stack and the tests pick, and the wait for a process
to listen."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tally import services
from tally.errors import StackError
from tally.services import LOWEST_PICK, free_port, free_ports, wait_for_port


def test_picked_ports_lie_below_the_ephemeral_range_and_are_free() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for count in (1, 2, 3):
        for _ in range(20):
            first = free_ports(count)
            assert first >= LOWEST_PICK and first + count <= low
            for port in range(first, first + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))  # raises if it were held


def test_seeding_random_leaves_the_picks_alone() -> None:
    random.seed(7)
    first = [free_port() for _ in range(5)]
    random.seed(7)
    again = [free_port() for _ in range(5)]
    assert first != again


def test_a_held_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(services, "_ephemeral_low", lambda: 65_000)  # the held port is in range
        picks = iter([taken, taken + 1])

        class Picks:
            def randrange(self, start: int, stop: int) -> int:
                return next(picks)

        monkeypatch.setattr(services, "_PICKS", Picks())
        assert free_port() == taken + 1


def test_a_port_handed_out_is_not_handed_out_again_before_anything_binds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = free_port()
    picks = iter([first - 1, first, first + 1, first + 2, first + 3])

    class Picks:
        def randrange(self, start: int, stop: int) -> int:
            return next(picks)

    monkeypatch.setattr(services, "_PICKS", Picks())
    # Every port counts as free, whatever other processes bind meanwhile (the xdist workers pick
    # ports too): what is under test is the record of the ports handed out.
    monkeypatch.setattr(services, "_bindable", lambda port: True)
    assert free_ports(2) == first + 1  # nothing bound `first`: it is still free, yet not again
    assert free_port() == first + 3


def test_a_range_that_leaves_no_ports_is_refused_with_what_to_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "_ephemeral_low", lambda: LOWEST_PICK)
    with pytest.raises(OSError, match=f"starts at {LOWEST_PICK}.*raise its start"):
        free_port()


def _python(code: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as handle:
        return subprocess.Popen([sys.executable, "-c", code], stdout=handle, stderr=subprocess.STDOUT)


def test_a_process_that_exits_before_it_listens_is_reported_with_the_end_of_its_log(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    code = "print('starting'); print('metrics_unavailable port=1 taken'); raise SystemExit(3)"
    process = _python(code, log)
    port = free_port()
    with pytest.raises(StackError) as error:
        # the long timeout is never reached: the wait ends when the process does
        wait_for_port(port, 600, "the worker's metrics", log, alive=lambda: process.poll() is None)
    assert str(error.value) == (
        f"the worker's metrics never listened on 127.0.0.1:{port}: its process exited; see its log at "
        f"{log}, which ends:\n  starting\n  metrics_unavailable port=1 taken"
    )


def test_a_process_that_never_listens_is_reported_after_the_timeout_with_the_end_of_its_log(
    tmp_path: Path,
) -> None:
    log = tmp_path / "worker.log"
    process = _python("import time; print('importing', flush=True); time.sleep(60)", log)
    port = free_port()
    try:
        with pytest.raises(StackError) as error:
            wait_for_port(port, 2, "the worker's metrics", log, alive=lambda: process.poll() is None)
    finally:
        process.kill()
        process.wait()
    assert str(error.value) == (
        f"the worker's metrics did not listen on 127.0.0.1:{port} within 2 s; see its log at {log}, "
        "which ends:\n  importing"
    )
