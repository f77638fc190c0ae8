-- The batch runs of the relational store (copied in by the builder): when each was published, and
-- how: the operator's reason to let views fall, validation skipped, published by force.

with

source as (
    select * from raw_batch_runs
),

final as (
    select
        run_id,
        cutoff,
        epoch_ms(cutoff) as cutoff_time,
        rules_version,
        started_at,
        finished_at,
        status,
        events_read,
        published_at,
        allow_decrease_reason,
        coalesce(skip_validation, false) as skip_validation,
        coalesce(forced, false) as forced
    from source
)

select * from final
