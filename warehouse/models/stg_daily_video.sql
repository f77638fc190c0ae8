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
        rejected_scripted_agent::bigint as rejected_scripted_agent,
        rejected_address_velocity::bigint as rejected_address_velocity,
        rejected_replay_rate::bigint as rejected_replay_rate,
        rejected_datacenter_ip::bigint as rejected_datacenter_ip,
        rejected_bad_ja3::bigint as rejected_bad_ja3,
        rejected_watch_anomaly::bigint as rejected_watch_anomaly,
        run_id::varchar as run_id,
        rules_version::varchar as rules_version
    from source
)

select * from final
