-- The published baseline: exact all-time counts per video as of the current run's cutoff.

with

source as (
    select * from {{ baseline }}
),

final as (
    select
        video_id::varchar as video_id,
        {{ count_columns }},
        {{ rejected_columns }},
        {{ baseline_run_id }}::varchar as run_id,
        {{ baseline_cutoff }}::bigint as cutoff,
        epoch_ms({{ baseline_cutoff }}::bigint) as cutoff_time,
        {{ baseline_rules_version }}::varchar as rules_version
    from source
)

select * from final
