"""The archiver: the events topic to the Parquet log (`archiver`, `archive_worker`) and the watermark
below which every event is in the log (`watermark`)."""
