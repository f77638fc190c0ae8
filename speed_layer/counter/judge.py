"""A view's verdict as the speed layer gives it: short, rejected by the bot rules (their field), or
qualified (it counts unless its viewer was counted earlier in its window). The windows are the
worker's (`ViewWindows`), filled as views come; the batch layer, which sees whole windows, corrects
the first views of a burst."""

from __future__ import annotations

import sys
from functools import lru_cache

from counting import rules
from counting.botfilter import BotFilter
from counting.event import Event
from counting.signals import REASONS
from speed_layer.counter.windows import ViewWindows

SHORT = "s"
QUALIFIED = "v"
FLAGGED = "f"  # qualified, with a score in the rules' soft band: counted, and flagged as the batch flags it
REACTION = "a"
# Every verdict, by the code a marker keeps of it (`speed_layer/state/seen.py`, 8 bits). The codes follow
# `signals.REASONS`: a new reason goes at its end, or the markers kept (the retry horizon) change
# meaning. FLAGGED has the top code, out of their way.
VERDICTS: tuple[str, ...] = (SHORT, QUALIFIED, REACTION, *(f"rejected:{reason}" for reason in REASONS))
VERDICT_CODE: dict[str, int] = {verdict: code for code, verdict in enumerate(VERDICTS)} | {FLAGGED: 255}
_intern = sys.intern


@lru_cache(maxsize=8)
def rejected_fields(bot_filter: BotFilter) -> tuple[str | None, ...]:
    """The count field (`rejected:<reason>`) of each signal mask; None: not rejected."""
    return tuple(None if reason is None else f"rejected:{reason}" for reason in bot_filter.rejection_by_mask)


def judge_view(
    event: Event, viewer: str, first_copy: bool, windows: ViewWindows, bot_filter: BotFilter
) -> str:
    """SHORT, QUALIFIED, FLAGGED (qualified, in the soft band) or the rejection field of a view; a
    copy already judged (`first_copy` false) is not counted again in the windows."""
    ts = event.ts
    # What the windows and the bot filter's caches keep: one object per address and agent, not
    # one per event.
    ip, agent = event.ip, event.user_agent
    if ip is not None:
        ip = _intern(ip)
    if agent is not None:
        agent = _intern(agent)
    address_views, viewer_views, address_agents = windows.observe_view(
        ip, ts, event.video_id, viewer, first_copy, agent
    )
    if not rules.is_qualified_view(event):
        return SHORT
    watch, duration = event.watch_secs, event.video_duration_secs
    rejected_field = rejected_fields(bot_filter)
    near = bot_filter.is_near_threshold(watch, duration)
    client = bot_filter.client_mask(agent, ip, event.ja3)
    static = bot_filter.static_mask(client, watch, duration)
    # Bunching weighs the views no static signal rejects alone.
    weighed = first_copy and rejected_field[static] is None
    near_views, qualified_views = windows.observe_qualified(ts, event.video_id, near, weighed)
    bunched = near and bot_filter.is_bunched(near_views, qualified_views)
    mask = static | bot_filter.window_mask(client, address_views, viewer_views, bunched, address_agents)
    if not mask:
        return QUALIFIED
    return rejected_field[mask] or (FLAGGED if bot_filter.flagged_by_mask[mask] else QUALIFIED)
