"""Where a batch run's outputs lie under the data directory, as plain paths: the batch writes them;
the quality gates, the serving layer and the warehouse read them without importing Spark."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from counting import rules
from counting.settings import Settings

# Under `baselines/<run_id>/`: the per-video counts a publish switches readers to.
BASELINE_FILE = "baseline.parquet"
# Under `batch/<run_id>/`, each run's other outputs.
DAILY_DIR = "daily_video"  # per event-time day and video
SERIES_DIR = "bucket_video"  # per video and ingestion bucket
CREATOR_VIEWERS_DIR = "creator_viewers"  # each creator's exact unique viewers
PAYOUT_EVENTS_DIR = "payout_events"  # the counted monetizable view ids, `date=YYYY-MM-DD/` partitions
COMPUTED_PAYOUTS_FILE = "payouts.json"  # the payout rows, kept until the run is published
RULES_USED_FILE = "bot_rules.json"  # the bot rules the run counted with


@dataclass(frozen=True)
class Tier:
    """A history tier: points `step_ms` wide of ingestion time, written under `dir_name`."""

    name: str
    step_ms: int
    dir_name: str


MINUTE = Tier("1m", rules.MINUTE_MS, "minute_video")
HOUR = Tier("1h", rules.HOUR_MS, "hour_video")
TIERS = (MINUTE, HOUR)


def baseline_path(settings: Settings, run_id: str) -> Path:
    return settings.baselines_dir / run_id / BASELINE_FILE


def run_dir(settings: Settings, run_id: str) -> Path:
    """The folder of a run's outputs other than its baseline."""
    return settings.batch_dir / run_id


def daily_path(settings: Settings, run_id: str) -> Path:
    return run_dir(settings, run_id) / DAILY_DIR


def series_path(settings: Settings, run_id: str) -> Path:
    return run_dir(settings, run_id) / SERIES_DIR


def tier_path(settings: Settings, run_id: str, tier: Tier) -> Path:
    return run_dir(settings, run_id) / tier.dir_name


def creator_viewers_path(settings: Settings, run_id: str) -> Path:
    return run_dir(settings, run_id) / CREATOR_VIEWERS_DIR


def payout_events_path(settings: Settings, run_id: str) -> Path:
    """Where a run keeps its counted monetizable view ids (`date=YYYY-MM-DD/` partitions): the
    detail an audit uses to name the ids that differ. The ledger's digest vouches for it."""
    return run_dir(settings, run_id) / PAYOUT_EVENTS_DIR


def computed_payouts_path(settings: Settings, run_id: str) -> Path:
    """Where a run keeps the payout rows it computed, until they are written to the ledger after
    the run is validated and published."""
    return run_dir(settings, run_id) / COMPUTED_PAYOUTS_FILE


def rules_used_path(settings: Settings, run_id: str) -> Path:
    return run_dir(settings, run_id) / RULES_USED_FILE
