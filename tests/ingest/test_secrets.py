"""Secrets are not defaults: the APIs refuse to start without them, and the local stack generates
them once under its run directory."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from counting.settings import Settings
from tally.secrets import with_local_secrets
from tally.services import free_port
from tally.stack import settings_env

REPO = Path(__file__).resolve().parents[2]
NO_SECRETS = {"admin_key": "", "collector_key": "", "user_token_secret": ""}


def _start(module: str, tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """`python -m <module>` with only the given TALLY_* variables (besides free ports)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(
        PYTHONPATH=str(REPO),
        TALLY_DATA_DIR=str(tmp_path / "data"),
        TALLY_INGEST_PORT=str(free_port()),
        TALLY_SERVING_PORT=str(free_port()),
        TALLY_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
        TALLY_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}",
        **variables,
    )
    return subprocess.run(
        [sys.executable, "-m", module], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    ("module", "variables", "named", "problem"),
    [
        ("ingest", {"TALLY_USER_TOKEN_SECRET": "s" * 32}, "TALLY_COLLECTOR_KEY", "is empty"),
        (
            "ingest",
            {"TALLY_COLLECTOR_KEY": "k" * 32, "TALLY_USER_TOKEN_SECRET": "change-me-token-secret"},
            "TALLY_USER_TOKEN_SECRET",
            "is the placeholder 'change-me-token-secret'",
        ),
        (
            "ingest",
            {"TALLY_COLLECTOR_KEY": "short", "TALLY_USER_TOKEN_SECRET": "s" * 32},
            "TALLY_COLLECTOR_KEY",
            "is only 5 characters",
        ),
        ("serving_layer", {}, "TALLY_ADMIN_KEY", "is empty"),
    ],
)
def test_api_refuses_to_start_without_its_secret(
    tmp_path: Path, module: str, variables: dict[str, str], named: str, problem: str
) -> None:
    result = _start(module, tmp_path, **variables)

    assert result.returncode != 0
    assert f"{named} {problem}: set it to a secret of at least 16 characters" in result.stderr
    assert "secrets.json" in result.stderr


def test_local_secrets_are_created_once_private_and_kept(tmp_path: Path) -> None:
    bare = Settings(data_dir=tmp_path / "data", **NO_SECRETS)

    first = with_local_secrets(bare)
    path = tmp_path / "data" / "run" / "secrets.json"
    written = path.read_bytes()
    second = with_local_secrets(bare)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = json.loads(written)
    assert sorted(stored) == ["admin_key", "collector_key", "user_token_secret"]
    assert len(set(stored.values())) == 3 and all(len(v) >= 40 for v in stored.values())
    assert (first.admin_key, first.collector_key, first.user_token_secret) == (
        stored["admin_key"],
        stored["collector_key"],
        stored["user_token_secret"],
    )
    assert second == first
    assert path.read_bytes() == written


def test_a_secret_set_explicitly_is_kept_and_not_written(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", **{**NO_SECRETS, "collector_key": "collector-from-env-123"}
    )

    filled = with_local_secrets(settings)

    stored = json.loads((tmp_path / "data" / "run" / "secrets.json").read_text())
    assert filled.collector_key == "collector-from-env-123"
    assert sorted(stored) == ["admin_key", "user_token_secret"]
    assert filled.admin_key == stored["admin_key"]


def test_children_of_the_local_stack_get_the_generated_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(data_dir=tmp_path / "data", trusted_proxies=["10.0.0.0/8"], **NO_SECRETS)

    env = settings_env(settings)
    for name, value in env.items():
        if name.startswith("TALLY_"):
            monkeypatch.setenv(name, value)
    child = Settings()

    stored = json.loads((tmp_path / "data" / "run" / "secrets.json").read_text())
    assert (child.admin_key, child.collector_key, child.user_token_secret) == (
        stored["admin_key"],
        stored["collector_key"],
        stored["user_token_secret"],
    )
    assert child.trusted_proxies == ["10.0.0.0/8"]


def test_a_trusted_proxy_that_is_no_address_is_refused() -> None:
    with pytest.raises(ValueError, match="not-a-network"):
        Settings(trusted_proxies=["not-a-network"])
