-- Per day and video: counted views (and those of them flagged: scored in the rules' soft band),
-- viewers, reactions and the views that did not count, with the video's creator. The day is the
-- UTC day of the event time.

with

daily as (
    select * from stg_daily_video
),

videos as (
    select * from stg_videos
),

final as (
    select
        daily.date,
        daily.video_id,
        videos.creator_id,
        coalesce(videos.monetized, false) as monetized,
        daily.views,
        daily.unique_viewers,
        daily.likes,
        daily.dislikes,
        daily.short_views,
        daily.repeat_views,
        daily.flagged as flagged_views,
        {{ rejected_views_sum }} as rejected_views,
        daily.run_id,
        daily.rules_version
    from daily
    left join videos
        on daily.video_id = videos.video_id
)

select * from final
