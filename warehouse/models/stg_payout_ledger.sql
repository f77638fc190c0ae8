-- The payout ledger of the relational store (copied in by the builder): one row per creator, day
-- and batch run, with the audit fields that let `tally audit` re-derive it.

with

source as (
    select * from raw_payout_ledger
),

final as (
    select
        creator_id,
        day,
        run_id,
        rules_version,
        monetizable_views,
        rate_per_1000,
        currency,
        amount,
        input_files,
        input_files_count,
        input_files_digest,
        counted_ids_digest,
        created_at
    from source
)

select * from final
