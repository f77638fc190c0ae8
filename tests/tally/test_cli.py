"""The `tally` command line: load generation to files, refusals that say what to do."""

from __future__ import annotations

import json
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


def test_token_is_accepted_by_the_verifier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest.auth import verify_token
    from tally.secrets import with_local_secrets

    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("TALLY_USER_TOKEN_SECRET", raising=False)
    result = runner.invoke(app, ["token", "--user", "alice", "--ttl", "60"])
    assert result.exit_code == 0, result.output
    secret = with_local_secrets(Settings()).user_token_secret  # the local stack's generated one
    assert verify_token(secret, f"Bearer {result.output.strip()}") == "alice"


def test_warehouse_build_on_an_empty_data_dir_writes_a_duckdb_file(tmp_path: Path) -> None:
    import duckdb

    result = runner.invoke(app, ["warehouse", "build", "--data-dir", str(tmp_path)])

    assert result.exit_code == 0, result.output
    built = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(built), read_only=True) as db:
        tables = {row[0] for row in db.execute("select table_name from information_schema.tables").fetchall()}
    assert {"mart_daily_video_stats", "mart_top_videos", "mart_creator_payouts"} <= tables


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
