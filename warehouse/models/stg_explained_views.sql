-- The current batch run's explanations (batch/<run_id>/explained): every view it refused as a
-- bot's or counted but flagged, with its score and the signals that fired.

with

source as (
    select * from {{ explained_views }}
),

final as (
    select
        event_id::varchar as event_id,
        video_id::varchar as video_id,
        ts::bigint as ts,
        ingest_ts::bigint as ingest_ts,
        viewer::varchar as viewer,
        verdict::varchar as verdict,
        reason::varchar as reason,
        score::double as score,
        signals::varchar[] as signals,
        reject_score::double as reject_score,
        soft_score::double as soft_score,
        rules_version::varchar as rules_version
    from source
)

select * from final
