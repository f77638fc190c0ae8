-- The video catalog of the relational store (copied in by the builder): creator, length, monetized.

with

source as (
    select * from raw_videos
),

final as (
    select
        video_id,
        creator_id,
        duration_secs,
        monetized
    from source
)

select * from final
