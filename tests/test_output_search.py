"""RE2 pattern compilation and the batched line search."""

from __future__ import annotations

import attrs
import pytest
import re2
from hypothesis import given
from hypothesis import strategies as st

from trio_pty import errors
from trio_pty.output.buffer import OutputBuffer
from trio_pty.output.search import (
    CompiledPattern,
    Match,
    Regexp,
    compile_pattern,
    first_matching_line,
)


def compile_(pattern: str, ignore_case: bool = False) -> CompiledPattern:
    return compile_pattern(pattern, ignore_case=ignore_case, max_length=500)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [("(abc", "missing )"), ("a{1001}", "invalid repetition size"), ("(?<=a)b", "invalid perl")],
)
def test_invalid_pattern_reports_re2_reason(pattern: str, reason: str) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        compile_(pattern)
    assert caught.value.field == "pattern"
    assert reason in caught.value.message
    assert "b'" not in caught.value.message  # RE2's bytes were decoded


def test_empty_and_too_long_patterns_are_refused() -> None:
    with pytest.raises(errors.InvalidInput, match="empty"):
        compile_("")
    compile_pattern("a" * 10, ignore_case=False, max_length=10)
    with pytest.raises(errors.InvalidInput, match="limit is 10"):
        compile_pattern("a" * 11, ignore_case=False, max_length=10)


def test_ignore_case() -> None:
    assert compile_("ERROR").search("an error") is None
    assert compile_("ERROR", ignore_case=True).search("an error") is not None
    assert compile_("ÉTÉ", ignore_case=True).search("un été") is not None
    blob = b"ok\nan Error here\n"
    assert first_matching_line(compile_("error", ignore_case=True), blob) == (3, 16)


def test_search_is_search_not_fullmatch() -> None:
    assert compile_("rro").search("error") is not None
    assert compile_("^rro").search("error") is None


# Patterns built from pieces whose meaning depends on context (anchors, word boundaries,
# newline-matching classes), to compare the batched search with one line at a time.
ATOMS = ["a", "b", "ab", ".", r"\s", r"\S", r"\W", "[^a]", "[a-b]", r"\n", "(?s:.)", "\\b", r"\B",
         "^", "$", r"\A", r"\z", r"\C", "é", "x*", "(?-m:^)a", "(?i)A", " "]  # fmt: skip
patterns = st.lists(
    st.tuples(st.sampled_from(ATOMS), st.sampled_from(["", "*", "+", "?", "{2}"])),
    min_size=1,
    max_size=4,
).map(lambda parts: "".join(atom + (suffix if atom not in "^$" else "") for atom, suffix in parts))
lines_strategy = st.lists(st.text(alphabet="ab é\t", max_size=6), min_size=1, max_size=12)


@given(pattern=patterns, lines=lines_strategy, alternate=st.booleans())
def test_batch_search_finds_exactly_the_matching_lines(
    pattern: str, lines: list[str], alternate: bool
) -> None:
    try:
        compiled = compile_(pattern + "|zz" if alternate else pattern)
    except errors.InvalidInput:
        return
    blob = "".join(line + "\n" for line in lines).encode()
    expected = [i for i, line in enumerate(lines) if compiled.line.search(line) is not None]
    found = []
    pos = 0
    while True:
        start, end = first_matching_line(compiled, blob, pos)
        if start < 0:
            break
        found.append(blob.count(b"\n", 0, start))
        assert blob[start:end] == lines[found[-1]].encode()
        pos = end + 1
    assert found == expected


@given(
    parts=st.lists(st.tuples(st.sampled_from(ATOMS), st.booleans()), min_size=1, max_size=4),
    line=st.text(alphabet="ab é\t", max_size=8),
)
def test_groups_change_no_match(parts: list[tuple[str, bool]], line: str) -> None:
    """Patterns compile without captures (a search reports lines, not groups): each match
    is the one RE2 finds with them (compared as UTF-8 byte spans, as the batch search sees
    them: on a str the binding converts spans to characters through every group's offsets,
    which for `\\C` inside a character gives another count)."""
    groups = [
        f"(?P<g{i}>{atom})+" if named else f"({atom})*" for i, (atom, named) in enumerate(parts)
    ]
    pattern = "".join(groups)
    try:
        compiled = compile_(pattern)
    except errors.InvalidInput:
        return
    options = re2.Options()
    options.log_errors = False
    with_groups = re2.compile(pattern, options)
    re2.purge()
    text = line.encode()
    expected = with_groups.search(text)
    found = compiled.search(text)
    assert (found and found.span()) == (expected and expected.span())
    assert (compiled.search(line) is None) == (expected is None)


