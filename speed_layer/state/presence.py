"""Each session's newest heartbeat and newest leave, per partition (what `rules.is_watching` decides
presence from): fixed-width rows, never a text key and a tuple per session
(docs/decisions/0007-compact-markers.md).

A row is keyed by a 64-bit fingerprint of (video, session) and holds the ingest time of the
session's newest heartbeat and of its newest leave (-1: none), the session's route
(`rules.route_of`: where a hot video's plan sends it) and a 64-bit hash of its video. A trim scans
the rows (`PresenceTable.trim`, at a snapshot build's start), as a beat moves later with each one.

A changelog entry, a snapshot chunk or a hand-off carries them as `per_video.Videos` of `RECORD`s
(key, beat, leave, route, the video's place among the entry's names: 32 bytes)."""

from __future__ import annotations

import numpy as np
from xxhash import xxh64_intdigest

from counting import rules
from speed_layer.state.per_video import PerVideoRows

SESSION = np.dtype([("fp", "<u8"), ("ts", "<i8"), ("left", "<i8"), ("route", "<u4"), ("video", "<u8")])
RECORD = np.dtype([("fp", "<u8"), ("ts", "<i8"), ("left", "<i8"), ("route", "<u4"), ("video", "<u4")])
_SHARED = ("fp", "ts", "left", "route")  # the fields a row and its record share (not `video`)
NONE = -1  # no heartbeat (or no leave) kept

_second = rules.presence_second
# A session's value, as `get` answers it: (newest beat, newest leave, route, video hash).
Session = tuple[int, int, int, int]


def session_key(video: str, session: str) -> int:
    """The 64-bit key of a session of a video."""
    return xxh64_intdigest(f"{video}\x1f{session}".encode())


class PresenceTable(PerVideoRows):
    """One partition's sessions."""

    def __init__(self) -> None:
        super().__init__(SESSION, RECORD)

    def set(self, fp: int, beat: int, left: int, route: int, video: str) -> None:
        self._batch[fp] = (beat, left, route, self.video_hash(video))

    def _rows(self, fps: np.ndarray, values: list[tuple[int, ...]]) -> np.ndarray:
        rows = np.empty(fps.size, SESSION)
        rows["fp"] = fps
        matrix = np.array(values, np.int64).reshape(fps.size, 4)  # signed: -1 is no beat (or leave)
        rows["ts"], rows["left"], rows["route"], rows["video"] = matrix.T
        return rows

    def _records(self, rows: np.ndarray) -> np.ndarray:
        return _copied(rows, RECORD)

    def _rows_of(self, names: list[str], records: np.ndarray) -> np.ndarray:
        return _copied(records, SESSION)

    def watching(self) -> dict[str, dict[int, int]]:
        """Per video, the sessions watching by second of their newest heartbeat: those whose newest
        leave came before it."""
        live = _watching(self.rows())
        found: dict[str, dict[int, int]] = {}
        for video, beat in zip(live["video"].tolist(), live["ts"].tolist(), strict=True):
            counted = found.setdefault(self._names[video], {})
            second = _second(beat)
            counted[second] = counted.get(second, 0) + 1
        return found

    def watching_rows(self, video: str) -> np.ndarray:
        """A video's sessions watching (their newest leave came before their newest heartbeat)."""
        return _watching(self.of_video(video))

    def trim(self, present: int) -> None:
        """Drop heartbeats and leaves of a presence second before `present` (a row keeps the other
        one; a row with neither goes)."""
        rows = self.rows()
        for column in ("ts", "left"):
            seconds = np.fromiter(map(_second, rows[column].tolist()), np.int64, rows.size)
            rows[column][seconds < present] = NONE
        self.reset(rows[(rows["ts"] != NONE) | (rows["left"] != NONE)])


def _watching(rows: np.ndarray) -> np.ndarray:
    """The rows of sessions watching: a heartbeat, and no leave ingested since."""
    return rows[(rows["ts"] != NONE) & (rows["left"] < rows["ts"])]


def _copied(found: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Rows as records, or records as rows (their shared fields; `video` is left to the caller)."""
    into = np.empty(found.size, dtype)
    for name in _SHARED:
        into[name] = found[name]
    return into
