"""What the tools hand back: text a model reads well, and the same facts as records.

Pure (no trio, no SDK calls): the session state a model sees, output cut in the middle to a
character budget with a line saying what was left out and how to read it, and the error
text that says an error's kind, what happened and what to do next.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from trio_pty.model import Line, SessionInfo

__all__ = [
    "ERROR_ADVICE",
    "Shown",
    "State",
    "Status",
    "describe_end",
    "error_text",
    "read_hint",
    "show_lines",
    "state_of",
]

Status = Literal["running", "exited", "killed"]

#: The page size a read hint asks for (the manager's default read limit).
HINT_LIMIT: Final = 500


@attrs.frozen
class State:
    """A session as a model sees it: running, or how it ended; `cwd` is where a command
    left its shell (shell_command)."""

    status: Status
    exit_code: int | None
    exit_signal: int | None
    cwd: str | None = None


def state_of(info: SessionInfo) -> State:
    """The state of a session (its program's: a command's from exec_command is its own)."""
    ended: Status = "killed" if info.status in ("killing", "killed") else "exited"
    status: Status = "running" if info.status == "running" else ended
    return State(status, info.exit_code, info.exit_signal)


def describe_end(state: State) -> str:
    """How a session ended, in a few words ("exit code 3", "killed by SIGKILL")."""
    if state.exit_signal is not None:
        try:
            name = signal.Signals(state.exit_signal).name
        except ValueError:
            name = f"signal {state.exit_signal}"
        return f"killed by {name}" if state.status == "killed" else f"ended by {name}"
    if state.exit_code is not None:
        return f"exit code {state.exit_code}"
    return state.status if state.status == "killed" else "exited (no exit code reported)"


def read_hint(session_id: str, offset: int, count: int) -> str:
    """The read_output call that shows `count` lines from line `offset`."""
    arguments = {"session_id": session_id, "offset": offset, "limit": min(count, HINT_LIMIT)}
    return f"read_output {json.dumps(arguments)}"


@attrs.frozen
class Shown:
    """Output as shown: `text` (lines joined, marker lines where lines were left out) and
    how many lines it leaves out."""

    text: str
    omitted: int


@attrs.frozen
class _Gap:
    """Lines `first`..`last` (by number), `count` of them, not shown."""

    first: int
    last: int
    count: int

    def marker(self, session_id: str | None) -> str:
        where = (
            f"line {self.first}" if self.first == self.last else f"lines {self.first}-{self.last}"
        )
        text = f"… {self.count} line{'s' if self.count != 1 else ''} not shown ({where})"
        if session_id is not None:
            text += f"; {read_hint(session_id, self.first, self.count)} shows them"
        return text + " …"


_Entry = Line | _Gap


def _clip(text: str, budget: int, *, keep: Literal["start", "end"]) -> str:
    """A piece of a line too long for the budget, with an ellipsis where it was cut."""
    if len(text) <= budget:
        return text
    budget = max(budget - 1, 0)
    return text[:budget] + "…" if keep == "start" else "…" + text[len(text) - budget :]


def show_lines(
    lines: Sequence[Line], budget: int, *, session_id: str | None, gaps: bool = False
) -> Shown:
    """Join `lines` into at most `budget` characters (marker lines aside): all of them, or
    the first and the last ones around one marker line saying how many were left out and
    how to read them (when `session_id` is given). With `gaps`, a jump in line numbers is
    lines the source left out (a command's output cut in the middle) and gets a marker too.
    """
    entries: list[_Entry] = []
    for line in lines:
        previous = entries[-1] if entries else None
        if gaps and isinstance(previous, Line) and line.number > previous.number + 1:
            missing = line.number - previous.number - 1
            entries.append(_Gap(previous.number + 1, line.number - 1, missing))
        entries.append(line)
    if sum(_cost(entry) for entry in entries) > budget:
        entries = _cut(entries, budget)
    text = "\n".join(
        entry.text if isinstance(entry, Line) else entry.marker(session_id) for entry in entries
    )
    return Shown(text, sum(entry.count for entry in entries if isinstance(entry, _Gap)))


def _cost(entry: _Entry) -> int:
    return len(entry.text) + 1 if isinstance(entry, Line) else 0


def _cut(entries: list[_Entry], budget: int) -> list[_Entry]:
    """The first lines within half the budget, the last ones within the rest, and one gap
    for everything between them. When not even one line fits at an end, that end shows a
    piece of its line."""
    # Neither end reaches past a gap: the gaps there join the one in the middle.
    head, used = 0, 0
    while (
        head < len(entries)
        and isinstance(entries[head], Line)
        and used + _cost(entries[head]) <= budget // 2
    ):
        used += _cost(entries[head])
        head += 1
    tail = len(entries)
    while (
        tail > head
        and isinstance(entries[tail - 1], Line)
        and used + _cost(entries[tail - 1]) <= budget
    ):
        used += _cost(entries[tail - 1])
        tail -= 1
    kept_head, middle, kept_tail = entries[:head], entries[head:tail], entries[tail:]
    left = budget - used
    if not kept_head and middle and isinstance(opening := middle[0], Line) and left > 2:
        # The start of the first line; half of what is left when the last needs a piece too.
        share = left if kept_tail or len(middle) == 1 else left // 2
        piece = _clip(opening.text, share - 1, keep="start")
        kept_head, left = [Line(opening.number, piece)], left - len(piece) - 1
        del middle[0]
    if not kept_tail and middle and isinstance(closing := middle[-1], Line) and left > 2:
        piece = _clip(closing.text, left - 1, keep="end")
        kept_tail = [Line(closing.number, piece)]
        del middle[-1]
    if not middle:
        return kept_head + kept_tail
    first = middle[0].number if isinstance(middle[0], Line) else middle[0].first
    last = middle[-1].number if isinstance(middle[-1], Line) else middle[-1].last
    count = sum(1 if isinstance(entry, Line) else entry.count for entry in middle)
    return [*kept_head, _Gap(first, last, count), *kept_tail]


#: What a model can do about each kind of error, said once.
ERROR_ADVICE: Final[Mapping[str, str]] = {
    "session_not_found": (
        "This session does not exist (it never did, or it was removed after it ended). "
        "Call list_sessions to see the sessions you have."
    ),
    "not_running": (
        "The session has ended. read_output still shows its output; start a new command "
        "with exec_command or a program with spawn."
    ),
    "limit_exceeded": (
        "Too many sessions are running. kill the ones you no longer need (list_sessions "
        "shows them), then call again."
    ),
    "busy": (
        "A command is still running in that session: wait for it with write_stdin and "
        'empty chars, or interrupt it with keys ["C-c"].'
    ),
    "write_timeout": (
        "The program did not read its input in time. Look at it with screen or "
        'read_output; interrupt it with keys ["C-c"] or end it with kill.'
    ),
    "invalid_input": "An argument is not acceptable: fix the one named above and call again.",
    "permission_denied": (
        "The operator's rules do not allow this. Do not retry the same call; use another "
        "command or ask the user."
    ),
    "spawn_failed": (
        "The program could not be started. Check the command name (is it installed, is it "
        "on PATH?) and the workdir."
    ),
    "owner_deleted": "This client's sessions were deleted. Restart the MCP server.",
    "closing": "The terminal service is shutting down. Try again once it is back.",
    "connection_lost": (
        "The connection to the trio-pty server was lost. Check that `trio-pty serve` "
        "runs, then restart this MCP server."
    ),
    "internal_error": "This is a bug in trio-pty. Try another way, and report it.",
}


def error_text(kind: str, message: str, details: Mapping[str, Any] | None = None) -> str:
    """An error as a model should read it: its kind, what happened, what to do next."""
    advice = ERROR_ADVICE.get(kind, "Check the arguments and try again.")
    text = f"Error [{kind}]: {message.rstrip('.')}.\nWhat to do: {advice}"
    live = (details or {}).get("live_ids")
    if kind == "limit_exceeded" and live:
        text += f"\nRunning now: {', '.join(map(str, live))}."
    return text
