"""The write API: validates events, stamps ingest_ts and publishes them to the broker."""

from __future__ import annotations

from ingest.app import create_app
from ingest.publisher import Publisher

__all__ = ["Publisher", "create_app"]
