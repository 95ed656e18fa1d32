"""The read plan (output/pages.py), pure: a read's arguments checked once and its mode chosen,
without trio or a session; and `clean_lines`, a piece of output as clean lines."""

from __future__ import annotations

import ast
import pathlib
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trio_pty
from trio_pty import errors
from trio_pty.limits import Limits
from trio_pty.model import Wait
from trio_pty.output import pages
from trio_pty.output.buffer import OutputBuffer
from trio_pty.output.pages import ReadPlan, check_wait, clean_lines, plan_read

LIMITS = Limits()


def plan(shell: bool = False, **given_: Any) -> ReadPlan:
    arguments: dict[str, Any] = {
        "owner": "o",
        "offset": 0,
        "limit": None,
        "pattern": None,
        "ignore_case": False,
        "wait": None,
        "command": None,
        "tail": None,
        "since": None,
        "reader": None,
    }
    arguments.update(given_)
    return plan_read(shell=shell, limits=LIMITS, **arguments)


def refused(field: str, shell: bool = False, **given_: Any) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        plan(shell, **given_)
    assert caught.value.field == field


def test_a_plain_read_pages_from_its_offset_with_the_default_limit() -> None:
    read = plan(offset=7)
    assert (read.mode, read.offset, read.limit) == ("offset", 7, LIMITS.default_read_limit)
    assert read.reader == "o"  # the owner's cursor unless a reader is named
    assert not read.since and read.wait is None and read.wait_pattern is None


def test_each_mode_is_chosen_by_its_argument() -> None:
    assert plan(tail=5).mode == "tail"
    assert plan(pattern="err").mode == "pattern"
    assert plan(since="last", pattern="err").mode == "pattern"
    assert plan(since="last").mode == "offset"
    assert plan(since="last").since
    assert plan(command=3).mode == "command"
    # A command's lines, filtered by the pattern: still the command's page.
    commanded = plan(command=3, pattern="x", offset=2)
    assert (commanded.mode, commanded.command, commanded.offset) == ("command", 3, 2)
    assert commanded.pattern is not None


def test_a_named_reader_keys_the_cursor() -> None:
    assert plan(reader="conn-1").reader == "conn-1"
    refused("reader", reader="")


def test_where_a_read_starts_is_given_once() -> None:
    refused("tail", offset=3, tail=2)
    refused("since", offset=3, since="last")
    refused("since", tail=2, since="last")
    refused("tail", tail=2, pattern="x")
    refused("command", command=1, tail=2)
    refused("command", command=1, since="last")


def test_wrong_values_name_their_field() -> None:
    refused("offset", offset=-1)
    refused("limit", limit=0)
    refused("limit", limit=LIMITS.max_read_limit + 1)
    refused("tail", tail=0)
    refused("since", since="first")
    refused("command", command=0)
    refused("pattern", pattern="(")
    refused("wait", wait=Wait())
    refused("wait.idle_ms", wait=Wait(idle_ms=0))
    refused("wait.timeout_ms", wait=Wait(exit=True, timeout_ms=LIMITS.max_wait_ms + 1))


def test_only_a_shell_session_waits_for_its_prompt() -> None:
    refused("wait.prompt", wait=Wait(prompt=True))
    read = plan(True, wait=Wait(prompt=True))
    assert read.wait == Wait(prompt=True)


def test_check_wait_compiles_the_pattern() -> None:
    assert check_wait(None, LIMITS, shell=False) is None
    assert check_wait(Wait(exit=True), LIMITS, shell=False) is None
    compiled = check_wait(Wait(pattern="READY", ignore_case=True), LIMITS, shell=False)
    assert compiled is not None and compiled.search("ready now") is not None
    with pytest.raises(errors.InvalidInput):
        check_wait("soon", LIMITS, shell=False)  # type: ignore[arg-type]


offsets = st.integers(-2, 4)
tails = st.none() | st.integers(-1, LIMITS.max_read_limit + 1)
sinces: st.SearchStrategy[Literal["last"] | None] = st.sampled_from([None, "last"])
patterns = st.none() | st.sampled_from(["x", "err|warn", "("])
commands = st.none() | st.integers(-1, 3)


