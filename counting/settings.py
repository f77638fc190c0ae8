"""The platform's settings: one frozen pydantic-settings model, env prefix TALLY_."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

HOUR_MS = 3_600_000


class Settings(BaseSettings):
    """Every knob of Tally; read once at an entry point and passed down."""

    model_config = SettingsConfigDict(env_prefix="TALLY_", frozen=True, extra="ignore")

    data_dir: Path = Field(default=Path("data"), description="root of the log, baselines and stores")
    bucket_ms: int = Field(default=HOUR_MS, gt=0, description="speed-layer bucket width")
    retention_ms: int = Field(default=3 * 24 * HOUR_MS, gt=0, description="speed bucket lifetime")
    redis_url: str = "redis://127.0.0.1:6379/0"
    kafka_bootstrap: str = "127.0.0.1:9092"
    events_topic: str = "events"
    dead_letter_topic: str = "events-dead-letter"
    topic_partitions: int = Field(default=4, gt=0)
    delivery_timeout_ms: int = Field(
        default=5_000, gt=0, description="producer delivery timeout; the grace before a cutoff closes"
    )
    ingest_host: str = "127.0.0.1"
    ingest_port: int = 8001
    serving_host: str = "127.0.0.1"
    serving_port: int = 8000
    spark_master: str = "local[2]"
    archiver_flush_ms: int = Field(default=1_000, gt=0, description="longest an archiver batch waits")
    counter_flush_ms: int = Field(default=100, gt=0, description="longest a counter batch waits")
    faust_web_port: int = 6066
    admin_key: str = Field(default="change-me", description="X-Admin-Key of the admin routes")
    collector_key: str = Field(
        default="change-me-collector", description="X-Collector-Key of POST /v1/events"
    )
    user_token_secret: str = Field(default="change-me-token-secret", description="signs user tokens")
    user_token_ttl_secs: int = Field(default=24 * 3600, gt=0)
    rate_limit_ip_per_min: int = Field(default=600, gt=0, description="user-route requests per address")
    rate_limit_user_per_min: int = Field(default=120, gt=0, description="user-route requests per user")
    serving_cache_ms: int = Field(
        default=250,
        ge=0,
        description="longest a served count may be cached (trending videos: a quarter); part of the "
        "ack-to-visible time, whose p99 target is 1 s",
    )
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL of the relational store; default: SQLite under data_dir"
    )
    payout_rate_per_1000_views: Decimal = Field(
        default=Decimal("2.00"), ge=0, description="what a creator earns per 1,000 monetizable views"
    )
    payout_currency: str = "USD"
    hot_video_events_per_sec: int = Field(
        default=2_000, gt=0, description="velocity above which a video is sharded over partitions"
    )
    max_video_shards: int = Field(default=16, gt=0)

    @property
    def raw_dir(self) -> Path:
        return self.data_dir / "raw"

    @property
    def baselines_dir(self) -> Path:
        return self.data_dir / "baselines"

    @property
    def run_dir(self) -> Path:
        return self.data_dir / "run"

    @property
    def batch_dir(self) -> Path:
        return self.data_dir / "batch"

    @property
    def warehouse_path(self) -> Path:
        return self.data_dir / "warehouse.duckdb"

    @property
    def quality_dir(self) -> Path:
        return self.data_dir / "quality"

    @property
    def airflow_home(self) -> Path:
        return self.data_dir / "airflow"

    @property
    def store_url(self) -> str:
        """The relational store's URL: `database_url`, else a SQLite file under the data directory."""
        return self.database_url or f"sqlite:///{(self.data_dir / 'tally.db').resolve()}"


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as TALLY_* variables (the data directory made absolute), so that a child
    process, or an Airflow task, reads the same ones whatever its working directory."""
    env: dict[str, str] = {}
    for name, value in settings.model_dump(mode="json").items():
        if name == "data_dir":
            value = str(settings.data_dir.resolve())
        if value is not None:
            env[f"TALLY_{name.upper()}"] = str(value)
    return env
