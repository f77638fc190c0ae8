-- Why each view was refused or flagged by the current batch run: its UTC day of event time, the
-- video's creator, the verdict, the recorded reason (the heaviest signal of a refused view), the
-- score against the run's thresholds and every signal that fired.

with

explained as (
    select * from stg_explained_views
),

videos as (
    select * from stg_videos
),

final as (
    select
        make_timestamp(explained.ts * 1000)::date as date,
        explained.event_id,
        explained.video_id,
        videos.creator_id,
        explained.viewer,
        explained.verdict,
        explained.reason,
        explained.score,
        explained.reject_score,
        explained.soft_score,
        array_to_string(explained.signals, ' + ') as signals,
        len(explained.signals) as signal_count,
        explained.rules_version
    from explained
    left join videos
        on explained.video_id = videos.video_id
)

select * from final
order by
    date,
    video_id,
    event_id
