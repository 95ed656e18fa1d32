"""RE2 patterns over clean lines: linear time whatever the pattern, so no ReDoS.

A pattern matches a line when the line's clean text contains a match (search, not
fullmatch). Searching a whole buffer one line at a time would pay the binding's per-call
cost (and a str -> UTF-8 encode) tens of thousands of times, so lines are searched in
batches: a blob of UTF-8 lines joined by "\\n" is scanned with a multi-line variant of the
pattern that can never match a newline (RE2's never_nl). A match of that variant lies inside
one line, and there it means exactly what the pattern means on the line alone: `^`/`$` match
at the line's ends, and `\\b` sees a newline as it sees the edge of the text. So the batch
scan reports exactly the lines a line-by-line search would. A hit that spans a newline
(which never_nl rules out) would be confirmed on its line alone with the pattern as given;
patterns where the argument fails (`\\A`, `\\z`, `\\C`, turning multi-line off) are searched
line by line.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import attrs
import re2

from .. import errors

_MAX_MEM = 2 << 20

# Constructs whose meaning in a blob of lines differs from their meaning on one line.
_UNSAFE_IN_BATCH = re.compile(r"\\[ACz]|\(\?[A-Za-z]*-[A-Za-z]*m")


class Match(Protocol):
    """What we use of a match of the re2 binding (which ships no type information)."""

    def span(self) -> tuple[int, int]: ...


class Regexp(Protocol):
    """What we use of a compiled re2 pattern."""

    def search(self, text: str | bytes, pos: int = ..., endpos: int = ...) -> Match | None: ...


def _compile(pattern: str, options: Any) -> Regexp:
    """Compile, then empty `re2.compile`'s module-level cache (`re2.purge`).

    That cache keeps the last 128 patterns alive, each with a DFA cache that can grow to
    max_mem (8 MiB): user-supplied patterns would pin up to a GiB. A pattern compiled here
    is freed with the read or wait that made it. Only trio-pty compiles re2 patterns in its
    process, so emptying the whole cache costs nobody anything.
    """
    try:
        compiled: Regexp = re2.compile(pattern, options)
    finally:
        re2.purge()
    return compiled


def _options(*, ignore_case: bool, never_nl: bool) -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every rejected pattern to stderr
    options.case_sensitive = not ignore_case
    options.never_nl = never_nl
    # A search reports lines, never groups: without captures RE2 finds a match's span with
    # its DFAs alone instead of running its NFA over the match for the groups' spans (per
    # match on 1 KB lines: ~10 µs instead of ~20 for `(a+)+!`). Matches are the same.
    options.never_capture = True
    # A small DFA budget: ordinary patterns need few states, while a DFA-hostile one
    # (`a[ab]{20}c` over a/b text) spends its whole budget building states on every call
    # before RE2 falls back to the NFA. Measured per 64 KiB slice: ~17 ms at 2 MiB, ~45 ms
    # at the default 8 MiB; ordinary patterns run the same.
    options.max_mem = _MAX_MEM
    return options


@attrs.frozen(eq=False)
class CompiledPattern:
    """A validated RE2 pattern, ready for line and batch searches."""

    pattern: str
    ignore_case: bool
    line: Regexp = attrs.field(repr=False)
    """The pattern as given, applied to one line (str or UTF-8 bytes)."""
    batch: Regexp | None = attrs.field(repr=False)
    """The multi-line, never-newline variant for blobs of lines, or None."""

    def search(self, text: str | bytes) -> Match | None:
        """The first match in one line of text, or None."""
        return self.line.search(text)


def compile_pattern(pattern: str, *, ignore_case: bool, max_length: int) -> CompiledPattern:
    """Validate and compile `pattern`; InvalidInput("pattern", ...) carries RE2's reason."""
    if not pattern:
        raise errors.InvalidInput("pattern", "must not be empty")
    if len(pattern) > max_length:
        raise errors.InvalidInput(
            "pattern", f"is {len(pattern)} characters long, the limit is {max_length}"
        )
    try:
        line = _compile(pattern, _options(ignore_case=ignore_case, never_nl=False))
    except re2.error as exc:
        raise errors.InvalidInput("pattern", _message(exc)) from None
    batch = None
    if _UNSAFE_IN_BATCH.search(pattern) is None:
        try:
            batch = _compile("(?m)" + pattern, _options(ignore_case=ignore_case, never_nl=True))
        except re2.error:
            batch = None
    return CompiledPattern(pattern=pattern, ignore_case=ignore_case, line=line, batch=batch)


def _message(exc: BaseException) -> str:
    """RE2's own words (the binding hands them over as bytes)."""
    reason = exc.args[0] if exc.args else str(exc)
    if isinstance(reason, bytes):
        return reason.decode("utf-8", "replace")
    return str(reason)


def first_matching_line(pattern: CompiledPattern, blob: bytes, pos: int = 0) -> tuple[int, int]:
    """(start, end) byte span of the first line of `blob` at or after `pos` that matches.

    `blob` holds UTF-8 lines, each terminated by "\\n"; `pos` is the start of a line.
    Returns (-1, -1) when no line matches. Cost is linear in the bytes scanned.
    """
    size = len(blob)
    line = pattern.line
    batch = pattern.batch
    if batch is None:
        while pos < size:
            end = blob.find(b"\n", pos)
            if end < 0:
                end = size
            if line.search(blob[pos:end]) is not None:
                return pos, end
            pos = end + 1
        return -1, -1
    while pos < size:
        match = batch.search(blob, pos)
        if match is None:
            return -1, -1
        hit, stop = match.span()
        if hit >= size:
            return -1, -1
        start = blob.rfind(b"\n", 0, hit) + 1
        end = blob.find(b"\n", hit)
        if end < 0:
            end = size
        # A hit inside one line is a hit on that line alone (see the module docstring);
        # anything else is confirmed with the pattern as given.
        if stop <= end or line.search(blob[start:end]) is not None:
            return start, end
        pos = end + 1
    return -1, -1
