"""The records trio-pty hands to its users, and the cattrs converter that (un)structures them.

These are plain immutable values: the library returns them, the RPC layer turns them into
JSON with `converter.unstructure`, and the client turns JSON back with `converter.structure`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import attrs
import cattrs

Status = Literal["running", "exited", "killing", "killed"]
WaitReason = Literal["matched", "idle", "exited", "timeout", "prompt"]
CommandState = Literal["running", "exited", "session_ended", "open"]
RunReason = Literal["exited", "timeout", "session_ended"]
EndReason = Literal["timeout", "idle_timeout"]
"""Why trio-pty itself ended a session: its `timeout` passed, or it was idle for its
`idle_timeout` (no output, no input, no attached client). `timed_out` is true for both."""


@attrs.frozen(kw_only=True)
class SessionInfo:
    """A snapshot of one session's metadata."""

    id: str
    owner: str
    command: str
    args: list[str]
    workdir: str
    title: str | None
    description: str
    status: Status
    pid: int
    exit_code: int | None
    exit_signal: int | None
    timed_out: bool
    created_at: float
    line_count: int
    byte_count: int
    rows: int
    cols: int
    notify_on_exit: bool
    timeout: float | None
    error: str | None = None
    ready: ReadPage | None = None
    shell: str | None = None
    """"bash" or "zsh" for a session from spawn_shell, None otherwise."""
    at_prompt: bool = False
    """A shell session's shell shows its prompt and runs nothing (from its marks)."""
    terminal_title: str | None = None
    """The window title the program set (OSC 0 or 2), as opposed to `title`, the caller's."""
    idle_timeout: float | None = None
    """Seconds of no output, no input and no attached client before it is torn down."""
    reason: EndReason | None = None
    """Why trio-pty ended it ("timeout", "idle_timeout"), or None."""
    name: str | None = None
    """The caller's name for it (`spawn --name build`), unique among the owner's running
    sessions, or None."""


@attrs.frozen
class Line:
    """One line of clean text, numbered absolutely from the start of the session."""

    number: int
    text: str


@attrs.frozen(kw_only=True)
class ReadPage:
    """A page of lines. `next_offset` is where the next page starts; `missed_lines` counts
    requested lines that already left the buffer (the page then starts at `first_line`)."""

    lines: list[Line]
    total_lines: int
    first_line: int
    has_more: bool
    next_offset: int
    missed_lines: int = 0
    reason: WaitReason | None = None


@attrs.frozen(kw_only=True)
class CompactPage:
    """`pty.read`'s result when the request says `format: "compact"`: the `ReadPage` with
    each line a bare string, numbered `start`, `start + 1`, ... unless `numbers` (null when
    they run on without a gap) lists them: a search, or a hidden line skipped, leaves gaps.

    Why: a 500-line page of `{"number": n, "text": "..."}` objects costs more to unstructure,
    encode, and parse again (500 objects through the client's duplicate-name check) than it
    costs to send; one string per line takes about a third off the round trip
    (docs/benchmarks.md). The manager builds it straight from the line log
    (`Manager.read_compact`), so a compact page never makes `Line` objects.
    """

    start: int  # the first line's number; an empty page's next_offset
    lines: list[str]
    numbers: list[int] | None = None
    total_lines: int
    first_line: int
    has_more: bool
    next_offset: int
    missed_lines: int = 0
    reason: WaitReason | None = None

    @classmethod
    def of(cls, page: ReadPage) -> CompactPage:
        numbers = [line.number for line in page.lines]
        start = numbers[0] if numbers else page.next_offset
        consecutive = not numbers or numbers[-1] - start == len(numbers) - 1
        return cls(
            start=start,
            lines=[line.text for line in page.lines],
            # Numbers only grow, so first and last a page length apart means no gap.
            numbers=None if consecutive else numbers,
            total_lines=page.total_lines,
            first_line=page.first_line,
            has_more=page.has_more,
            next_offset=page.next_offset,
            missed_lines=page.missed_lines,
            reason=page.reason,
        )

    def page(self) -> ReadPage:
        """The page as `ReadPage`, as the object form carries it."""
        numbers: Sequence[int] = self.numbers or range(self.start, self.start + len(self.lines))
        if len(numbers) != len(self.lines):
            raise ValueError(f"{len(numbers)} numbers for {len(self.lines)} lines")
        return ReadPage(
            lines=list(map(Line, numbers, self.lines)),  # lengths checked above; map: -35%
            total_lines=self.total_lines,
            first_line=self.first_line,
            has_more=self.has_more,
            next_offset=self.next_offset,
            missed_lines=self.missed_lines,
            reason=self.reason,
        )


@attrs.frozen(kw_only=True)
class Screen:
    """The terminal as it shows now: exactly `rows` lines of text (trailing blanks stripped,
    a wide character once), the cursor (row, col, zero-based cells), the window title the
    program set, whether a full-screen program's alternate screen is showing, and the output
    offset this reflects. `reason` says why a wait attached to the snapshot ended."""

    id: str
    rows: int
    cols: int
    lines: list[str]
    cursor: tuple[int, int]
    cursor_visible: bool
    title: str | None
    alternate: bool
    offset: int
    reason: WaitReason | None = None


