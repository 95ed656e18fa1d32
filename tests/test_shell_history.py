"""Command records from marks (pure): what each mark sequence does to the history, and a
command's output as lines. The byte sequences are the ones bash and zsh print."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from trio_pty.model import Line
from trio_pty.output import pages
from trio_pty.output.buffer import OutputBuffer
from trio_pty.shell.history import ShellTracker

NONCE = "00112233aabbccdd"
KEY = f"tp={NONCE}"
A = f"\x1b]133;A;{KEY}\x07"
B = f"\x1b]133;B;{KEY}\x07"
C = f"\x1b]133;C;{KEY}\x07"
PASTE_ON = "\x1b[?2004h"
PASTE_OFF = "\x1b[?2004l"


def D(status: int, cwd: str = "/tmp") -> str:
    return f"\x1b]133;D;{status};{KEY};cwd={cwd}\x07\x1b]7;file://host{cwd}\x07"


def prompt(status: int = 0) -> str:
    """What bash prints between two commands."""
    return D(status) + PASTE_ON + A + "user@host:/tmp$ " + B


class Shell:
    """An OutputBuffer and its tracker, fed like the session's reader feeds them."""

    def __init__(self, *, clock: list[float] | None = None) -> None:
        self.output = OutputBuffer(1 << 16, max_line_length=200, max_escape_length=4096)
        self.time = clock if clock is not None else [0.0]
        self.marks = ShellTracker(
            "bash",
            NONCE,
            self.output,
            history=5,
            max_line_length=200,
            max_escape_length=4096,
            clock=lambda: self.time[0],
            wall=lambda: 1000 + self.time[0],
        )

    def print(self, text: str) -> None:
        data = text.encode()
        self.marks.feed(data, self.output.append(data))

    def lines(self, number: int) -> list[str]:
        record = self.marks.record(number)
        assert record is not None
        where = pages.span(
            self.output,
            record.output_start,
            record.output_end,
            max_line_length=200,
            max_escape_length=4096,
        )
        return [line.text for line in pages.page(self.output, where, 0, 100).lines]


def started() -> Shell:
    shell = Shell()
    shell.print(prompt())
    assert shell.marks.at_prompt and shell.marks.prompts == 1
    return shell


def test_a_run_command_from_submit_to_its_end() -> None:
    shell = started()
    record = shell.marks.submit("echo hi")
    assert shell.marks.running is record and not shell.marks.at_prompt
    shell.time[0] = 1.0
    shell.print("echo hi\r\n" + PASTE_OFF + "\r" + C + "hi\r\n")
    assert record.state == "running" and record.output_start is not None
    shell.time[0] = 1.25
    shell.print(prompt(3))
    assert (record.state, record.exit_code, record.cwd) == ("exited", 3, "/tmp")
    assert shell.marks.running is None and shell.marks.at_prompt
    assert shell.marks.duration_ms(record) == 1250
    assert shell.lines(1) == ["hi"]


def test_a_typed_command_is_recorded_with_its_echo_as_text() -> None:
    shell = started()
    shell.print("ls\x08\x08echo  typed\r\n" + PASTE_OFF + "\r" + C + "typed\r\n" + prompt(0))
    (record,) = shell.marks.records(10)
    assert (record.source, record.command, record.state) == ("typed", "echo  typed", "exited")
    assert shell.lines(1) == ["typed"]


def readline_echo(column: int, typed: str, cols: int) -> str:
    """How bash's readline echoes `typed`, starting at `column` of a window `cols` wide:
    at each margin it prints " \\r" (the space makes the terminal wrap, the CR returns to
    the start of the new row, where the next key overwrites the space)."""
    out = []
    for char in typed:
        out.append(char)
        column += 1
        if column == cols:
            out.append(" \r")
            column = 0
    return "".join(out)


@given(
    typed=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=120),
    cols=st.integers(min_value=8, max_value=40),
    first_line=st.sampled_from(["", "(venv) host\r\n", "\x1b[1;32mgreen\x1b[0m\r\n"]),
    prompt_text=st.sampled_from(["$ ", "user@host:/tmp$ ", "\x1b[34m~\x1b[0m % ", "> "]),
)
def test_a_typed_command_wider_than_the_window_is_recorded_as_typed(
    typed: str, cols: int, first_line: str, prompt_text: str
) -> None:
    # The margin counts from the start of the line the prompt ends on, not from the prompt's
    # end; the window's width is the one in force there.
    shell = Shell()
    shell.output.note_size(24, cols)
    shell.print(D(0) + PASTE_ON + A + first_line + prompt_text + B)
    column = len(re.sub("\x1b\\[[0-9;]*m", "", prompt_text)) % cols
    shell.print(readline_echo(column, typed, cols) + "\r\n" + PASTE_OFF + "\r" + C)
    shell.print("out\r\n" + prompt(0))
    (record,) = shell.marks.records(10)
    assert record.command == typed
    assert shell.lines(1) == ["out"]


