"""The encoding of a partition's changelog entries and snapshots (`speed_layer/state/partition_store.py`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# What the state counter does: `write` compresses a snapshot in a thread while the loop encodes the
# next micro-batches' changelog entries. Run in a process of its own, so a crash fails this test
# instead of killing the test runner.
_SNAPSHOT_WHILE_ENTRIES = """
import threading
from speed_layer.state.partition_store import compress, decode, encode, packed

snapshot = packed({"seen": {f"video\\x1fevent-{i}": [i, "view", i % 7] for i in range(200_000)}})

def compress_snapshots():
    for _ in range(3):
        assert decode(compress(snapshot))["seen"]["video\\x1fevent-5"] == [5, "view", 5]

thread = threading.Thread(target=compress_snapshots)
thread.start()
entries = 0
while thread.is_alive() or entries < 100:
    entry = {"offset": entries, "seen": {f"video\\x1fevent-{entries}-{k}": [k, "view", 0] for k in range(50)}}
    assert decode(encode(entry)) == entry, entries
    entries += 1
thread.join()
print(entries)
"""


def test_a_snapshot_compressed_in_a_thread_while_the_loop_encodes_entries() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SNAPSHOT_WHILE_ENTRIES], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert int(done.stdout) >= 100
