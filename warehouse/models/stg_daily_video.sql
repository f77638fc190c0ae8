-- The current batch run's counts per event-time UTC day and video (batch/<run_id>/daily_video).

with

source as (
    select * from {{ daily_video }}
),

final as (
    select
        date::date as date,
        video_id::varchar as video_id,
        {{ count_columns }},
        flagged::bigint as flagged,
        {{ rejected_columns }},
        run_id::varchar as run_id,
        rules_version::varchar as rules_version
    from source
)

select * from final
