-- What each creator earns per day: the current ledger row of each creator and day (the row of the
-- batch run published last; runs never published only when no published run has the day), with
-- its audit fields and how its run was published.

with

ledger as (
    select * from stg_payout_ledger
),

runs as (
    select * from stg_batch_runs
),

ranked as (
    select
        ledger.*,
        runs.cutoff,
        runs.published_at,
        runs.allow_decrease_reason,
        coalesce(runs.skip_validation, false) as skip_validation,
        coalesce(runs.forced, false) as forced,
        row_number() over (
            partition by ledger.creator_id, ledger.day
            order by
                runs.published_at is not null desc,
                runs.published_at desc,
                runs.cutoff desc,
                runs.started_at desc,
                ledger.created_at desc,
                ledger.run_id desc
        ) as recency
    from ledger
    left join runs
        on ledger.run_id = runs.run_id
),

final as (
    select
        creator_id,
        day,
        monetizable_views,
        rate_per_1000,
        amount,
        currency,
        run_id,
        rules_version,
        counted_ids_digest,
        input_files_count,
        input_files_digest,
        created_at,
        published_at,
        allow_decrease_reason,
        skip_validation,
        forced
    from ranked
    where recency = 1
)

select * from final
order by
    creator_id,
    day
