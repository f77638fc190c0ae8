-- The raw event log as archived: one row per log row (retries included), typed, with event and
-- ingestion times as timestamps (UTC) and the hive partition it was filed under.

with

source as (
    select * from {{ raw_log }}
),

final as (
    select
        event_id::varchar as event_id,
        type::varchar as type,
        video_id::varchar as video_id,
        user_id::varchar as user_id,
        session_id::varchar as session_id,
        ts::bigint as ts,
        epoch_ms(ts::bigint) as event_time,
        ip::varchar as ip,
        user_agent::varchar as user_agent,
        watch_secs::double as watch_secs,
        video_duration_secs::double as video_duration_secs,
        ja3::varchar as ja3,
        ingest_ts::bigint as ingest_ts,
        epoch_ms(ingest_ts::bigint) as ingest_time,
        kafka_partition::bigint as kafka_partition,
        kafka_offset::bigint as kafka_offset,
        ingest_date::date as ingest_date,
        ingest_hour::integer as ingest_hour
    from source
)

select * from final
