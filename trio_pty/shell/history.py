"""What a shell session did: its commands, from the marks its shell prints.

Pure (no trio); the session's reader feeds it every chunk (`ShellTracker.feed`), `run`
submits commands through it. The states follow the marks (see docs/shell.md):

    submit (run) or C (typed)      the record is running; output starts after (the first) C
    D;<status>                     it exited with that status; output ends at D
    Ctrl-C or a line end at the prompt   the line editor leaves its prompt: not at the
                                   prompt again until the D and the prompt that follow
    B with no D since its C        the shell's hooks are gone (PROMPT_COMMAND replaced...):
                                   the record stays open, with no exit code, ever
    the session ends               it ended with the session (the session's exit code)

Nothing is inferred from output or timing: without a trustworthy mark a record keeps
saying that its end is unknown.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Final, Literal

from ..output.buffer import OutputBuffer
from ..output.pages import clean_lines
from .marks import Mark, MarkParser

__all__ = ["CommandRecord", "RecordState", "ShellTracker", "Source"]

RecordState = Literal["running", "exited", "session_ended", "open"]
Source = Literal["run", "typed"]

_ECHO_BYTES: Final = 16_384  # how much of a typed command's echo is read back as its text
_PASTE_ON: Final = b"\x1b[?2004h"
_PASTE_OFF: Final = b"\x1b[?2004l"
_PASTE_SCAN_BYTES: Final = 65_536
# Written after a prompt cleaned alone, to find where it left the cursor: a character
# no shell prints (private use, plane 16).
_CURSOR: Final = "\U0010fffd".encode()
# Keys that make the line editor leave its prompt (the line is read, or dropped): Enter in
# either form, and Ctrl-C (the terminal turns it into SIGINT). Both shells then print D
# and draw a new prompt.
_LEAVING_KEYS: Final = (b"\r", b"\n", b"\x03")


class CommandRecord:
    """One command of a shell session. Offsets are absolute byte offsets of the output."""

    __slots__ = (
        "by",
        "command",
        "cwd",
        "ended_clock",
        "exit_code",
        "number",
        "output_end",
        "output_start",
        "source",
        "started_at",
        "started_clock",
        "state",
    )

    def __init__(
        self, number: int, command: str, source: Source, started_at: float, clock: float
    ) -> None:
        self.number = number
        self.command = command
        self.source: Source = source
        self.state: RecordState = "running"
        self.exit_code: int | None = None
        self.cwd: str | None = None
        self.started_at = started_at  # wall clock, for people
        self.started_clock = clock  # monotonic, for durations
        self.ended_clock: float | None = None
        self.output_start: int | None = None  # just past C; None until the shell ran it
        self.output_end: int | None = None  # where its output ended; None while running
        self.by = ""  # the name of the token that sent or typed it (for the audit log)

    @property
    def ended(self) -> bool:
        """Its end is known: an exit status, or the session's end."""
        return self.state in ("exited", "session_ended")


