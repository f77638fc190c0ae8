"""Name the tests that failed in `make test`'s JUnit reports, last, where a log's tail shows them.

The parallel phase's own summary scrolls away behind the serial phase's output; CI keeps only the
tail of a run. Usage: python scripts/test-failures.py data/test-report/parallel.xml ...
"""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def failures(report: Path) -> list[str]:
    """One line per failed or erred test case: its id, the outcome and the first line of why."""
    lines = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            found = case.find(outcome)
            if found is None:
                continue
            why = (found.get("message") or found.text or "").strip().splitlines()
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            lines.append(f"{outcome.upper()} {test}: {why[0][:300] if why else '(no message)'}")
    return lines


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        if not path.exists():
            print(f"make test: no report at {path} (the phase did not start)")
            continue
        found = failures(path)
        print(f"make test: {len(found)} failed in {path}")
        for line in found:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
