"""The `tally` command line: load generation to files, refusals that say what to do."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import msgspec
import pytest
import redis
from typer.testing import CliRunner

from counting.event import parse_event
from counting.settings import Settings
from tally.cli import app
from tests.writers import archived_until

runner = CliRunner()


def test_loadgen_writes_events_and_ground_truth(tmp_path: Path) -> None:
    out = tmp_path / "traffic.jsonl"

    result = runner.invoke(app, ["loadgen", "--events", "500", "--rate", "1000", "--out", str(out)])

    assert result.exit_code == 0, result.output
    lines = out.read_bytes().splitlines()
    assert len(lines) == 500
    first = msgspec.json.decode(lines[0])
    parse_event(lines[0], first["ts"])
    truth = json.loads((tmp_path / "traffic.truth.json").read_text())
    assert truth["events"] == 500
    assert sum(label["events"] for label in truth["labels"].values()) == 500


def test_loadgen_needs_a_destination() -> None:
    result = runner.invoke(app, ["loadgen", "--events", "10"])
    assert result.exit_code != 0
    assert "--out" in result.output


@pytest.mark.integration
def test_batch_run_refuses_an_unclosed_cutoff(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TALLY_REDIS_URL", redis_url)
    monkeypatch.setenv("TALLY_BUCKET_MS", "1000")
    settings = Settings(data_dir=tmp_path)
    cutoff = 10 * settings.bucket_ms
    archived_until(settings, cutoff - 1)

    result = runner.invoke(app, ["batch", "run", "--cutoff", str(cutoff), "--data-dir", str(tmp_path)])

    assert result.exit_code == 2
    assert str(cutoff) in result.output
    assert "watermark" in result.output


def test_batch_run_refuses_a_cutoff_that_is_not_a_number(tmp_path: Path) -> None:
    result = runner.invoke(app, ["batch", "run", "--cutoff", "noon", "--data-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert "noon" in result.output


def test_down_without_a_stack_says_so(tmp_path: Path) -> None:
    result = runner.invoke(app, ["down", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0
    assert "nothing to stop" in result.output


def test_catalog_load_then_audit_of_an_unknown_payout_says_so(tmp_path: Path) -> None:
    loaded = runner.invoke(app, ["catalog", "load", "--videos", "12", "--data-dir", str(tmp_path)])
    assert loaded.exit_code == 0, loaded.output
    assert "loaded 12 videos" in loaded.output

    from warehouse.store import catalog, open_store

    with open_store(Settings(data_dir=tmp_path).store_url) as store:
        assert len(catalog(store)) == 12

    audit = runner.invoke(
        app, ["audit", "payout", "--creator", "c-none", "--date", "2026-11-01", "--data-dir", str(tmp_path)]
    )
    assert audit.exit_code == 2
    assert "c-none" in audit.output


def test_audit_refuses_a_bad_date(tmp_path: Path) -> None:
    result = runner.invoke(app, ["audit", "payout", "--creator", "c1", "--date", "11/01/2026"])
    assert result.exit_code != 0
    assert "11/01/2026" in result.output


def _one_line(output: str) -> str:
    return " ".join(output.replace("│", " ").split())  # the console wraps, rich boxes usage errors


@pytest.mark.parametrize("by", ["--data-dir", "TALLY_DATA_DIR"])
def test_token_is_signed_with_the_stacks_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    from ingest.auth import verify_token
    from tally.secrets import with_local_secrets

    monkeypatch.delenv("TALLY_USER_TOKEN_SECRET", raising=False)
    monkeypatch.delenv("TALLY_DATA_DIR", raising=False)
    stack_dir = tmp_path / "stack"
    with_local_secrets(Settings(data_dir=stack_dir))  # what 'tally up' generates for its stack
    monkeypatch.chdir(tmp_path)
    if by == "TALLY_DATA_DIR":
        monkeypatch.setenv("TALLY_DATA_DIR", str(stack_dir))
    args = ["--data-dir", str(stack_dir)] if by == "--data-dir" else []

    result = runner.invoke(app, ["token", "--user", "alice", "--ttl", "60", *args])

    assert result.exit_code == 0, result.output
    secret = json.loads((stack_dir / "run" / "secrets.json").read_text())["user_token_secret"]
    assert verify_token(secret, f"Bearer {result.output.strip()}") == "alice"
    assert not (tmp_path / "data").exists()


def test_token_without_a_stacks_secrets_refuses_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TALLY_USER_TOKEN_SECRET", raising=False)
    monkeypatch.delenv("TALLY_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)

    result = runner.invoke(app, ["token", "--user", "alice"])
    elsewhere = runner.invoke(app, ["token", "--user", "alice", "--data-dir", str(tmp_path / "other")])

    assert result.exit_code == 2
    looked_at = tmp_path / "data" / "run" / "secrets.json"
    assert _one_line(result.output) == (
        f"error: no local stack's secrets at {looked_at}: start the stack with 'tally up', or pass "
        "--data-dir of the running stack (or set TALLY_USER_TOKEN_SECRET to the secret it runs with)"
    )
    assert elsewhere.exit_code == 2
    assert f"no local stack's secrets at {tmp_path / 'other' / 'run' / 'secrets.json'}" in elsewhere.output
    assert f"'tally up --data-dir {tmp_path / 'other'}'" in _one_line(elsewhere.output)
    assert list(tmp_path.iterdir()) == []


def test_token_with_the_secret_in_the_environment_needs_no_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest.auth import verify_token

    monkeypatch.setenv("TALLY_USER_TOKEN_SECRET", "a-secret-of-the-environment-0123")
    result = runner.invoke(app, ["token", "--user", "bob", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert verify_token("a-secret-of-the-environment-0123", f"Bearer {result.output.strip()}") == "bob"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ttl", ["-100", "0"])
def test_token_refuses_a_lifetime_that_is_not_positive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ttl: str
) -> None:
    monkeypatch.setenv("TALLY_USER_TOKEN_SECRET", "a-secret-of-the-environment-0123")
    result = runner.invoke(app, ["token", "--user", "alice", "--ttl", ttl, "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert f"Invalid value for --ttl: must be a lifetime of more than 0 seconds (got {ttl})" in _one_line(
        result.output
    ), result.output


def test_warehouse_build_on_an_empty_data_dir_writes_a_duckdb_file(tmp_path: Path) -> None:
    import duckdb

    result = runner.invoke(app, ["warehouse", "build", "--data-dir", str(tmp_path)])

    assert result.exit_code == 0, result.output
    built = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(built), read_only=True) as db:
        tables = {row[0] for row in db.execute("select table_name from information_schema.tables").fetchall()}
    assert {"mart_daily_video_stats", "mart_top_videos", "mart_creator_payouts"} <= tables


def test_warehouse_build_says_how_to_open_the_file_with_what_is_installed(tmp_path: Path) -> None:
    import duckdb

    result = runner.invoke(app, ["warehouse", "build", "--data-dir", str(tmp_path)])

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    built = tmp_path / "warehouse.duckdb"
    said = lines[next(n for n, line in enumerate(lines) if line.startswith(f"wrote {built} in ")) :]
    assert said[1].startswith("open it read-only with the DuckDB Python package Tally installed")
    shown = subprocess.run(
        shlex.split(said[2]), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=True
    )
    assert "mart_creator_payouts" in shown.stdout and "mart_top_videos" in shown.stdout
    assert said[3] == (
        "or with DuckDB's command line, a separate install (not part of Tally; a version that reads "
        f"files of DuckDB {duckdb.__version__}):"
    )
    assert said[4] == f"  duckdb -readonly {built}"


def test_catalog_list_shows_each_creator_with_its_videos(tmp_path: Path) -> None:
    from counting.traffic import TrafficConfig, catalog_rows

    empty = runner.invoke(app, ["catalog", "list", "--data-dir", str(tmp_path)])
    empty_json = runner.invoke(app, ["catalog", "list", "--json", "--data-dir", str(tmp_path)])
    loaded = runner.invoke(app, ["catalog", "load", "--videos", "12", "--data-dir", str(tmp_path)])
    listed = runner.invoke(app, ["catalog", "list", "--data-dir", str(tmp_path)])
    as_json = runner.invoke(app, ["catalog", "list", "--json", "--data-dir", str(tmp_path)])

    assert (empty.exit_code, empty_json.exit_code, loaded.exit_code) == (0, 0, 0), loaded.output
    assert "is empty: load one with 'tally catalog load --data-dir" in empty.output
    assert json.loads(empty_json.output) == []
    assert listed.exit_code == 0, listed.output
    rows = catalog_rows(TrafficConfig(seed=7, videos=12))  # what 'catalog load' loaded by default
    expected: dict[str, list[dict[str, object]]] = {}
    for row in sorted(rows):
        video = {"video_id": row.video_id, "duration_secs": row.duration_secs, "monetized": row.monetized}
        expected.setdefault(row.creator_id, []).append(video)
    assert json.loads(as_json.output) == [
        {"creator_id": creator, "videos": videos} for creator, videos in sorted(expected.items())
    ]
    table = listed.output.splitlines()
    assert table[0].split() == ["creator", "videos", "monetized", "video", "ids"]
    for creator, videos in expected.items():
        line = next(line for line in table if line.split()[:1] == [creator])
        monetized = sum(bool(v["monetized"]) for v in videos)
        assert line.split()[1:3] == [str(len(videos)), str(monetized)]
    ids_shown = {part.strip(",") for line in table[1:-1] for part in line.split() if part.startswith("v")}
    assert ids_shown == {row.video_id for row in rows}
    assert table[-1] == f"{len(expected)} creators, {len(rows)} videos"


def test_the_stack_names_each_process_of_a_scaled_kind() -> None:
    from tally.stack import kind_and_instance, process_names

    scaled = Settings(counters=3, archivers=2)
    assert process_names(scaled) == [
        "counter",
        "counter-2",
        "counter-3",
        "archiver",
        "archiver-2",
        "ingest",
        "serving",
    ]
    assert process_names(Settings()) == ["counter", "archiver", "ingest", "serving"]
    assert [kind_and_instance(n) for n in ("counter", "counter-3", "ingest", "ingest-2", "counter-1")] == [
        ("counter", 1),
        ("counter", 3),
        ("ingest", 1),
        ("ingest-2", 1),
        ("counter-1", 1),
    ]


def test_the_version_is_the_installed_packages() -> None:
    from importlib.metadata import version

    answer = runner.invoke(app, ["--version"])
    assert answer.exit_code == 0
    assert answer.output.strip() == f"tally {version('tally')}"


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("TALLY_SPARK_CONF", "nope", "must be a JSON object of Spark setting -> value (got 'nope'"),
        ("TALLY_BUCKET_MS", "abc", "Input should be a valid integer"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, said: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = runner.invoke(app, ["status", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {variable}: ") and said in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