class ShellTracker:
    """Records and prompt state of one shell session, driven by its marks."""

    __slots__ = (
        "_clock",
        "_current",
        "_last_a_start",
        "_last_b_end",
        "_last_d_end",
        "_leaving",
        "_max_escape_length",
        "_max_line_length",
        "_next_number",
        "_output",
        "_parser",
        "_paste",
        "_records",
        "_reports_ends",
        "_wall",
        "at_prompt",
        "cwd",
        "name",
        "on_end",
        "prompts",
        "typed_by",
    )

    def __init__(
        self,
        name: str,
        nonce: str,
        output: OutputBuffer,
        *,
        history: int,
        max_line_length: int,
        max_escape_length: int,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.at_prompt = False
        self.prompts = 0  # prompts shown so far: a wait for "back at the prompt" counts them
        self.cwd: str | None = None  # as of the last D mark
        self._parser = MarkParser(nonce, self._stored)
        self._output = output
        self._records: collections.deque[CommandRecord] = collections.deque(maxlen=history)
        self._next_number = 1
        self._current: CommandRecord | None = None
        self._last_a_start = -1
        self._last_b_end = 0
        self._last_d_end = 0
        self._paste: bool | None = None  # as the last D said (zsh), else seen in the output
        # The line editor was made to leave its prompt (`leave_prompt`); its D is to come.
        self._leaving = False
        # D marks arrive (since the first prompt, and no command went "open" since the last).
        self._reports_ends = False
        self._max_line_length = max_line_length
        self._max_escape_length = max_escape_length
        self._clock = clock
        self._wall = wall
        # Told of each command as it ends (the audit log); it must not raise or wait.
        self.on_end: Callable[[CommandRecord], None] | None = None
        # The name of the token whose write last reached the shell: a typed command's `by`.
        self.typed_by = ""

    # ------------------------------------------------------------------ the reader's side

    def feed(self, data: bytes, offset: int) -> bool:
        """A chunk of output starting at absolute `offset` (already in the buffer); whether
        a prompt was shown or a typed command started in it (what waits for the shell's
        state need: `Session.wait_until`)."""
        prompts, current = self.prompts, self._current
        marks = self._parser.feed(data, offset)
        for mark in marks:
            if mark.kind == "A":
                self._last_a_start = mark.start
            elif mark.kind == "B":
                self._prompt_shown(mark)
            elif mark.kind == "C":
                self._command_started(mark)
            else:
                self._command_ended(mark)
        return self.prompts != prompts or self._current not in (None, current)

    def _stored(self, start: int, end: int) -> bytes:
        """Output bytes [start, end) as far as the ring still holds them."""
        output = self._output
        start = max(start, output.start_offset)
        return output.bytes_since(start, end - start)[0] if start < end else b""

    def _prompt_shown(self, mark: Mark) -> None:
        current = self._current
        self._last_b_end = mark.end
        if current is None and self._leaving:
            # Drawn before the shell got the keys or the signal that make its line editor
            # leave this prompt: not one to type at (see `leave_prompt`).
            return
        if current is not None:
            if current.output_start is None:
                # Submitted but not started: the shell redraws its prompt while the
                # command is being entered (bash does after a bracketed paste).
                return
            # The prompt is back with no D since the command started: the shell no longer
            # reports ends. Its output stops where the prompt starts; its status is unknown.
            prompt = self._last_a_start
            current.output_end = prompt if prompt >= current.output_start else mark.start
            self._close(current, "open")
            self._reports_ends = False
        self.at_prompt = True
        self.prompts += 1

    def _command_started(self, mark: Mark) -> None:
        current = self._current
        if current is not None and current.output_start is not None:
            # bash prints C for each command of a multi-line command line; the line ends
            # once, with one D.
            return
        if current is None:
            command = mark.command if mark.command is not None else self._echo(mark.start)
            current = self._new_record(command, "typed")
            current.by = self.typed_by
        current.output_start = mark.end
        self.at_prompt = False

    def _command_ended(self, mark: Mark) -> None:
        self._leaving = False  # the prompt that follows is a fresh one
        self._reports_ends = True
        self.cwd = mark.cwd
        self._paste = mark.paste
        self._last_d_end = mark.end
        self.at_prompt = False  # the prompt comes next
        current = self._current
        if current is None:
            return  # nothing ran: an empty line, a comment, the first prompt, ^C at a prompt
        if current.output_start is None:
            # Read but never run (a syntax error): what it printed follows its echo.
            current.output_start = self._after_echo(current.command, mark.start)
        current.exit_code = mark.status
        current.cwd = mark.cwd
        current.output_end = mark.start
        self._close(current, "exited")

    def _close(self, record: CommandRecord, state: RecordState) -> None:
        record.state = state
        record.ended_clock = self._clock()
        if self._current is record:
            self._current = None
        if self.on_end is not None:
            self.on_end(record)

    # ------------------------------------------------------------------ run's side

    @property
    def running(self) -> CommandRecord | None:
        """The command the shell is running (or was given and has not started yet)."""
        return self._current

    def submit(self, command: str, *, by: str = "") -> CommandRecord:
        """Record a command about to be written to the shell (by token `by`); nothing may be
        running."""
        if self._current is not None:
            raise RuntimeError("a command is already running")
        record = self._new_record(command, "run")
        record.by = by
        self.at_prompt = False
        return record

    def keys_typed(self, data: bytes) -> None:
        """Keys that `run` did not send reached the shell (a person through attach, an
        agent's `write`): with no command running, Enter or Ctrl-C makes the line editor
        leave its prompt."""
        if any(key in data for key in _LEAVING_KEYS):
            self.leave_prompt()

    def leave_prompt(self) -> None:
        """The line editor is made to leave its prompt (Ctrl-C, SIGINT to the shell, Enter)
        while no command runs: the shell reports D and draws a new prompt, and until it has
        done both the prompt is not up. Keys typed meanwhile would reach the editor while it
        cleans up (bash's readline puts the terminal back in cooked mode for a moment, so
        the kernel echoes them), and the coming D would be taken for their command's end.

        A prompt drawn before the shell got the keys or the signal may still be on its way:
        until the D, no prompt counts. A shell whose hooks are gone (no D since the last
        command began) reports no D: its next prompt counts, as before."""
        if self._current is not None:
            return
        self.at_prompt = False
        self._leaving = self._reports_ends

    def withdraw(self, record: CommandRecord) -> None:
        """Forget a submitted command that never reached the shell."""
        if self._current is record and record.output_start is None:
            self._current = None
            if self._records and self._records[-1] is record:
                self._records.pop()
                self._next_number -= 1
            self.at_prompt = True

    def session_ended(self, exit_code: int | None) -> None:
        """The session is over: a command still running ended with it."""
        current = self._current
        if current is not None:
            current.exit_code = exit_code
            current.output_end = self._output.end_offset
            self._close(current, "session_ended")
        self.at_prompt = False

    def _new_record(self, command: str, source: Source) -> CommandRecord:
        record = CommandRecord(self._next_number, command, source, self._wall(), self._clock())
        self._next_number += 1
        self._records.append(record)
        self._current = record
        return record

    # ------------------------------------------------------------------ queries

    def record(self, number: int) -> CommandRecord | None:
        records = self._records
        if not records:
            return None
        index = number - records[0].number
        return records[index] if 0 <= index < len(records) else None

    def records(self, limit: int) -> list[CommandRecord]:
        """The last `limit` records, oldest first."""
        records = self._records
        return list(records)[-limit:] if limit < len(records) else list(records)

    def duration_ms(self, record: CommandRecord) -> int:
        end = record.ended_clock if record.ended_clock is not None else self._clock()
        return max(0, round((end - record.started_clock) * 1000))

    def paste_enabled(self) -> bool:
        """Whether the shell's line editor takes bracketed paste at the current prompt:
        as zsh says in D, or as bash shows it (it turns paste on before drawing each
        prompt, and off when a line is read)."""
        if self._paste is not None:
            return self._paste
        output = self._output
        start = max(self._last_d_end, output.end_offset - _PASTE_SCAN_BYTES)
        data, _, _ = output.bytes_since(start)
        return data.rfind(_PASTE_ON) > data.rfind(_PASTE_OFF)

    # ------------------------------------------------------------------ reading back

    def _echo(self, end: int) -> str:
        """A typed command's text as the shell echoed it after its prompt (bash's hooks
        cannot report the line without a fork; zsh's report it in C).

        The echo is cleaned with its prompt, from the start of the line the prompt ends
        on: a typed line wider than the window wraps at the margin counted from there
        (bash's readline marks it with " \\r", a return to the start of the wrapped row).
        Where the prompt left the cursor is found by cleaning the prompt alone with a
        character of our own written after it; the echo is what the line shows from there.
        """
        prompt_end = self._last_b_end
        low = max(end - _ECHO_BYTES, self._output.start_offset)
        if prompt_end < low:  # the echo alone fills the window: read what is left of it
            return self._clean_echo(low, end)
        data, _, _ = self._output.bytes_since(low, max(0, end - low))
        line_start = low + data.rfind(b"\n", 0, prompt_end - low) + 1
        marked = self._clean(line_start, data[line_start - low : prompt_end - low] + _CURSOR)
        at = marked[-1].rfind(_CURSOR.decode()) if marked else -1
        lines = self._clean(line_start, data[line_start - low :])
        if at < 0 or not lines or lines[0][:at] != marked[-1][:at]:
            return self._clean_echo(prompt_end, end)  # the prompt was not left as drawn
        lines[0] = lines[0][at:]
        return "\n".join(lines).strip("\n")

    def _clean_echo(self, start: int, end: int) -> str:
        """The echo cleaned on its own from `start` (a line start for all it knows)."""
        data, _, _ = self._output.bytes_since(start, max(0, end - start))
        return "\n".join(self._clean(start, data)).strip("\n")

    def _clean(self, start: int, data: bytes) -> list[str]:
        """Clean lines of output `data` that starts at offset `start`."""
        return clean_lines(
            data,
            max_line_length=self._max_line_length,
            max_escape_length=self._max_escape_length,
            start=start,
            sizes=self._output.sizes_within(start, start + len(data)),
        )

    def _after_echo(self, command: str, end: int) -> int:
        """Where output starts after a command's echo: past as many line ends after the
        last prompt as the command has lines (the shell echoes each of them)."""
        start = self._last_b_end
        wanted = command.count("\n") + 1
        data, _, _ = self._output.bytes_since(start, max(0, end - start))
        position = -1
        for _ in range(wanted):
            position = data.find(b"\n", position + 1)
            if position < 0:
                return end
        return start + position + 1
