"""A session as an asciicast (v3, or v2 for older players): functions over a Session.

What the file holds is what the session still retains: its output ring with the times its
reader noted (`OutputBuffer.timing`), the window sizes in force over it, a shell session's
commands as markers and, once it ended, its exit status. After the ring rotated, the
recording starts at the ring's first byte, with the window size of that moment. The pure
part (events, rounding, the file's lines) is `output/record.py`; this module gathers a
session's pieces for it. See docs/output.md.
"""

from __future__ import annotations

import shlex
import sys
import time
from typing import TYPE_CHECKING

import attrs
import trio

from . import errors
from .output.record import (
    CAST_VERSIONS,
    CastHeader,
    CastVersion,
    Mark,
    TimingIndex,
    cast_events,
    format_cast,
)
from .policy.environment import TERM_VALUE
from .session import Session

if TYPE_CHECKING:  # the manager sits above this module: for annotations only
    from .manager import Manager

__all__ = ["cast_version", "recording"]


def cast_version(value: object) -> CastVersion:
    """`format` as asked (2 or 3); InvalidInput otherwise."""
    if type(value) is not int or value not in CAST_VERSIONS:
        raise errors.InvalidInput("format", f"must be 2 or 3 (asciicast v2 or v3), got {value!r}")
    return value


async def record(
    manager: Manager, session_id: str, *, owner: str = "default", format: int = 3
) -> str:
    """`Manager.recording`: the session (running or ended, while it is kept) as an
    asciicast, `format` 3 (the default) or 2, one JSON text a line: its retained output with
    the times it arrived, its resizes, a shell session's commands as markers, its exit last
    (v3). After the output ring rotated, it starts at the ring's first byte (docs/output.md)."""
    version = cast_version(format)
    return await recording(manager._session(session_id, owner), version)


async def recording(session: Session, version: CastVersion) -> str:
    """The asciicast of what `session` retains, one JSON text a line, newline-ended.

    What it holds is taken at once, on the event loop; the file is written in a worker
    thread (a 1 MB ring of binary output takes a fifth of a second to escape as JSON)."""
    return await trio.to_thread.run_sync(_taken(session).write, version)


@attrs.frozen(kw_only=True)
class _Taken:
    """What a recording holds, copied from the session at one moment."""

    header: CastHeader
    origin: float  # the monotonic time of the first event
    data: bytes  # the retained output, from offset `start`
    start: int
    index: TimingIndex
    marks: list[Mark]  # resizes, commands
    exit_status: tuple[float, int] | None

    def write(self, version: CastVersion) -> str:
        events = cast_events(
            self.data,
            self.start,
            self.index,
            origin=self.origin,
            marks=self.marks,
            exit_status=self.exit_status,
        )
        return "".join(line + "\n" for line in format_cast(version, self.header, events))


def _taken(session: Session) -> _Taken:
    output = session.output
    data, start = output.snapshot_with_offset()
    index = output.timing.copy()
    now = trio.current_time()

    def time_before(offset: int) -> float:
        """When the byte just before `offset` arrived (a mark noted there goes with it)."""
        when = index.time_at(max(offset - 1, start))
        return now if when is None else when

    sizes = output.sizes
    first = max((i for i, size in enumerate(sizes) if size.offset <= start), default=0)
    marks = [
        Mark(
            size.offset,
            time_before(size.offset) if size.at is None else size.at,
            "r",
            f"{size.cols}x{size.rows}",
        )
        for size in sizes[first + 1 :]
    ]
    if session.shell is not None:
        for record in session.shell.records(sys.maxsize):
            offset = record.output_start
            if offset is not None and offset >= start:
                marks.append(Mark(offset, time_before(offset), "m", record.command))
    first_output = index.time_at(start)
    origin = min(
        [m.time for m in marks] + ([] if first_output is None else [first_output]), default=now
    )
    last = max(
        [when for _, _, when in index.stretches(start)] + [m.time for m in marks],
        default=origin,
    )
    status = _exit_status(session)
    size = sizes[first]
    return _Taken(
        header=CastHeader(
            cols=size.cols,
            rows=size.rows,
            timestamp=round(time.time() - (now - origin)),
            term=TERM_VALUE,
            command=shlex.join([session.command, *session.args]),
            title=session.title,
            shell=session.command if session.shell is not None else None,
        ),
        origin=origin,
        data=data,
        start=start,
        index=index,
        marks=marks,
        exit_status=None if status is None else (last, status),
    )


def _exit_status(session: Session) -> int | None:
    """The status a shell would report: the exit code, or 128 + the signal that ended it;
    None while it runs."""
    if session.exit_code is not None:
        return session.exit_code
    if session.exit_signal is not None:
        return 128 + session.exit_signal
    return None
