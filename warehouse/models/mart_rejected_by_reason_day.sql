-- Views rejected as bot traffic per day and reason (the heaviest signal of each rejected view),
-- with how many videos they hit and their share of the day's rejected views.

with

daily as (
    select * from stg_daily_video
),

by_reason as (
    unpivot (
        select
            date,
            video_id,
            {{ rejected_by_reason }}
        from daily
    )
    on {{ reasons }}
    into
        name reason
        value rejected_views
),

per_day as (
    select
        date,
        reason,
        sum(rejected_views)::bigint as rejected_views,
        count(*) filter (where rejected_views > 0) as videos
    from by_reason
    group by
        date,
        reason
    having sum(rejected_views) > 0
),

final as (
    select
        date,
        reason,
        rejected_views,
        videos,
        round(rejected_views / sum(rejected_views) over (partition by date), 4) as share_of_day
    from per_day
)

select * from final
order by
    date,
    rejected_views desc,
    reason
