"""The speed layer: the Faust counter (Kafka -> Redis, exactly once) and archiver (Kafka -> Parquet log,
watermark)."""

from __future__ import annotations

from counting.requires import require

require("faust", "speed", __name__)

from speed_layer.archiver import ArchiveReport, ParquetLog, file_name, hour_dir
from speed_layer.counter import CounterPlan, PartitionPlan, plan_batch
from speed_layer.counter_worker import BatchReport, CounterWorker, PlannedBatch
from speed_layer.deadletter import DeadLetter, dead_letter_of
from speed_layer.errors import PoisonRecord, SpeedLayerError
from speed_layer.hot import HotVideos
from speed_layer.records import Record, decode_record
from speed_layer.redis_writer import RedisWriter, WriteResult
from speed_layer.watermark import BrokerEndOffsets, Watermark
from speed_layer.windows import ViewWindows

__all__ = [
    "ArchiveReport",
    "BatchReport",
    "BrokerEndOffsets",
    "CounterPlan",
    "CounterWorker",
    "DeadLetter",
    "HotVideos",
    "ParquetLog",
    "PartitionPlan",
    "PlannedBatch",
    "PoisonRecord",
    "Record",
    "RedisWriter",
    "SpeedLayerError",
    "ViewWindows",
    "Watermark",
    "WriteResult",
    "dead_letter_of",
    "decode_record",
    "file_name",
    "hour_dir",
    "plan_batch",
]