def test_zsh_reports_the_typed_line_itself() -> None:
    shell = started()
    shell.print("garbled\r\n" + f"\x1b]133;C;{KEY};cmd=for i%3B do%0A echo%3B done\x07" + prompt(0))
    (record,) = shell.marks.records(10)
    assert record.command == "for i; do\n echo; done"


def test_output_without_a_final_newline_is_cut_at_the_mark() -> None:
    shell = started()
    shell.marks.submit("printf abc")
    shell.print("printf abc\r\n" + PASTE_OFF + "\r" + C + "abc" + prompt(0))
    assert shell.lines(1) == ["abc"]
    shell.marks.submit("printf 'x\\ny'")
    shell.print("printf ...\r\n" + C + "x\r\ny" + prompt(0))
    assert shell.lines(2) == ["x", "y"]


def test_empty_lines_comments_and_the_first_prompt_make_no_record() -> None:
    shell = started()
    shell.print("\r\n" + prompt(0) + "# note\r\n" + prompt(0) + "^C\r\n" + prompt(130))
    assert shell.marks.records(10) == [] and shell.marks.prompts == 4


def test_leaving_the_prompt_waits_for_the_d_and_the_prompt_after_it() -> None:
    """Ctrl-C (a signal or the key) or Enter at the prompt: the prompt is not up again until
    the shell has reported D and drawn the next one; a prompt drawn before the shell got the
    key does not count, and the D ends no command."""
    shell = started()
    shell.marks.keys_typed(b"ls -l")  # a partial line: still at the prompt
    assert shell.marks.at_prompt
    shell.marks.keys_typed(b"\x03")
    assert not shell.marks.at_prompt
    shell.print(A + "$ " + B)  # a redraw already on its way
    assert not shell.marks.at_prompt and shell.marks.prompts == 1
    shell.print("^C" + PASTE_OFF + "\r\r\n" + D(130))
    assert not shell.marks.at_prompt
    shell.print(PASTE_ON + A + "$ " + B)
    assert shell.marks.at_prompt and shell.marks.prompts == 2
    assert shell.marks.records(10) == []
    shell.marks.keys_typed(b"\r")
    record = shell.marks.submit("echo hi")  # what a run that did not wait would do
    shell.print("\r\n" + prompt(0))
    assert record.state == "exited"  # the empty line's D: why run waits


def test_leaving_changes_nothing_while_a_command_runs_or_without_end_marks() -> None:
    shell = started()
    record = shell.marks.submit("sleep 9")
    shell.print("sleep 9\r\n" + C)
    shell.marks.leave_prompt()  # Ctrl-C for the command
    shell.print("^C\r\n" + prompt(130))
    assert (record.state, record.exit_code) == ("exited", 130) and shell.marks.at_prompt
    # PROMPT_COMMAND replaced: no D comes, the next prompt counts
    shell.marks.submit("PROMPT_COMMAND=true")
    shell.print("x\r\n" + C + A + "$ " + B)
    shell.marks.leave_prompt()
    assert not shell.marks.at_prompt
    shell.print("^C\r\n" + A + "$ " + B)
    assert shell.marks.at_prompt


def test_a_syntax_error_closes_the_command_without_a_c_mark() -> None:
    shell = started()
    record = shell.marks.submit("if then")
    shell.print("if then\r\n" + PASTE_OFF + "\rbash: syntax error near `then'\r\n" + prompt(2))
    assert (record.state, record.exit_code) == ("exited", 2)
    assert shell.lines(1) == ["bash: syntax error near `then'"]
    assert len(shell.marks.records(10)) == 1


def test_a_multi_line_command_echo_is_skipped_without_a_c_mark() -> None:
    shell = started()
    shell.marks.submit("echo a\necho )")
    shell.print("echo a\r\n\recho )\r\n" + "zsh: parse error\r\n" + prompt(1))
    assert shell.lines(1) == ["zsh: parse error"]


def test_the_prompt_redrawn_while_a_paste_is_entered_changes_nothing() -> None:
    shell = started()
    record = shell.marks.submit("for i in 1 2; do\n echo $i\ndone")
    # bash highlights the pasted lines, moves up and draws prompt and lines again
    shell.print("\x1b[7mfor i in 1 2; do\x1b[27m\r\n\r\x1b[7m echo $i\x1b[27m\r\n")
    shell.print("\r\x1b[7mdone\x1b[27m\x1b[A\x1b[A\r" + A + "$ " + B)
    assert shell.marks.running is record and not shell.marks.at_prompt
    shell.print("for i in 1 2; do\r\n\r echo $i\r\n\rdone\r\n" + PASTE_OFF + "\r" + C)
    shell.print("1\r\n2\r\n" + prompt(0))
    assert shell.lines(1) == ["1", "2"] and record.state == "exited"


