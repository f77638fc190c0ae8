"""The counted view of each viewer's window, per video (`rules.view_window_of`: one view counts per
video, viewer and window), within the retry horizon: fixed-width rows of a `rows.RowTable`.

A row is keyed by a 64-bit fingerprint of (video, viewer, window) and holds the counted view's
ingest time, its event's marker fingerprint (`seen.fingerprint`: which view it is), its viewer's
route (`rules.viewer_route`: where a hot video's plan sends the viewer) and its video's tag
(`seen.video_tag`: what a hot video's hand-off selects by). A changelog entry, a snapshot or a
hand-off carries them as `WINDOW` records (32 bytes)."""

from __future__ import annotations

import numpy as np
from xxhash import xxh64_intdigest

WINDOW = np.dtype([("fp", "<u8"), ("ts", "<i8"), ("event", "<u8"), ("route", "<u4"), ("tag", "<u4")])

# A window's counted view: its ingest time, its event's fingerprint, its viewer's route, its video's
# tag (a plain tuple: one is made per counted view).
Counted = tuple[int, int, int, int]


def window_key(video: str, viewer: str, window: int) -> int:
    """The 64-bit key of a viewer's window of a video."""
    return xxh64_intdigest(f"{video}\x1f{viewer}\x1f{window}".encode())
