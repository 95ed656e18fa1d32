"""Tables a person reads: `list`'s sessions and `commands`' history."""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence

from trio_pty.model import CommandInfo, SessionInfo

__all__ = ["exit_text", "format_commands", "format_table"]


def _age(created_at: float) -> str:
    seconds = max(0, int(time.time() - created_at))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def exit_text(info: SessionInfo) -> str:
    if info.exit_signal is not None:
        return f"sig{info.exit_signal}"
    if info.exit_code is not None:
        return str(info.exit_code)
    return "-"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    everything = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(row[i]) for row in everything) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in everything
    )


def format_table(sessions: Sequence[SessionInfo], *, owners: bool = False) -> str:
    """The `list` table; `owners` adds an OWNER column."""
    header = ["ID", "NAME", "STATUS", "PID", "EXIT", "LINES", "AGE", "COMMAND", "DESCRIPTION"]
    rows = []
    for info in sessions:
        status = info.status + (" (timeout)" if info.timed_out else "")
        if info.shell is not None and info.status == "running":
            status += " (prompt)" if info.at_prompt else " (busy)"
        row = [
            info.id,
            info.name or "-",
            status,
            str(info.pid),
            exit_text(info),
            str(info.line_count),
            _age(info.created_at),
            _clip(shlex.join([info.command, *info.args]), 40),
            _clip(info.description, 40),
        ]
        rows.append([info.owner, *row] if owners else row)
    return _table(["OWNER", *header] if owners else header, rows)


def format_commands(commands: Sequence[CommandInfo]) -> str:
    rows = []
    for info in commands:
        exit_code = "-" if info.exit_code is None else str(info.exit_code)
        if info.first_line is None or info.last_line is None:
            lines = "-"
        else:
            lines = f"{info.first_line}-{info.last_line}"
        rows.append(
            [
                str(info.number),
                info.state,
                exit_code,
                lines,
                f"{info.duration_ms / 1000:.1f}s",
                info.cwd or "-",
                _clip(info.command, 60),
            ]
        )
    return _table(["N", "STATE", "EXIT", "LINES", "TIME", "CWD", "COMMAND"], rows)
