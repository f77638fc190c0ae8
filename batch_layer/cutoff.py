"""Which cutoffs a batch may run at: on a bucket edge and closed by the archiver's watermark."""

from __future__ import annotations

import redis

from batch_layer.errors import CutoffNotClosed, CutoffNotOnBucketEdge, WatermarkUnavailable
from counting import keys, redisconn, rules
from counting.settings import Settings


def check_on_bucket_edge(cutoff_ms: int, bucket_ms: int) -> None:
    """Raise unless `cutoff_ms` is a bucket edge: the speed layer's deltas resume exactly there."""
    if not rules.is_on_bucket_edge(cutoff_ms, bucket_ms):
        below = rules.bucket_edge_at_or_before(cutoff_ms, bucket_ms)
        raise CutoffNotOnBucketEdge(
            f"cutoff must be on a bucket edge, a multiple of bucket_ms={bucket_ms} (got {cutoff_ms}; "
            f"the edges around it are {below} and {below + bucket_ms})"
        )


def check_closed(cutoff_ms: int, watermark_ms: int) -> None:
    """Raise unless `cutoff_ms` is at or below the archiver watermark."""
    if cutoff_ms > watermark_ms:
        raise CutoffNotClosed(
            f"cutoff {cutoff_ms} is not closed: the archiver watermark is {watermark_ms}, so events "
            f"ingested in [{watermark_ms}, {cutoff_ms}) may not be in the Parquet log yet; wait for the "
            f"archiver to pass the cutoff (check that it runs), or pick a cutoff <= {watermark_ms}"
        )


def read_watermark(client: redis.Redis, redis_url: str) -> int:
    """The archiver watermark (ms) from Redis; every event ingested before it is in the log."""
    key = keys.archiver_watermark()
    try:
        raw = client.get(key)
    except redis.RedisError as exc:
        raise WatermarkUnavailable(
            f"Redis is not reachable at {redis_url} to read the archiver watermark ({exc}): "
            "start it with 'tally up' or set TALLY_REDIS_URL"
        ) from exc
    if raw is None:
        raise WatermarkUnavailable(
            f"no archiver watermark at {key!r} in {redis_url}: the archiver has not published one "
            "yet; check that it runs and has written the log"
        )
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise WatermarkUnavailable(
            f"the archiver watermark at {key!r} is not an integer of milliseconds (got {raw!r})"
        ) from None


def log_watermark(settings: Settings, client: redis.Redis) -> int:
    """The watermark of the log the batch reads: this region's archiver watermark, and with several
    regions the least of every region's (each archiver writes its own beside its part of the log:
    `Settings.watermark_file`), so a cutoff is closed only once every region's log holds it."""
    own = read_watermark(client, settings.redis_url)
    if not settings.peers:
        return own
    found = [own]
    for region in sorted({settings.region, *settings.peers}):
        path = settings.raw_dir / f"region={region}" / "_watermark"
        try:
            found.append(int(path.read_text()))
        except (OSError, ValueError):
            raise WatermarkUnavailable(
                f"region {region} has no archiver watermark at {path} yet: its archiver writes it there "
                f"once it has logged its events under {settings.raw_dir} (TALLY_LOG_ROOT, shared by "
                "every region)"
            ) from None
    return min(found)


def require_closed_cutoff(settings: Settings, cutoff_ms: int) -> int:
    """Check `cutoff_ms` against the settings' bucket width and the watermark in Redis.

    Returns the watermark read. There is no override: a baseline at an unclosed cutoff would miss
    events for good (the serving layer adds only the speed buckets at or after the cutoff).
    """
    check_on_bucket_edge(cutoff_ms, settings.bucket_ms)
    client = redisconn.sync_client(settings, socket_connect_timeout=5.0)
    try:
        watermark = log_watermark(settings, client)
    finally:
        client.close()
    check_closed(cutoff_ms, watermark)
    return watermark
