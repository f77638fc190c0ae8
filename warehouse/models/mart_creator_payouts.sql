-- What each creator earns per day: the ledger row of the latest batch run for that creator and
-- day, with its audit fields (rules version, counted-ids digest).

with

ledger as (
    select * from stg_payout_ledger
),

latest as (
    select *
    from ledger
    qualify row_number() over (
        partition by creator_id, day
        order by created_at desc, run_id desc
    ) = 1
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
        created_at
    from latest
)

select * from final
order by
    creator_id,
    day
