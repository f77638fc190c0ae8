"""The speed layer: the Faust counter (Kafka -> partition state in the worker -> Redis read keys,
exactly once) and archiver (Kafka -> Parquet log, watermark)."""

from __future__ import annotations

from counting.requires import require

require("faust", "speed", __name__)

from speed_layer.archiver.archiver import ArchiveReport, ParquetLog, file_name, hour_dir
from speed_layer.archiver.watermark import BrokerEndOffsets, Watermark
from speed_layer.counter.hot import HotVideos
from speed_layer.counter.state_counter import StateCounter
from speed_layer.counter.stream import BatchReport, PlannedBatch, WriteResult, count_stream
from speed_layer.counter.windows import ViewWindows
from speed_layer.deadletter import DeadLetter, dead_letter_of
from speed_layer.errors import PoisonRecord, SpeedLayerError
from speed_layer.records import Record, decode_record

__all__ = [
    "ArchiveReport",
    "BatchReport",
    "BrokerEndOffsets",
    "DeadLetter",
    "HotVideos",
    "ParquetLog",
    "PlannedBatch",
    "PoisonRecord",
    "Record",
    "SpeedLayerError",
    "StateCounter",
    "ViewWindows",
    "Watermark",
    "WriteResult",
    "count_stream",
    "dead_letter_of",
    "decode_record",
    "file_name",
    "hour_dir",
]
