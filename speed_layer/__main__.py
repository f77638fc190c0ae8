"""Run a speed-layer worker: `python -m speed_layer counter`, `archiver` or `replicator` (settings
from the TALLY_* environment; SIGTERM stops it cleanly)."""

from __future__ import annotations

import argparse
import sys

from speed_layer.worker import run_worker


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m speed_layer", description=__doc__)
    parser.add_argument("worker", choices=["counter", "archiver", "replicator"])
    parser.add_argument("--loglevel", default="INFO")
    parser.add_argument(
        "--group",
        default=None,
        help="consumer group (Faust app id); default tally-<worker>-<topic>. A new group replays the topic.",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        help="seconds before the broker hands a dead worker's partitions on (default 10)",
    )
    parser.add_argument(
        "--instance",
        type=int,
        default=1,
        help="which of several processes of this worker on the machine (from 1): moves its metrics port",
    )
    args = parser.parse_args(argv)
    if args.instance < 1:
        parser.error(f"--instance must be 1 or more (got {args.instance})")
    from counting.settings import Settings

    if args.worker == "replicator":
        from speed_layer.regions.replicator import run_replicator

        sys.exit(run_replicator(Settings(), args.loglevel))
    sys.exit(
        run_worker(args.worker, Settings(), args.loglevel, args.group, args.session_timeout, args.instance)
    )


if __name__ == "__main__":
    main()
