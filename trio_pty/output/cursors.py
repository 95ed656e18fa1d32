"""Read cursors: where each reader's previous read of a session ended, so that a read with
`since="last"` returns only what came after it."""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple


class Cursor(NamedTuple):
    line: int  # where the next read starts (the previous page's next_offset)
    offset: int  # the output's end offset when the previous read was made


class ReadCursors:
    """Cursors by session, then by reader key. Each session keeps at most its share of
    `capacity` (`capacity // sessions`, at least one), its least recently used dropped first,
    so a client that makes up reader keys cannot grow memory, nor push out the cursors
    other clients keep on a session it cannot read. With at most `sessions` sessions (the
    manager's `max_sessions`; a removed session's cursors go with it) they stay within
    `capacity` in all."""

    def __init__(self, capacity: int, *, sessions: int = 1) -> None:
        self._per_session = max(1, capacity // sessions)
        self._cursors: dict[str, OrderedDict[str, Cursor]] = {}

    def __len__(self) -> int:
        return sum(len(readers) for readers in self._cursors.values())

    def get(self, session_id: str, reader: str) -> Cursor | None:
        readers = self._cursors.get(session_id)
        return None if readers is None else readers.get(reader)

    def set(self, session_id: str, reader: str, cursor: Cursor) -> None:
        readers = self._cursors.setdefault(session_id, OrderedDict())
        readers[reader] = cursor
        readers.move_to_end(reader)
        while len(readers) > self._per_session:
            readers.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """Drop every cursor of a session (it was removed)."""
        self._cursors.pop(session_id, None)
