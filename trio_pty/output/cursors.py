"""Read cursors: where each reader's previous read of a session ended, so that a read with
`since="last"` returns only what came after it."""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple


class Cursor(NamedTuple):
    line: int  # where the next read starts (the previous page's next_offset)
    offset: int  # the output's end offset when the previous read was made


class ReadCursors:
    """Cursors by (session id, reader key); the least recently used go first past
    `capacity`, so a client that makes up reader keys cannot grow memory."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._cursors: OrderedDict[tuple[str, str], Cursor] = OrderedDict()

    def __len__(self) -> int:
        return len(self._cursors)

    def get(self, session_id: str, reader: str) -> Cursor | None:
        return self._cursors.get((session_id, reader))

    def set(self, session_id: str, reader: str, cursor: Cursor) -> None:
        key = (session_id, reader)
        self._cursors[key] = cursor
        self._cursors.move_to_end(key)
        while len(self._cursors) > self._capacity:
            self._cursors.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """Drop every cursor of a session (it was removed)."""
        for key in [key for key in self._cursors if key[0] == session_id]:
            del self._cursors[key]