@attrs.frozen(kw_only=True)
class ExitEvent:
    """Delivered once to the exit callback when a session with notify_on_exit ends."""

    type: Literal["pty.exited"] = "pty.exited"
    id: str
    owner: str
    description: str
    exit_code: int | None
    exit_signal: int | None
    timeout_seconds: float | None
    timed_out: bool
    output_lines: int
    last_line: str
    reason: EndReason | None = None


@attrs.frozen(kw_only=True)
class DrainStatus:
    """Where a drain stands: refusing new sessions, and the seconds until the running ones
    (`running`, those running or being killed) are torn down anyway."""

    draining: bool
    drain_remaining_s: float | None
    running: int


@attrs.frozen(kw_only=True)
class Wait:
    """A server-side wait: return once a line matches `pattern`, or the output has been quiet
    for `idle_ms` after at least one byte, or (with `exit`) the session has ended, or
    `timeout_ms` passes, or (with `prompt`, shell sessions only) the shell shows its prompt
    again (after a write: a prompt drawn after the write began). The session ending always
    ends a wait: no more output can come."""

    pattern: str | None = None
    ignore_case: bool = False
    idle_ms: int | None = None
    exit: bool = False
    timeout_ms: int | None = None
    prompt: bool = False


@attrs.frozen(kw_only=True)
class WriteResult:
    """What a write did; with a wait, also the output it produced (from the line where the
    write's output starts, `offset` being the raw byte offset where it starts)."""

    id: str
    bytes_written: int
    offset: int
    output: ReadPage | None = None


@attrs.frozen(kw_only=True)
class SignalResult:
    """What `signal` did: the signal's full name and the processes of the terminal's
    foreground group it was sent to (empty when that group had none left)."""

    id: str
    signal: str
    pids: list[int]


@attrs.frozen(kw_only=True)
class OutputChunk:
    """Raw output bytes starting at absolute byte `offset`. `gap` says that bytes before
    `offset` that the reader asked for have left the buffer."""

    offset: int
    data: bytes
    gap: bool = False


@attrs.frozen(kw_only=True)
class CommandResult:
    """What `run` saw of one command in a shell session.

    `reason`: "exited" (the shell reported the end: `exit_code` is the command's status),
    "timeout" (it still runs, or its end was never reported: `exit_code` is None), or
    "session_ended" (the shell itself ended: `exit_code` is the session's). `lines` are the
    command's own output (no prompt, no echo) with the session's line numbers; past the
    read limit, the first and the last lines, `missed_lines` counting those left out and
    `has_more` saying some can still be paged with `read(..., command=number)`.
    """

    id: str
    number: int
    command: str
    reason: RunReason
    exit_code: int | None
    lines: list[Line]
    has_more: bool
    missed_lines: int
    cwd: str | None
    started_at: float
    duration_ms: int


@attrs.frozen(kw_only=True)
class CommandInfo:
    """One entry of a shell session's command history (`commands`).

    `source`: "run" (sent by `run`) or "typed" (by a person, through attach or the monitor).
    `state`: "running"; "exited" (`exit_code` is its status); "session_ended" (the shell
    ended during it: `exit_code` is the session's); "open" (the prompt came back but the
    shell never reported how the command ended: no exit code, ever). `first_line` and
    `last_line` bound its output (None: it printed nothing), `cwd` is the directory after
    it, `duration_ms` is so far while it runs.
    """

    number: int
    command: str
    source: Literal["run", "typed"]
    state: CommandState
    exit_code: int | None
    first_line: int | None
    last_line: int | None
    cwd: str | None
    started_at: float
    duration_ms: int


Showing = Literal["pager", "full_screen"]
"""What holds a terminal that waits for a key: a pager at its prompt, or a full-screen
program (the alternate screen)."""


@attrs.frozen(kw_only=True)
class ExecResult:
    """What `exec` saw of one command run the way a script runs (`trio_pty.oneshot`).

    `status` is the session's: "running" once the yield time passed (it keeps running:
    follow it by `id`), else how it ended, with `exit_code` (or `exit_signal`) the
    command's own. `lines` are its output (past the read limit, the first and the last
    ones; `missed_lines` counts those left out, `has_more` says some can still be read).
    `others_ended`: processes besides the command that were still there when it ended and
    were ended with it (its background jobs); None while it runs. `showing`: while it runs,
    a pager or a full-screen program waiting for a key, if the screen shows one."""

    id: str
    command: str
    status: Status
    exit_code: int | None
    exit_signal: int | None
    lines: list[Line]
    has_more: bool
    missed_lines: int
    others_ended: int | None
    showing: Showing | None = None
    duration_ms: int


converter = cattrs.Converter(forbid_extra_keys=True)
