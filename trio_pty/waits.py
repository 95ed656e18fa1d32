"""Waiting on a session's output: for a pattern, quiet, a prompt, a screen, or the end; and the
paced search. Functions over a session (`Session` binds them as its methods), reading only
its output, its shell's marks, its limits and its lifecycle's wake-ups.

No polling: a waiter parks on the lifecycle's lot and the reader wakes it once per pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final, Literal, Protocol

import attrs
import trio

from .lifecycle import Lifecycle
from .limits import Limits
from .model import ReadPage, Screen, Wait, WaitReason
from .output.buffer import OutputBuffer
from .output.echo import after_echo
from .output.search import CompiledPattern
from .shell.history import ShellTracker

_SCREEN_RECHECK: Final = 0.005  # a screen wait looks again at most this often under a flood


class Watched(Protocol):
    """What a wait reads of a session."""

    @property
    def output(self) -> OutputBuffer: ...
    @property
    def shell(self) -> ShellTracker | None: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def lifecycle(self) -> Lifecycle: ...


Look = Literal["matched", "scanning", "waiting"]


class _Lines:
    """Where a wait looks for its pattern: on the lines a write's echo lands on, only in
    the text after the echo; on the first line, only after `prefix` (what it held before the
    write); then every line from there on, a slice at a time."""

    __slots__ = ("_echo", "_echoed", "_line", "_pattern", "_prefix", "_start")

    def __init__(
        self, pattern: CompiledPattern, start: int, prefix: str | None, echo: Sequence[str]
    ) -> None:
        self._pattern, self._start, self._prefix, self._echo = pattern, start, prefix, echo
        self._line = start  # where the search goes on
        self._echoed = 0  # echo lines done with

    def look(self, output: OutputBuffer, slice_bytes: int) -> Look:
        """One look: a match, more complete lines to scan (a slice done), or nothing to do
        until more output comes."""
        pattern, start, echo = self._pattern, self._start, self._echo
        if self._echoed < len(echo):
            matched, self._echoed = self._match_echo(output)
            if matched:
                return "matched"
            self._line = max(self._line, start + self._echoed)
            if self._echoed < len(echo):
                return "waiting"
        elif self._prefix is not None and not echo:
            if self._matches_after_prefix(output, self._prefix):
                return "matched"
            self._line = max(self._line, start + 1)
        found, self._line = output.search_from(pattern, self._line, max_scan_bytes=slice_bytes)
        if found is not None:
            return "matched"
        return "scanning" if self._line < output.complete_lines else "waiting"

    def _match_echo(self, output: OutputBuffer) -> tuple[bool, int]:
        """Check the lines the echo lands on (`output.echo`), from those done with on:
        (matched, how many are done with). A line still receiving its echo waits; a
        complete one is checked once."""
        echo, done, prefix = self._echo, self._echoed, self._prefix or ""
        complete = output.complete_lines
        while done < len(echo):
            number = self._start + done
            lines = output.read(number, 1).lines
            finished = number < complete
            if not lines or lines[0].number != number:  # hidden, gone, or not there yet
                if not finished:
                    return False, done
                done += 1
                continue
            rest = after_echo(lines[0].text, prefix if done == 0 else "", echo[done])
            if rest is not None and self._pattern.search(rest) is not None:
                return True, done
            if not finished:
                return False, done
            done += 1
        return False, done

    def _matches_after_prefix(self, output: OutputBuffer, prefix: str) -> bool:
        lines = output.read(self._start, 1).lines
        if not lines or lines[0].number != self._start:
            return False
        text = lines[0].text
        rest = text[len(prefix) :] if text.startswith(prefix) else text
        return self._pattern.search(rest) is not None


def _prompts(session: Watched) -> int:
    return session.shell.prompts if session.shell is not None else 0


async def wait(
    session: Watched,
    spec: Wait,
    *,
    pattern: CompiledPattern | None,
    start_line: int,
    has_output: Callable[[], bool],
    first_line_prefix: str | None = None,
    prompts_seen: int | None = None,
    echo: Sequence[str] = (),
) -> WaitReason:
    """Block until `pattern` matches a line at or after `start_line`, the output has been
    quiet for idle_ms (once `has_output()`), the shell has shown more than `prompts_seen`
    prompts, the output is complete, or the timeout.

    Waiters park on the session's lot and wake on new output: no polling. With
    `first_line_prefix`, the first line only matches in the text after that prefix
    (what it held before a write), so send-and-wait never matches a stale prompt. With
    `echo` (what each line of a write echoes as, see `output.echo`), the lines from
    `start_line` on match only in the text after their echo, so a wait never matches
    the command it was sent with.
    """
    limits, lifecycle = session.limits, session.lifecycle
    timeout_ms = spec.timeout_ms if spec.timeout_ms is not None else limits.default_wait_ms
    idle = spec.idle_ms / 1000 if spec.idle_ms is not None else None
    lines = None if pattern is None else _Lines(pattern, start_line, first_line_prefix, echo)
    with trio.move_on_after(timeout_ms / 1000):
        while True:
            if prompts_seen is not None and _prompts(session) > prompts_seen:
                return "prompt"
            if lines is not None:
                look = lines.look(session.output, limits.search_slice_bytes)
                if look == "matched":
                    return "matched"
                if look == "scanning":
                    await trio.lowlevel.checkpoint()  # a slice done: let others run
                    continue
            if lifecycle.complete:
                return "exited"
            wake_at = math.inf
            if idle is not None and has_output():
                wake_at = lifecycle.last_output_at + idle
                if trio.current_time() >= wake_at:
                    return "idle"
            with trio.move_on_at(wake_at):
                await lifecycle.next_output()
    return "timeout"


async def wait_until(session: Watched, condition: Callable[[], bool]) -> bool:
    """Until `condition()` about the shell's prompt and command (`at_prompt`, `running`,
    `prompts`) holds, or no more output can come (then False). Unbounded: the caller bounds
    it. Always a checkpoint.

    Checked when a prompt was shown or a typed command started (`ShellTracker.feed`), not at
    every chunk: a command's echo, its C and D marks and its output would each wake the
    caller (a scheduler round each, ~15 µs) only to find its condition false."""
    lifecycle = session.lifecycle
    if condition() or lifecycle.complete:
        await trio.lowlevel.checkpoint()
        return condition()
    while True:
        await lifecycle.next_prompt()
        if condition():
            return True
        if lifecycle.complete:
            return False


async def search(session: Watched, offset: int, limit: int, pattern: CompiledPattern) -> ReadPage:
    """Up to `limit` lines matching `pattern` at or after line `offset`.

    The scan goes in slices of search_slice_bytes with a checkpoint between them, so a slow
    (DFA-hostile) pattern never holds up the reader or other clients, and stops after
    max_search_ms with what it found (`has_more`, `next_offset` say where to go on).
    """
    limits, output = session.limits, session.output
    slice_bytes = limits.search_slice_bytes
    deadline = trio.current_time() + limits.max_search_ms / 1000
    page = output.read(offset, limit, pattern, max_scan_bytes=slice_bytes)
    lines, missed = list(page.lines), page.missed_lines
    while True:
        # After every slice, the last one too: a caller reading page after page (the
        # budget ends each read after a slice or two) would otherwise never let another
        # task run between them.
        await trio.lowlevel.checkpoint()
        if not (page.has_more and len(lines) < limit and trio.current_time() < deadline):
            break
        page = output.read(
            page.next_offset, limit - len(lines), pattern, max_scan_bytes=slice_bytes
        )
        lines += page.lines
        missed += page.missed_lines
    return attrs.evolve(page, lines=lines, missed_lines=missed)


async def wait_screen(
    session: Watched,
    spec: Wait,
    *,
    pattern: CompiledPattern | None,
    snapshot: Callable[[], Screen],
) -> Screen:
    """Take snapshots until a screen line matches `pattern`, the output has been quiet for
    idle_ms, the output is complete, or the timeout; the last one says why.

    It looks again when output arrives, at most every _SCREEN_RECHECK seconds: under a
    flood a snapshot per reader wake-up would cost more than the flood."""
    limits, output, lifecycle = session.limits, session.output, session.lifecycle
    timeout_ms = spec.timeout_ms if spec.timeout_ms is not None else limits.default_wait_ms
    idle = spec.idle_ms / 1000 if spec.idle_ms is not None else None
    with trio.move_on_after(timeout_ms / 1000):
        while True:
            screen = snapshot()
            checked_at = trio.current_time()
            if pattern is not None and any(pattern.search(line) for line in screen.lines):
                return attrs.evolve(screen, reason="matched")
            if lifecycle.complete:
                return attrs.evolve(screen, reason="exited")
            wake_at = math.inf
            if idle is not None and output.end_offset:
                wake_at = lifecycle.last_output_at + idle
                if checked_at >= wake_at:
                    return attrs.evolve(screen, reason="idle")
            with trio.move_on_at(wake_at):
                while output.end_offset == screen.offset and not lifecycle.complete:
                    await lifecycle.next_output()
                await trio.sleep_until(checked_at + _SCREEN_RECHECK)
    return attrs.evolve(snapshot(), reason="timeout")
