-- The batch layer's counting rules as one DuckDB query: per-video counts with the baseline's
-- columns, equal to counting.oracle.count over the log rows ingested before the cutoff.
-- Every threshold, weight, pattern and range is rendered in from counting (bench/batch_layer.py,
-- rules_variables); none is written here. Event times are validated >= 0 at ingest, so integer
-- `//` is floor division.

with

log as (
    select
        event_id,
        type,
        video_id,
        user_id,
        session_id,
        ts,
        ip,
        user_agent,
        watch_secs,
        video_duration_secs,
        ja3,
        ingest_ts,
        kafka_partition,
        kafka_offset
    from {{ log }}
    where ingest_ts < {{ cutoff }}
),

-- retries: the first copy of each event_id by ingestion (the Kafka position breaks a tie)
deduped as (
    select *
    from log
    qualify row_number() over (
        partition by event_id
        order by ingest_ts nulls first, kafka_partition, kafka_offset
    ) = 1
),

views as (
    select
        event_id,
        video_id,
        ts,
        ingest_ts,
        ip,
        user_agent,
        ja3,
        watch_secs,
        video_duration_secs,
        coalesce(user_id, {{ anon_prefix }} || session_id) as viewer,
        ts // {{ hour_ms }} as hour,
        ts // {{ day_ms }} as day,
        ts // {{ view_window_ms }} as view_window
    from deduped
    where type = 'view'
),

