"""A client streaming one session's raw output (`Session.attach`): a cursor over its ring."""

from __future__ import annotations

from typing import Final

from .lifecycle import Lifecycle
from .model import OutputChunk
from .output.buffer import OutputBuffer
from .output.draw import Drawn

_SAFE_START_SCAN: Final = 65_536


class Attachment:
    """A cursor over one session's raw output: the retained snapshot (or exactly the bytes
    after `offset`), then live output, in order, none twice, none missing.

    It pulls from the ring, so a slow consumer never blocks the reader, never makes memory
    grow and never stalls another consumer; one that falls more than the ring behind gets a
    chunk flagged `gap` and resumes at the oldest retained line. A `driver` is a client that
    answers terminal queries itself, so the session stops answering them while it is there.
    Its session sees it only through the lifecycle: attached (not idle), driven, detached.
    An attachment that starts from a drawing of the session's state (`drawn`, set by who
    drew it) starts its cursor at the drawing's offset.
    """

    def __init__(
        self,
        output: OutputBuffer,
        lifecycle: Lifecycle,
        offset: int | None,
        *,
        driver: bool,
        chunk_bytes: int,
        active: bool = True,
    ) -> None:
        self._output = output
        self._lifecycle = lifecycle
        self._driver = driver
        self._active = active  # False: a watcher (read-only token), which is not activity
        self._chunk_bytes = chunk_bytes
        self._closed = False
        self._gap = False
        self.drawn: Drawn | None = None
        if offset is None or offset < output.start_offset or offset > output.end_offset:
            self._gap = offset is not None
            self._cursor = self._safe_start()
        else:
            self._cursor = offset
        lifecycle.attached(driver=driver, active=active)

    @property
    def cursor(self) -> int:
        """The offset of the next byte this attachment will deliver."""
        return self._cursor

    def _safe_start(self) -> int:
        """The oldest retained byte, moved to a line start once output has rotated, so a
        replay never begins inside an escape sequence or a UTF-8 character."""
        output = self._output
        start = output.start_offset
        if start == 0:
            return 0
        head, _, _ = output.bytes_since(start, _SAFE_START_SCAN)
        newline = head.find(b"\n")
        return start + newline + 1 if newline >= 0 else start

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._lifecycle.detached(driver=self._driver, active=self._active)

    def __aiter__(self) -> Attachment:
        return self

    async def __anext__(self) -> OutputChunk:
        output = self._output
        lifecycle = self._lifecycle
        while not self._closed and not lifecycle.removed:
            if self._cursor < output.start_offset:
                self._gap = True
                self._cursor = self._safe_start()
            data, next_offset, _ = output.bytes_since(self._cursor, self._chunk_bytes)
            if data:
                chunk = OutputChunk(offset=self._cursor, data=data, gap=self._gap)
                self._cursor, self._gap = next_offset, False
                return chunk
            if lifecycle.finished:
                break
            await lifecycle.next_output()
        raise StopAsyncIteration
