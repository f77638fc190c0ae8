"""A real corruption in the log (one Kafka record's rows written twice by the archiver's file) fails
the raw gate naming the file; `tally batch quarantine` takes it out so the next run publishes
without it (recorded with the run, listed by the admin route and the command); after a repair,
`tally batch release` puts it back and the next run validates it and counts its events again."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import redis
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from counting import oracle
from counting.event import Event
from counting.settings import Settings
from counting.traffic import TrafficConfig
from serving_layer.app import create_app
from speed_layer.archiver.archiver import write_log_file
from tally.cli import app
from tests.batch_layer.test_batch_payouts import MIDNIGHT, traffic_events
from tests.writers import writers
from warehouse.baseline import current_baseline
from warehouse.store import get_run, open_store

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"),
]

BUCKET_MS = 60_000
TRAFFIC = TrafficConfig(
    seed=11, videos=8, viewers=120, events=900, rate=2.0, bot_fraction=0.0, start_ms=MIDNIGHT
)
ADMIN_KEY = "quarantine-admin-key-0123456789"
runner = CliRunner()


def _settings(data_dir: Path, redis_url: str) -> Settings:
    return Settings(data_dir=data_dir, redis_url=redis_url, bucket_ms=BUCKET_MS, admin_key=ADMIN_KEY)


def _tally(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def _answer(output: str) -> dict[str, object]:
    """The JSON the command prints last (warnings and validation summaries come before it)."""
    decoded: dict[str, object] = json.loads(output[output.rfind("\n{") + 1 :])
    return decoded


def _counts(events: list[Event], cutoff: int) -> dict[str, tuple[int, int, int]]:
    """The oracle's counts of the videos it counts anything of."""
    counts = {v: (c.views, c.likes, c.unique_viewers) for v, c in oracle.count(events, cutoff).items()}
    return {v: c for v, c in counts.items() if any(c)}


def _served(settings: Settings) -> dict[str, tuple[int, int, int]]:
    """The published baseline's counts of the videos it counted anything of."""
    baseline = current_baseline(settings.baselines_dir)
    assert baseline is not None
    counts = {v: (r.views, r.likes, r.unique_viewers) for v, r in baseline.rows.items()}
    return {v: c for v, c in counts.items() if any(c)}


def _write_twice(path: Path) -> int:
    """Corrupt a log file as a faulty writer would: the rows of its first Kafka record appended again
    (same partition, offset and event ids). Returns that record's offset."""
    table = pq.read_table(path)
    offset = table["kafka_offset"][0].as_py()
    again = table.filter(pc.equal(table["kafka_offset"], offset))
    write_log_file(pa.concat_tables([table, again]), path)
    return int(offset)


def _drop_repeated_rows(path: Path) -> None:
    """The operator's repair: one row per (Kafka position, event id), first kept."""
    rows = pq.read_table(path).to_pylist()
    seen: set[tuple[int, int, str]] = set()
    kept = []
    for row in rows:
        key = (row["kafka_partition"], row["kafka_offset"], row["event_id"])
        if key not in seen:
            seen.add(key)
            kept.append(row)
    write_log_file(pa.Table.from_pylist(kept, schema=pq.read_schema(path)), path)


def test_a_corrupt_file_is_quarantined_runs_go_on_without_it_and_count_it_once_released(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TALLY_REDIS_URL", redis_url)
    monkeypatch.setenv("TALLY_BUCKET_MS", str(BUCKET_MS))
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "False")
    data_dir = tmp_path / "data"
    settings = _settings(data_dir, redis_url)
    events = traffic_events(TRAFFIC)
    with writers(settings) as tally:
        for start in range(0, len(events), 150):  # six archiver batches: six files or more
            tally.ingest(events[start : start + 150])
            tally.archive()
    cutoff = (max(e.ingest_ts or 0 for e in events) // BUCKET_MS + 1) * BUCKET_MS
    files = sorted(settings.raw_dir.rglob("*.parquet"))
    assert len(files) >= 6
    bad = files[2]
    relative = bad.relative_to(settings.raw_dir).as_posix()
    _write_twice(bad)
    batch = ("batch", "run", "--cutoff", str(cutoff), "--data-dir", str(data_dir))

    code, refused = _tally(*batch)

    assert code == 2, refused
    assert "no row appears twice in one file" in refused
    assert f"note: files with failing rows: {relative}\n" in refused
    assert "tally batch quarantine FILE --reason" in refused
    assert current_baseline(settings.baselines_dir) is None

    code, output = _tally(
        "batch", "quarantine", relative, "--reason", "record written twice", "--data-dir", str(data_dir)
    )

    assert code == 0, output
    assert _answer(output)["path"] == relative
    assert not bad.exists() and (settings.quarantine_dir / relative).is_file()
    code, listed = _tally("batch", "quarantined", "--data-dir", str(data_dir))
    assert code == 0, listed
    assert [(q["path"], q["reason"]) for q in json.loads(listed)] == [(relative, "record written twice")]

    code, output = _tally(*batch)

    assert code == 0, output
    assert f"left out of this run (recorded with it): {relative}" in " ".join(output.split())
    run = _answer(output)
    assert run["published"] is True
    held = set(
        pq.read_table(settings.quarantine_dir / relative, columns=["event_id"])["event_id"].to_pylist()
    )
    without = [e for e in events if e.event_id not in held]
    assert _served(settings) == _counts(without, cutoff)
    with open_store(settings.store_url) as store:
        record = get_run(store, str(run["run_id"]))
    assert record is not None and record.excluded_files == {relative: "record written twice"}
    with TestClient(create_app(settings)) as serving:
        shown = serving.get("/v1/admin/quarantine", headers={"x-admin-key": ADMIN_KEY})
        video = events[0].video_id
        raw = serving.get(f"/v1/admin/videos/{video}/raw", headers={"x-admin-key": ADMIN_KEY})
    assert shown.status_code == 200, shown.text
    assert [(f["path"], f["reason"], f["active"]) for f in shown.json()["files"]] == [
        (relative, "record written twice", True)
    ]
    in_file = [e for e in events if e.event_id in held and e.video_id == video]
    rows_of_video = len(in_file) + sum(
        1 for e in in_file if e.event_id in _first_record_ids(settings, relative)
    )
    assert raw.json()["in_quarantine"] == {"files": int(bool(in_file)), "rows": rows_of_video}

    _drop_repeated_rows(settings.quarantine_dir / relative)
    code, output = _tally(
        "batch", "release", relative, "--reason", "repeated rows dropped", "--data-dir", str(data_dir)
    )
    assert code == 0, output
    assert bad.is_file()

    code, output = _tally(*batch)

    assert code == 0, output
    assert "left out of this run" not in output
    assert _answer(output)["published"] is True
    assert _served(settings) == _counts(events, cutoff)
    code, listed = _tally("batch", "quarantined", "--released", "--data-dir", str(data_dir))
    assert [(q["path"], q["release_reason"]) for q in json.loads(listed)] == [
        (relative, "repeated rows dropped")
    ]
    assert json.loads(_tally("batch", "quarantined", "--data-dir", str(data_dir))[1]) == []


def _first_record_ids(settings: Settings, relative: str) -> set[str]:
    """The event ids of the first Kafka record of a (repaired) file: the rows written twice."""
    table = pq.read_table(settings.quarantine_dir / relative)
    first = table.filter(pc.equal(table["kafka_offset"], table["kafka_offset"][0]))
    return set(first["event_id"].to_pylist())
