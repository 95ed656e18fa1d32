"""Clean text for pieces of output that do not start or end at a line boundary.

A command's output starts after its C mark and ends at its D mark, and either may sit in
the middle of a line (`printf abc` leaves the prompt on the same line). These pieces are
cleaned by the same code as every line (a small OutputBuffer of their own), so a command's
lines read exactly as `read` would show them. Pure: no I/O, no trio.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..output.buffer import OutputBuffer, SizeRecord


def clean_lines(
    raw: bytes,
    *,
    max_line_length: int,
    max_escape_length: int,
    start: int = 0,
    sizes: Sequence[SizeRecord] = (),
) -> list[str]:
    """The clean lines of `raw` (cut like `read` cuts them); a final newline ends the
    last line, it does not start an empty one. `raw` is the output from offset `start` on,
    `sizes` the window sizes in force over it (`OutputBuffer.sizes_within`): a line wider
    than the window wraps as it did on the screen (none: lines never wrap)."""
    if not raw:
        return []
    buffer = OutputBuffer(
        len(raw), max_line_length=max_line_length, max_escape_length=max_escape_length
    )
    done = 0
    for record in sizes:
        at = min(max(record.offset - start, 0), len(raw))
        buffer.append(raw[done:at])
        done = max(done, at)
        buffer.note_size(record.rows, record.cols)
    buffer.append(raw[done:])
    return [line.text for line in buffer.read(0, buffer.total_lines).lines]
