-- Per day and video: counted views, viewers, reactions and the views that did not count, with the
-- video's creator. The day is the UTC day of the event time.

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
        daily.rejected_scripted_agent
        + daily.rejected_address_velocity
        + daily.rejected_replay_rate
        + daily.rejected_datacenter_ip
        + daily.rejected_bad_ja3
        + daily.rejected_watch_anomaly as rejected_views,
        daily.run_id,
        daily.rules_version
    from daily
    left join videos
        on daily.video_id = videos.video_id
)

select * from final
