-- The current batch run's counts per event-time UTC day and video (batch/<run_id>/daily_video).

with

source as (
    select * from {{ daily_video }}
),

final as (
    select
        date::date as date,
        video_id::varchar as video_id,
        views::bigint as views,
        likes::bigint as likes,
        dislikes::bigint as dislikes,
        unique_viewers::bigint as unique_viewers,
        short_views::bigint as short_views,
        repeat_views::bigint as repeat_views,
        flagged::bigint as flagged,
        {{ rejected_columns }},
        run_id::varchar as run_id,
        rules_version::varchar as rules_version
    from source
)

select * from final