@given(offsets, tails, sinces, patterns, commands, st.booleans())
def test_a_plan_is_consistent_or_refused(
    offset: int,
    tail: int | None,
    since: Literal["last"] | None,
    pattern: str | None,
    command: int | None,
    shell: bool,
) -> None:
    """Whatever the arguments: an InvalidInput, or a plan with one way to start, and a mode
    that follows from what was given (command, then tail, then pattern, then offset)."""
    try:
        read = plan(
            shell,
            offset=offset,
            tail=tail,
            since=since,
            pattern=pattern,
            command=command,
        )
    except errors.InvalidInput:
        return
    assert read.offset == offset >= 0
    assert 1 <= read.limit <= LIMITS.max_read_limit
    starts = [read.offset > 0, read.tail is not None, read.since]
    assert sum(starts) <= 1
    if read.tail is not None:
        assert read.pattern is None and 1 <= read.tail <= LIMITS.max_read_limit
    if read.command is not None:
        assert read.command >= 1 and read.tail is None and not read.since
    expected = (
        "command"
        if command is not None
        else "tail"
        if tail is not None
        else "pattern"
        if pattern is not None
        else "offset"
    )
    assert read.mode == expected
    assert (read.pattern is None) == (pattern is None)


def test_clean_lines_of_a_piece_of_output() -> None:
    text = b"\x1b[31mred\x1b[0m\r\nsecond\n"
    assert clean_lines(text, max_line_length=100, max_escape_length=64) == ["red", "second"]
    assert clean_lines(b"", max_line_length=100, max_escape_length=64) == []
    assert clean_lines(b"abcdef", max_line_length=3, max_escape_length=64)[0].startswith("abc")


ABOVE_SESSIONS = {"session", "manager", "spawning", "commands", "terminal"}


@pytest.mark.parametrize("package", ["shell", "output", "posix"])
def test_the_pure_packages_never_import_what_drives_a_session(package: str) -> None:
    """Arrows point down: `shell/`, `output/` and `posix/` sit below session.py."""
    root = pathlib.Path(trio_pty.__file__).parent
    for path in sorted((root / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[-1]} | {a.name for a in node.names}
                if node.level == 2 or (node.module or "").startswith("trio_pty"):
                    assert not names & ABOVE_SESSIONS, f"{path.name} imports {names}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[-1] not in ABOVE_SESSIONS or not (
                        alias.name.startswith("trio_pty")
                    ), f"{path.name} imports {alias.name}"


def test_output_on_a_row_the_command_wrapped_onto_is_the_commands_output() -> None:
    """bash echoing a command that ends exactly at the margin: it wraps with " \\r", moves
    up (ESC [ A) to redraw, and its accept line feed lands on the wrapped row, where the
    output then prints. The log shows that row in the command's line (the line feed moved
    within one line), so the output's own line number is hidden; its page is still the
    output, cleaned from its own bytes, not the next prompt (as `run("pwd")` answered in
    a directory whose prompt filled 76 columns)."""
    path = b"/tmp/" + b"d" * 61  # a prompt of 76 columns: 8 + 66 + 2
    prompt = b"root@vm:" + path + b"# "
    assert len(prompt) == 76
    mark = b"\x1b]133;%s;tp=00\x07"
    raw = (
        mark % b"A"
        + prompt
        + mark % b"B"
        + b"\x1b[7mpwd\x1b[27m \r\x1b[A"
        + b"\x1b[C" * 76
        + b"pwd \r\x1b[A"
        + b"\x1b[C" * 78
        + b"\x1b[Kd\r\n\x1b[?2004l\r"
        + mark % b"C"
    )
    output_start = len(raw)
    raw += path + b"\r\n"
    output_end = len(raw)
    raw += b"\x1b]133;D;0;tp=00\x07" + mark % b"A" + prompt + mark % b"B"
    buffer = OutputBuffer(100_000, max_line_length=2000, max_escape_length=4096)
    buffer.note_size(24, 80)
    buffer.append(raw)
    where = pages.span(
        buffer, output_start, output_end, max_line_length=2000, max_escape_length=4096
    )
    page = pages.page(buffer, where, where.first, 10)
    assert [line.text for line in page.lines] == [path.decode()]
