"""The platform's settings: one frozen pydantic-settings model, env prefix TALLY_."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from counting.errors import InvalidSetting
from counting.regions import check_region, parse_peers

HOUR_MS = 3_600_000
# The shared secrets, each needed by an API: none has a usable default.
SECRETS: tuple[str, ...] = ("admin_key", "collector_key", "user_token_secret")
MIN_SECRET_CHARS = 16
# What TALLY_SPARK_CONF looks like, for the error that refuses a bad one.
SPARK_CONF_EXAMPLE = '{"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "6g"}'


class Settings(BaseSettings):
    """Every knob of Tally; read once at an entry point and passed down."""

    model_config = SettingsConfigDict(env_prefix="TALLY_", frozen=True, extra="ignore")

    data_dir: Path = Field(default=Path("data"), description="root of the log, baselines and stores")
    bucket_ms: int = Field(default=HOUR_MS, gt=0, description="speed-layer bucket width")
    retention_ms: int = Field(default=3 * 24 * HOUR_MS, gt=0, description="speed bucket lifetime")
    region: str = Field(
        default="local",
        description="this region's name (decision 0006): its components and log rows carry it",
    )
    region_peers: str = Field(
        default="",
        description="the other regions and their brokers, 'us=host:9092,ap=host:9092' (empty: one region)",
    )
    log_root: Path | None = Field(
        default=None,
        description="with several regions, where every region's Parquet log lies (each writes its own "
        "region=<name> part; the batch reads them all); default <data_dir>/raw",
    )
    components_topic: str = Field(
        default="components", description="where this region's counter publishes its components"
    )
    replicator_port: int = Field(default=6090, description="the replicator's /metrics port")
    retry_horizon_ms: int = Field(
        default=HOUR_MS,
        gt=0,
        description="how long the counter remembers an event id (the batch is exact beyond it)",
    )
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_cluster: bool = Field(
        default=False,
        description="TALLY_REDIS_URL names a node of a Redis Cluster (the clients learn the others)",
    )
    kafka_bootstrap: str = "127.0.0.1:9092"
    events_topic: str = "events"
    dead_letter_topic: str = "events-dead-letter"
    topic_partitions: int = Field(default=4, gt=0)
    delivery_timeout_ms: int = Field(
        default=5_000, gt=0, description="producer delivery timeout; the grace before a cutoff closes"
    )
    ingest_host: str = "127.0.0.1"
    ingest_port: int = 8001
    ingest_workers: int = Field(default=1, gt=0, description="ingest API processes sharing its port")
    serving_host: str = "127.0.0.1"
    serving_port: int = 8000
    serving_workers: int = Field(default=1, gt=0, description="serving API processes sharing its port")
    counters: int = Field(
        default=1,
        gt=0,
        description="counter processes of the local stack (one consumer group: they share the partitions)",
    )
    archivers: int = Field(
        default=1,
        gt=0,
        description="archiver processes of the local stack (one consumer group: they share the partitions)",
    )
    spark_master: str = "local[2]"
    spark_conf: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Spark settings (a JSON object of key -> value) over the batch's defaults, "
        "batch_layer/spark_conf.py, which say why each one",
    )
    archiver_flush_ms: int = Field(
        default=10_000,
        gt=0,
        description="longest an archiver batch waits: each flush writes a file per partition, and the "
        "batch's cost grows with the log's files (bench.log_files: 10 s is a tenth of the files of 1 s "
        "at low rates); the watermark trails the log by up to a flush",
    )
    counter_flush_ms: int = Field(default=100, gt=0, description="longest a counter batch waits")
    faust_web_port: int = 6066
    faust_web_host: str = Field(
        default="127.0.0.1",
        description="address the workers' /metrics (and Faust web) bind; 0.0.0.0 is every interface",
    )
    # Secrets have no default: the APIs refuse to start without them ('tally up' generates them).
    admin_key: str = Field(default="", description="X-Admin-Key of the admin routes")
    collector_key: str = Field(default="", description="X-Collector-Key of POST /v1/events")
    user_token_secret: str = Field(default="", description="signs user tokens")
    user_token_ttl_secs: int = Field(default=24 * 3600, gt=0)
    rate_limit_ip_per_min: int = Field(default=600, gt=0, description="user-route requests per address")
    rate_limit_user_per_min: int = Field(default=120, gt=0, description="user-route requests per user")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="addresses or CIDRs (JSON list) of the proxies whose X-Forwarded-For the single-event "
        "routes believe; from any other peer the header is ignored",
    )
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
    milestone_steps: list[int] = Field(
        default_factory=lambda: [10**n for n in range(3, 10)],
        description="view counts a video is announced at (JSON list), once each, from published baselines",
    )
    milestones_topic: str = Field(default="milestones", description="where milestones are announced")
    milestone_webhook_url: str | None = Field(
        default=None, description="also POST each milestone here (signed with TALLY_MILESTONE_WEBHOOK_SECRET)"
    )
    milestone_webhook_secret: str = Field(default="", description="HMAC-SHA256 key of the webhook signature")
    milestone_webhook_attempts: int = Field(
        default=6, gt=0, description="webhook tries before a milestone goes to the dead-letter topic"
    )
    hot_video_events_per_sec: int = Field(
        default=2_000, gt=0, description="velocity above which a video is sharded over partitions"
    )
    max_video_shards: int = Field(default=16, gt=0)
    bot_rules_file: Path | None = Field(
        default=None,
        description="the bot rules file operators edit (check it with 'tally rules check FILE'); "
        "default: the rules shipped with Tally, counting/bot_rules.toml",
    )
    history_minute_retention_ms: int = Field(
        default=7 * 24 * HOUR_MS, gt=0, description="how far back the timeseries answers 1-minute points"
    )
    history_hour_retention_ms: int = Field(
        default=365 * 24 * HOUR_MS, gt=0, description="how far back the timeseries answers 1-hour points"
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_networks(cls, value: list[str]) -> list[str]:
        for proxy in value:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(f"not an address or CIDR (got {proxy!r})") from None
        return value

    @field_validator("region")
    @classmethod
    def _region_is_a_name(cls, value: str) -> str:
        return check_region(value)

    @field_validator("region_peers")
    @classmethod
    def _peers_are_regions(cls, value: str, info: ValidationInfo) -> str:
        parse_peers(value, info.data.get("region", ""))
        return value

    @property
    def peers(self) -> dict[str, str]:
        """The other regions by name, each with its broker's bootstrap address."""
        return parse_peers(self.region_peers, self.region)

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_conf_is_strings(cls, value: object) -> dict[str, str]:
        return parse_spark_conf(value)

    @property
    def raw_dir(self) -> Path:
        """The Parquet log the batch reads: with several regions, every region's (decision 0006)."""
        return self.log_root or self.data_dir / "raw"

    @property
    def own_log_dir(self) -> Path:
        """The part of the log this region's archiver writes (and `tally speed rebuild` replays):
        `region=<name>` under `raw_dir` with several regions, all of it with one."""
        return self.raw_dir / f"region={self.region}" if self.peers else self.raw_dir

    @property
    def watermark_file(self) -> Path:
        """With several regions: where this region's archiver watermark lies beside its log, for the
        batch of any region (`batch_layer.cutoff.log_watermark`)."""
        return self.own_log_dir / "_watermark"

    @property
    def quarantine_dir(self) -> Path:
        """Where raw files taken out of the log wait (`tally batch quarantine`), by their log path."""
        return self.data_dir / "quarantine"

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
            env[f"TALLY_{name.upper()}"] = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return env


