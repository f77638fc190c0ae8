"""The archiver's batch handler: records to the Parquet log, then the log's positions to Redis, then
the acks; and the watermark's advance. Independent of Faust (app.py wires it to a stream)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from counting.settings import Settings
from speed_layer import logs, metrics
from speed_layer.archiver.archiver import ParquetLog
from speed_layer.archiver.watermark import Watermark
from speed_layer.records import Record
from speed_layer.retry import until_reachable

WORKER = "archiver"
M = TypeVar("M")  # a consumed message as the stream hands it over (Faust's event)


class ArchiveWorker:
    """Writes micro-batches to the log and publishes what the log holds; one per worker process."""

    def __init__(self, settings: Settings, log: ParquetLog, watermark: Watermark) -> None:
        self._settings = settings
        self.log = log
        self.watermark = watermark

    async def start(self) -> None:
        """Finish or undo the writes a crash interrupted, then publish the log's positions."""
        await asyncio.to_thread(self.log.recover)
        positions = await asyncio.to_thread(self.log.positions)
        await until_reachable("store", partial(self.watermark.record_positions, positions), step="seed")
        logs.info(
            "archiver_started",
            topic=self._settings.events_topic,
            raw_dir=self._settings.own_log_dir,
            positions=positions,
        )

    async def archive(
        self,
        batches: AsyncIterator[list[M]],
        record_of: Callable[[M], Record],
        ack: Callable[[M], Awaitable[object]],
    ) -> None:
        """Write each micro-batch to the log, publish the positions it reached, then ack it."""
        async for messages in batches:
            records = [record_of(m) for m in messages]
            started = time.perf_counter()
            write = partial(asyncio.to_thread, self.log.write, records)
            report = await until_reachable("store", write, step="write_log")
            metrics.FLUSH_SECONDS.labels(WORKER).observe(time.perf_counter() - started)
            metrics.RECORDS.labels(WORKER).inc(len(records))
            metrics.EVENTS.labels(WORKER).inc(report.rows)
            metrics.BATCH_RECORDS.labels(WORKER).observe(len(records))
            metrics.BATCH_EVENTS.labels(WORKER).observe(report.rows)
            publish = partial(self.watermark.record_positions, report.positions)
            await until_reachable("store", publish, step="record_positions")
            for message in messages:
                await ack(message)
            logs.info(
                "archive_batch",
                records=len(records),
                rows=report.rows,
                files=len(report.files),
                skipped=report.skipped,
                poison=report.poison,
                positions=report.positions,
            )

    async def advance_watermark(self) -> None:
        """Re-publish what the log holds (covers a Redis that lost the positions, and batches of
        poison records only), then sample and advance the watermark; a broker or Redis hiccup only
        delays it."""
        try:
            await self.watermark.record_positions(await asyncio.to_thread(self.log.positions))
            value = await self.watermark.tick()
        except Exception as exc:
            logs.warning("watermark_failed", error=exc)
            return
        if value is not None:
            if self._settings.peers:  # the batch of any region reads every region's (decision 0006)
                await asyncio.to_thread(_write_atomically, self._settings.watermark_file, str(value))
            metrics.WATERMARK.set(value)
            logs.info("watermark", topic=self._settings.events_topic, watermark_ms=value)


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.tmp")
    aside.write_text(text)
    os.replace(aside, path)