def test_a_prompt_with_no_end_mark_leaves_the_command_open() -> None:
    """PROMPT_COMMAND replaced: C and the prompt still come, D never does."""
    shell = started()
    record = shell.marks.submit("PROMPT_COMMAND=true")
    shell.print("PROMPT_COMMAND=true\r\n" + C + "out\r\n" + A + "$ " + B)
    assert (record.state, record.exit_code) == ("open", None)
    assert shell.marks.at_prompt and shell.marks.running is None
    assert shell.lines(1) == ["out"]  # up to the prompt, not into it
    typed = shell.marks.submit("echo next")
    shell.print("echo next\r\n" + C + "next\r\n" + A + "$ " + B)
    assert typed.state == "open" and shell.lines(2) == ["next"]


def test_each_command_of_a_command_line_prints_c_and_the_line_ends_once() -> None:
    """bash prints PS0 (C) before each command of a multi-line command line."""
    shell = started()
    record = shell.marks.submit("echo a\necho b")
    shell.print("echo a\r\n\recho b\r\n" + C + "a\r\n" + C + "b\r\n" + prompt(4))
    assert (record.state, record.exit_code) == ("exited", 4)
    assert len(shell.marks.records(10)) == 1 and shell.lines(1) == ["a", "b"]


def test_the_session_ending_ends_the_running_command() -> None:
    shell = started()
    record = shell.marks.submit("exit 5")
    shell.print("exit 5\r\n" + C + "exit\r\n")
    shell.marks.session_ended(5)
    assert (record.state, record.exit_code) == ("session_ended", 5)
    assert record.output_end == shell.output.end_offset and shell.lines(1) == ["exit"]
    assert not shell.marks.at_prompt


def test_withdraw_forgets_a_command_that_never_reached_the_shell() -> None:
    shell = started()
    record = shell.marks.submit("echo")
    shell.marks.withdraw(record)
    assert shell.marks.records(10) == [] and shell.marks.at_prompt
    assert shell.marks.submit("echo 2").number == 1


def test_the_history_is_bounded_and_numbers_keep_counting() -> None:
    shell = started()
    for number in range(1, 9):
        shell.marks.submit(f"echo {number}")
        shell.print("x\r\n" + C + f"{number}\r\n" + prompt(0))
    records = shell.marks.records(100)
    assert [r.number for r in records] == [4, 5, 6, 7, 8]
    assert shell.marks.record(3) is None and shell.marks.record(9) is None
    assert shell.lines(8) == ["8"] and [r.number for r in shell.marks.records(2)] == [7, 8]


def test_bracketed_paste_state_follows_the_line_editor() -> None:
    shell = Shell()
    shell.print(D(0) + A + "$ " + B)
    assert not shell.marks.paste_enabled()
    shell.print(PASTE_ON)  # zsh turns it on after drawing the prompt
    assert shell.marks.paste_enabled()
    shell.print("ls\r\n" + PASTE_OFF + C + D(0) + A + "$ " + B)
    assert not shell.marks.paste_enabled()


# ------------------------------------------------------------------ pages


def test_head_and_tail_keep_the_first_and_last_lines() -> None:
    shell = started()
    shell.marks.submit("seq 1 50")
    shell.print("seq\r\n" + C + "".join(f"{n}\r\n" for n in range(1, 51)) + prompt(0))
    record = shell.marks.record(1)
    assert record is not None
    where = pages.span(
        shell.output,
        record.output_start,
        record.output_end,
        max_line_length=200,
        max_escape_length=4096,
    )
    assert where.count == 50
    lines, missed = pages.head_and_tail(shell.output, where, 11)
    assert [line.text for line in lines] == [*map(str, range(1, 6)), *map(str, range(45, 51))]
    assert missed == 39
    page = pages.page(shell.output, where, where.first + 48, 10)
    assert [line.text for line in page.lines] == ["49", "50"] and not page.has_more
    page = pages.page(shell.output, where, 0, 3)
    assert [line.text for line in page.lines] == ["1", "2", "3"]
    assert page.has_more and page.next_offset == where.first + 3


@given(
    st.lists(st.text("ab\r\x1b[K", max_size=6), min_size=1, max_size=8),
    st.booleans(),
)
def test_a_commands_lines_are_the_lines_it_printed(pieces: list[str], newline: bool) -> None:
    """Whatever a command prints (overwrites and erases included), its lines are what a
    shell with nothing before or after them would show."""
    text = "\r\n".join(pieces) + ("\r\n" if newline else "")
    shell = started()
    shell.marks.submit("cmd")
    shell.print("cmd\r\n" + PASTE_OFF + "\r" + C + text + prompt(0))
    alone = OutputBuffer(1 << 16, max_line_length=200, max_escape_length=4096)
    alone.append(text.encode())
    expected = [line.text for line in alone.read(0, 100).lines]
    if not text.endswith("\n") and expected and expected[-1] == "":
        expected.pop()  # a last piece of a line with nothing visible is not a line
    assert shell.lines(1) == expected
    record = shell.marks.record(1)
    assert record is not None
    where = pages.span(
        shell.output,
        record.output_start,
        record.output_end,
        max_line_length=200,
        max_escape_length=4096,
    )
    lines = pages.page(shell.output, where, 0, 100).lines
    assert [line.number for line in lines] == list(range(where.first, where.first + len(lines)))
    assert all(isinstance(line, Line) for line in lines)