-- the static signals of an address or an agent are computed once per distinct value
-- (blank: only the characters Python's str.isspace holds, as counting.bots strips them)
agents as (
    select
        user_agent,
        trim(user_agent, {{ whitespace }}) = '' as hit_missing_agent,
        trim(user_agent, {{ whitespace }}) <> ''
        and coalesce(regexp_matches(user_agent, {{ scripted_agent_pattern }}), false) as hit_scripted_agent,
        trim(user_agent, {{ whitespace }}) <> ''
        and coalesce(regexp_matches(user_agent, {{ impossible_agent_pattern }}), false) as hit_impossible_agent
    from (select distinct user_agent from views where user_agent is not null)
),

-- address velocity: the busiest 60 s holding a view end at a view at or after it
view_velocity as (
    select
        event_id,
        max(ending) over (
            partition by ip order by ts range between current row and {{ velocity_span_ms }} following
        ) as busiest
    from (
        select
            event_id,
            ip,
            ts,
            count(*) over (
                partition by ip order by ts range between {{ velocity_span_ms }} preceding and current row
            ) as ending
        from views
        where ip is not null
    )
),

-- agent rotation: the distinct agents (non-empty) of an address in an hour
address_agents as (
    select
        ip,
        hour,
        count(distinct user_agent) as agents
    from views
    where ip is not null and user_agent <> ''
    group by ip, hour
),

address_text as (
    select
        ip,
        split_part(ip, '%', 1) as bare
    from (select distinct ip from views where ip is not null)
),

-- an IPv6 text: its dotted IPv4 tail (if any) as two hex groups, then `::` expanded to 8 groups
address_groups as (
    select
        ip,
        bare,
        case
            when bare not like '%:%' then null
            when bare like '%.%' then
                regexp_replace(bare, '[0-9.]+$', '')
                || printf(
                    '%x:%x',
                    try_cast(split_part(regexp_extract(bare, '[0-9.]+$'), '.', 1) as integer) * 256
                    + try_cast(split_part(regexp_extract(bare, '[0-9.]+$'), '.', 2) as integer),
                    try_cast(split_part(regexp_extract(bare, '[0-9.]+$'), '.', 3) as integer) * 256
                    + try_cast(split_part(regexp_extract(bare, '[0-9.]+$'), '.', 4) as integer)
                )
            else bare
        end as v6
    from address_text
),

-- the 8 hex groups of an IPv6 text (the groups left and right of `::` with zeros between)
address_hextets as (
    select
        ip,
        bare,
        v6,
        case
            when v6 is null then null
            when v6 not like '%::%' then string_split(v6, ':')
            else list_concat(
                left_groups,
                list_transform(range(8 - len(left_groups) - len(right_groups)), lambda i: '0'),
                right_groups
            )
        end as hextets
    from (
        select
            *,
            case
                when split_part(v6, '::', 1) = '' then []::varchar[]
                else string_split(split_part(v6, '::', 1), ':')
            end as left_groups,
            case
                when split_part(v6, '::', 2) = '' then []::varchar[]
                else string_split(split_part(v6, '::', 2), ':')
            end as right_groups
        from address_groups
    )
),

address_values as (
    select
        ip,
        case
            when v6 is null then 4
            else 6
        end as version,
        case
            when v6 is null and len(string_split(bare, '.')) = 4 then list_reduce(
                list_transform(
                    string_split(bare, '.'),
                    lambda octet, i: try_cast(octet as utinyint)::uhugeint << (8 * (4 - i))::uhugeint
                ),
                lambda a, b: a | b
            )
            when len(hextets) = 8 then list_reduce(
                list_transform(
                    hextets,
                    lambda hextet, i: try_cast('0x' || hextet as usmallint)::uhugeint
                        << (16 * (8 - i))::uhugeint
                ),
                lambda a, b: a | b
            )
        end as value
    from address_hextets
),

-- an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is judged as its IPv4 address
addresses as (
    select
        ip,
        case
            when version = 6 and value >> 32::uhugeint = 65535::uhugeint then 4
            else version
        end as version,
        case
            when version = 6 and value >> 32::uhugeint = 65535::uhugeint
                then value & 4294967295::uhugeint
            else value
        end as value
    from address_values
),

datacenter_networks as (
    select
        version,
        first_address,
        last_address
    from {{ datacenter_networks }}
),

datacenter_addresses as (
    select distinct
        addresses.ip
    from addresses
    inner join datacenter_networks
        on addresses.version = datacenter_networks.version
        and addresses.value between datacenter_networks.first_address and datacenter_networks.last_address
),

signals as (
    select
        views.*,
        coalesce(agents.hit_scripted_agent, false) as hit_scripted_agent,
        coalesce(agents.hit_missing_agent, true) as hit_missing_agent,
        coalesce(agents.hit_impossible_agent, false) as hit_impossible_agent,
        datacenter_addresses.ip is not null as hit_datacenter_ip,
        coalesce(lower(views.ja3) in {{ bad_ja3 }}, false) as hit_bad_ja3,
        coalesce(
            views.watch_secs > {{ max_watch_secs }}
            or views.watch_secs
            > views.video_duration_secs * {{ watch_overrun_factor }} + {{ watch_overrun_slack_secs }},
            false
        ) as hit_watch_anomaly,
        coalesce(view_velocity.busiest, 0) > {{ max_views_per_address_minute }} as hit_address_velocity,
        coalesce(address_agents.agents, 0) > {{ max_agents_per_address_hour }} as hit_agent_rotation,
        count(*) over (
            partition by views.video_id, views.viewer, views.day
        ) > {{ max_replays_per_day }} as hit_replay_rate,
        coalesce(
            views.watch_secs < views.video_duration_secs * {{ min_watch_ratio }}
            and not isnan(views.watch_secs) and not isnan(views.video_duration_secs),
            false
        ) as hit_watch_ratio,
        coalesce(views.watch_secs, 0.0) >= {{ min_watch_secs }}
        and not isnan(coalesce(views.watch_secs, 0.0)) as is_qualified_view,
        coalesce(
            views.watch_secs >= {{ min_watch_secs }}
            and views.watch_secs < {{ near_threshold_below }}
            and not isnan(views.watch_secs)
            and (
                views.video_duration_secs is null
                or (
                    not isnan(views.video_duration_secs)
                    and views.watch_secs < views.video_duration_secs - {{ bunch_window_secs }}
                )
            ),
            false
        ) as is_near_threshold
    from views
    left join agents
        on views.user_agent = agents.user_agent
    left join datacenter_addresses
        on views.ip = datacenter_addresses.ip
    left join view_velocity
        on views.event_id = view_velocity.event_id
    left join address_agents
        on views.ip = address_agents.ip and views.hour = address_agents.hour
),

-- a view near the threshold on a (video, day) whose qualified views bunch there (of the views no
-- static signal rejects alone)
bunching as (
    select
        *,
        is_near_threshold
        and near_views >= {{ bunch_min_views }}
        and near_views >= {{ bunch_min_share }} * qualified_views as hit_threshold_bunching
    from (
        select
            *,
            count_if(is_qualified_view and ({{ static_score }}) < {{ reject_score }})
                over (partition by video_id, day) as qualified_views,
            count_if(is_qualified_view and is_near_threshold and ({{ static_score }}) < {{ reject_score }})
                over (partition by video_id, day) as near_views
        from signals
    )
),

-- the score adds the weights in the order of counting.bots.signals; the reason is the heaviest
-- signal, ties going to the one listed first in counting.bots.SIGNALS
scored as (
    select
        *,
        {{ score }} as score
    from bunching
),

judged as (
    select
        *,
        case
            when score >= {{ reject_score }} then list_sort(
                list_filter(
                    [
                        {{ reason_candidates }}
                    ],
                    lambda s: s.hit
                )
            )[1].reason
        end as reason,
        coalesce(watch_secs, 0.0) >= {{ min_watch_secs }} and not isnan(coalesce(watch_secs, 0.0)) as is_qualified,
        score >= {{ soft_score }} and score < {{ reject_score }} as is_flagged
    from scored
),

-- the first qualified human view of each (video, viewer, window) by ingestion order counts
view_outcomes as (
    select
        event_id,
        video_id,
        viewer,
        reason,
        is_flagged,
        case
            when not is_qualified then 'short'
            when reason is not null then 'rejected'
            when row_number() over (
                partition by video_id, viewer, view_window, is_qualified and reason is null
                order by coalesce(ingest_ts, 0), event_id
            ) = 1 then 'counted'
            else 'repeat'
        end as outcome
    from judged
),

reaction_states as (
    select
        type,
        state
    from {{ reaction_states }}
),

-- the latest reaction of each (user, video) by (ts, event_id) decides its state
latest_reactions as (
    select
        deduped.video_id,
        reaction_states.state
    from deduped
    inner join reaction_states
        on deduped.type = reaction_states.type
    where deduped.user_id is not null
    qualify row_number() over (
        partition by deduped.user_id, deduped.video_id
        order by deduped.ts desc, deduped.event_id desc
    ) = 1
),

view_counts as (
    select
        video_id,
        count_if(outcome = 'counted') as views,
        count(distinct viewer) filter (where outcome = 'counted') as unique_viewers,
        count_if(outcome = 'short') as short_views,
        count_if(outcome = 'repeat') as repeat_views,
        count_if(outcome = 'counted' and is_flagged) as flagged,
        {{ rejected_counts }}
    from view_outcomes
    group by video_id
),

reaction_counts as (
    select
        video_id,
        count_if(state = {{ liked }}) as likes,
        count_if(state = {{ disliked }}) as dislikes
    from latest_reactions
    group by video_id
),

videos as (
    select distinct
        video_id
    from deduped
),

final as (
    select
        videos.video_id,
        coalesce(view_counts.views, 0)::bigint as views,
        coalesce(reaction_counts.likes, 0)::bigint as likes,
        coalesce(reaction_counts.dislikes, 0)::bigint as dislikes,
        coalesce(view_counts.unique_viewers, 0)::bigint as unique_viewers,
        coalesce(view_counts.short_views, 0)::bigint as short_views,
        coalesce(view_counts.repeat_views, 0)::bigint as repeat_views,
        coalesce(view_counts.flagged, 0)::bigint as flagged,
        {{ rejected_columns }}
    from videos
    left join view_counts
        on videos.video_id = view_counts.video_id
    left join reaction_counts
        on videos.video_id = reaction_counts.video_id
)

select * from final
order by video_id
