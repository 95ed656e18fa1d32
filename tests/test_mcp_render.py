"""The MCP tools' text, tested directly: output cut in the middle (hypothesis), the state a
model sees of a session, and the error texts."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty.mcp.render import (
    ERROR_ADVICE,
    State,
    describe_end,
    error_text,
    show_lines,
    state_of,
)
from trio_pty.model import Line, SessionInfo

MARKER = re.compile(r"^… (\d+) lines? not shown \(lines? (\d+)(?:-(\d+))?\)(.*) …$")


@st.composite
def numbered_lines(draw: st.DrawFn) -> list[Line]:
    """Lines with increasing numbers (sometimes jumping), each text starting with its number
    so that a line shown can be told from another; no text holds the ellipsis markers use."""
    count = draw(st.integers(0, 60))
    number = draw(st.integers(0, 5))
    lines = []
    for _ in range(count):
        payload = draw(st.text(st.characters(blacklist_characters="\n…"), max_size=30))
        lines.append(Line(number, f"{number}:{payload}"))
        number += 1 + draw(st.sampled_from([0, 0, 0, 0, 1, 7]))
    return lines


@given(numbered_lines(), st.integers(20, 400), st.booleans())
def test_shown_lines_are_the_first_and_last_in_order_and_the_counts_add_up(
    lines: list[Line], budget: int, gaps: bool
) -> None:
    shown = show_lines(lines, budget, session_id="pty_00000001", gaps=gaps)
    out = shown.text.split("\n") if shown.text else []
    jumps = sum(b.number - a.number - 1 for a, b in itertools.pairwise(lines))
    total = len(lines) + (jumps if gaps else 0)
    texts = [line.text for line in lines]

    position = 0  # the next input line an output line may be
    seen = clipped = 0
    markers = 0
    size = 0
    for index, item in enumerate(out):
        match = MARKER.match(item)
        if match:
            markers += 1
            count = int(match.group(1))
            first = int(match.group(2))
            hint = json.loads(re.search(r"read_output (\{.*?\})", item).group(1))  # type: ignore[union-attr]
            assert hint == {"session_id": "pty_00000001", "offset": first, "limit": min(count, 500)}
            continue
        size += len(item) + 1
        seen += 1
        if item.endswith("…") and index == 0 and position == 0 and item != texts[0]:
            assert texts[0].startswith(item[:-1])  # the first line, cut
            position, clipped = 1, clipped + 1
        elif item.startswith("…") and index == len(out) - 1 and item != texts[-1]:
            assert texts[-1].endswith(item[1:])  # the last line, cut
            position, clipped = len(texts), clipped + 1
        else:
            assert item in texts[position:]
            position = texts.index(item, position) + 1
    assert seen + shown.omitted == total
    if markers == 0 and not clipped:
        assert shown.omitted == 0 and out == texts
    fits = sum(len(text) + 1 for text in texts) <= budget
    if fits:
        assert seen == len(lines)
    else:
        assert size <= budget
        assert markers <= (jumps if gaps else 0) + 1


def test_a_short_output_is_shown_whole_and_gaps_are_said() -> None:
    lines = [Line(0, "a"), Line(1, "b"), Line(5, "c")]
    assert show_lines(lines, 100, session_id=None).text == "a\nb\nc"
    shown = show_lines(lines, 100, session_id="pty_1", gaps=True)
    assert shown.omitted == 3
    assert shown.text.split("\n") == [
        "a",
        "b",
        '… 3 lines not shown (lines 2-4); read_output {"session_id": "pty_1", "offset": 2, '
        '"limit": 3} shows them …',
        "c",
    ]


def test_a_long_output_keeps_its_head_and_tail() -> None:
    lines = [Line(n, f"line {n:04d}") for n in range(1000)]
    shown = show_lines(lines, 1000, session_id=None)
    out = shown.text.split("\n")
    assert out[0] == "line 0000" and out[-1] == "line 0999"
    marker = next(item for item in out if "not shown" in item)
    assert marker == f"… {shown.omitted} lines not shown (lines 50-{49 + shown.omitted}) …"
    assert len(out) - 1 + shown.omitted == 1000


def _info(status: str = "running", shell: str | None = None, **fields: object) -> SessionInfo:
    base: dict[str, object] = {
        "id": "pty_1",
        "owner": "mcp",
        "command": "bash",
        "args": [],
        "workdir": "/",
        "title": None,
        "description": "d",
        "status": status,
        "pid": 1,
        "exit_code": None,
        "exit_signal": None,
        "timed_out": False,
        "created_at": 0.0,
        "line_count": 0,
        "byte_count": 0,
        "rows": 24,
        "cols": 80,
        "notify_on_exit": False,
        "timeout": None,
        "shell": shell,
    }
    base.update(fields)
    return SessionInfo(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (_info(), State("running", None, None)),
        (_info("exited", exit_code=2), State("exited", 2, None)),
        (_info("killed", exit_signal=9), State("killed", None, 9)),
        (_info("killing"), State("killed", None, None)),
        # A shell (shell_command) is a session like any other: its own state, not a command's.
        (_info(shell="bash"), State("running", None, None)),
        (_info("exited", shell="bash", exit_code=0), State("exited", 0, None)),
    ],
)
def test_the_state_a_model_sees(info: SessionInfo, expected: State) -> None:
    assert state_of(info) == expected


def test_how_sessions_end_reads() -> None:
    assert describe_end(State("exited", 3, None)) == "exit code 3"
    assert describe_end(State("killed", None, 9)) == "killed by SIGKILL"
    assert describe_end(State("exited", None, 11)) == "ended by SIGSEGV"
    assert describe_end(State("exited", None, None)) == "exited (no exit code reported)"


@pytest.mark.parametrize("kind", sorted(ERROR_ADVICE))
def test_every_error_says_its_kind_what_happened_and_what_to_do(kind: str) -> None:
    text = error_text(kind, "Something happened.", {"live_ids": ["pty_1", "pty_2"]})
    first, advice, *rest = text.split("\n")
    assert first == f"Error [{kind}]: Something happened."
    assert advice == f"What to do: {ERROR_ADVICE[kind]}"
    assert rest == (["Running now: pty_1, pty_2."] if kind == "limit_exceeded" else [])
