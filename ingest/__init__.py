"""The write API: validates events, stamps ingest_ts and publishes them to the broker."""

from __future__ import annotations

from counting.requires import require

require("fastapi", "ingest", __name__)
require("aiokafka", "ingest", __name__)

from ingest.app import create_app
from ingest.publisher import Publisher

__all__ = ["Publisher", "create_app"]
