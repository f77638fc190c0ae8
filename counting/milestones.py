"""Milestones: a video reaching a step of a ladder of view counts (1,000, 10,000, ... 1,000,000,000
by default; `TALLY_MILESTONE_STEPS`), announced once per video and step.

A step is reached only by the views of a published batch baseline, never by the speed layer's:
those still hold views the batch may refuse (a bot burst the speed layer let through before its
window filled), so a count the speed layer raised may come down, and an announcement cannot be
taken back. Published baselines never move back (a lower one needs a recorded reason or --force),
so a step once reached stays reached. The price is the wait for the next batch run.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_STEPS: tuple[int, ...] = tuple(10**n for n in range(3, 10))


def reached(views: int, steps: Sequence[int]) -> list[int]:
    """The steps of the ladder `views` reached, lowest first."""
    return sorted(step for step in steps if views >= step)


def milestone_id(video_id: str, step: int) -> str:
    """The id of a milestone: its key in the topic and its idempotency key for webhook receivers."""
    return f"{video_id}:{step}"