def parse_spark_conf(value: object) -> dict[str, str]:
    """TALLY_SPARK_CONF (a JSON object as text, or a mapping) as Spark settings, key -> value, both
    strings; InvalidSetting naming the variable, the bad value and an example otherwise."""
    should = f"e.g. TALLY_SPARK_CONF='{SPARK_CONF_EXAMPLE}'"
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as exc:
            raise InvalidSetting(
                f"TALLY_SPARK_CONF must be a JSON object of Spark setting -> value (got {value!r}: "
                f"{exc.msg}); {should}"
            ) from None
    if not isinstance(value, Mapping):
        raise InvalidSetting(
            f"TALLY_SPARK_CONF must be a JSON object of Spark setting -> value (got {value!r}); {should}"
        )
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidSetting(
                f"TALLY_SPARK_CONF must map each Spark setting to a string, quoted in JSON (got {key!r}: "
                f"{item!r}); {should}"
            )
    return dict(value)


def check_secrets(settings: Settings, names: tuple[str, ...] = SECRETS) -> None:
    """Raise InvalidSetting naming the first of `names` that is empty, a `change-me` placeholder or
    too short to be a secret: an API must not start with a key anyone can guess."""
    for name in names:
        value = getattr(settings, name)
        variable = f"TALLY_{name.upper()}"
        if not value:
            problem = "is empty"
        elif value.lower().startswith("change-me"):
            problem = f"is the placeholder {value!r}"
        elif len(value) < MIN_SECRET_CHARS:
            problem = f"is only {len(value)} characters"
        else:
            continue
        raise InvalidSetting(
            f"{variable} {problem}: set it to a secret of at least {MIN_SECRET_CHARS} characters "
            f"(the local stack 'tally up' generates one under {settings.run_dir / 'secrets.json'})"
        )
