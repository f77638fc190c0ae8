-- The 100 most viewed videos of all time as of the baseline's cutoff (ties: by video_id).

with

baseline as (
    select * from stg_baseline
),

videos as (
    select * from stg_videos
),

ranked as (
    select
        row_number() over (order by baseline.views desc, baseline.video_id) as rank,
        baseline.video_id,
        videos.creator_id,
        baseline.views,
        baseline.unique_viewers,
        baseline.likes,
        baseline.dislikes,
        round(baseline.likes / nullif(baseline.likes + baseline.dislikes, 0), 4) as like_ratio,
        baseline.cutoff_time as as_of,
        baseline.run_id
    from baseline
    left join videos
        on baseline.video_id = videos.video_id
),

final as (
    select * from ranked
    where rank <= 100
)

select * from final
order by rank