def test_unsafe_constructs_fall_back_to_line_by_line() -> None:
    for pattern in (r"\Aab", r"ab\z", r"a\Cb", "(?-m:^a)", "(?i-m)^a"):
        compiled = compile_(pattern)
        assert compiled.batch is None
    blob = b"xab\nab\na\nb\n"
    assert first_matching_line(compile_(r"\Aab"), blob) == (4, 6)
    assert first_matching_line(compile_(r"a\Cb"), blob) == (-1, -1)
    assert compile_("^ab$").batch is not None
    assert first_matching_line(compile_("^ab$"), blob) == (4, 6)


PATHOLOGICAL = [r"(a*)*b", r"(x+x+)+y", r"(a|a)*c", r"(.*)(.*)(.*)(.*)z", r"(a|aa)+$b",
                r"[a-q][^u-z]{13}x", r"(\w+\s?)*!", r"a{100}"]  # fmt: skip


def filled(lines: int) -> OutputBuffer:
    buffer = OutputBuffer(4_000_000, max_line_length=2000, max_escape_length=4096)
    line = b"a" * 47 + b" d" * 6 + b"\r\n"
    data = line * lines
    for i in range(0, len(data), 4096):
        buffer.append(data[i : i + 4096])
    return buffer


class Counted:
    """A compiled RE2 pattern that counts what it is given to scan. RE2's time is linear
    in that (its own guarantee; benchmarks/reading.py measures the constant, pathological
    patterns included), so this counts the search's work without timing it."""

    def __init__(self, inner: Regexp) -> None:
        self.inner = inner
        self.scanned = 0

    def search(self, text: str | bytes, pos: int = 0, endpos: int | None = None) -> Match | None:
        end = len(text) if endpos is None else min(endpos, len(text))
        self.scanned += max(0, end - pos)
        return self.inner.search(text, pos, end)


def counted(pattern: str) -> tuple[CompiledPattern, list[Counted]]:
    compiled = compile_(pattern)
    line = Counted(compiled.line)
    batch = None if compiled.batch is None else Counted(compiled.batch)
    return attrs.evolve(compiled, line=line, batch=batch), [c for c in (line, batch) if c]


@pytest.mark.parametrize("pattern", PATHOLOGICAL)
def test_pathological_patterns_stay_linear(pattern: str) -> None:
    """Whatever the pattern, a search hands RE2 each byte of the buffer about once: four
    times the lines, four times the bytes scanned."""
    scanned = []
    for lines in (4000, 16000):
        buffer = filled(lines)
        compiled, counters = counted(pattern)
        hit, resume = buffer.search_from(compiled, 0)
        assert hit is None
        assert resume == lines
        scanned.append(sum(counter.scanned for counter in counters))
    size = 60 * 16000  # the larger buffer's clean lines: 59 characters and a newline each
    assert scanned[1] <= 1.1 * size, scanned
    assert scanned[1] <= 4.1 * scanned[0], scanned


def test_re2_rejects_backreferences() -> None:
    with pytest.raises(errors.InvalidInput):
        compile_(r"(a)\1")
    assert isinstance(compile_("a").line, type(re2.compile("a")))


def test_user_patterns_are_not_pinned_by_the_module_cache() -> None:
    cache_info = getattr(getattr(re2, "_Regexp", None), "_make", None)
    if cache_info is None:  # pragma: no cover - another binding version
        pytest.skip("re2 internals differ")
    compile_("never seen before (pattern)")
    assert re2._Regexp._make.cache_info().currsize == 0
