"""Input bounds: each is enforced exactly at its edge, in the unit it is specified in."""

from __future__ import annotations

import contextlib
import fnmatch
import math
import re
import shlex
import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trio_pty.errors import InvalidInput
from trio_pty.limits import Limits
from trio_pty.policy import validate
from trio_pty.policy.validate import glob_match, shell_quote

from .helpers import python_steps

DEFAULT = Limits()

# Well-formed, NUL-free text, heavy on multi-byte characters so bytes and characters differ.
chars = st.characters(codec="utf-8", exclude_characters="\0")
texts = st.text(chars, min_size=1, max_size=40)
wide_texts = st.text(st.one_of(chars, st.sampled_from("é€😀\u0301日")), min_size=1, max_size=40)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


def utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def limits(**bounds: Any) -> Limits:
    return attrs.evolve(DEFAULT, **bounds)


def rejects(call: Callable[[], object], field: str, *needles: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        call()
    assert info.value.field == field
    message = str(info.value)
    assert message.startswith(f"{field}: ")
    for needle in needles:
        assert needle in message
    return info.value


# -- exact edges of text bounds -----------------------------------------------------------------

# (validator, field, Limits attribute, how the bound counts)
TEXT_BOUNDS: list[tuple[Callable[[object, Limits], object], str, str, Callable[[str], int]]] = [
    (validate.owner, "owner", "max_owner_length", len),
    (validate.command, "command", "max_command_bytes", utf8),
    (validate.workdir, "workdir", "max_workdir_bytes", utf8),
    (validate.title, "title", "max_title_length", len),
    (validate.description, "description", "max_description_length", len),
]


@pytest.mark.parametrize(("check", "field", "bound", "measure"), TEXT_BOUNDS)
@given(text=wide_texts)
def test_text_bound_is_exact(
    check: Callable[[object, Limits], object],
    field: str,
    bound: str,
    measure: Callable[[str], int],
    text: str,
) -> None:
    assume(text.strip())
    size = measure(text)
    assert check(text, limits(**{bound: size})) == text
    assume(size >= 2)
    error = rejects(lambda: check(text, limits(**{bound: size - 1})), field, str(size - 1))
    assert f"got {size}" in str(error)


def test_bytes_versus_characters() -> None:
    euro = "€" * 10  # 10 characters, 30 bytes
    assert validate.owner(euro, limits(max_owner_length=10)) == euro
    assert validate.title(euro, limits(max_title_length=10)) == euro
    rejects(lambda: validate.command(euro, limits(max_command_bytes=29)), "command", "29")
    assert validate.command(euro, limits(max_command_bytes=30)) == euro


def test_message_names_field_and_bound() -> None:
    error = rejects(lambda: validate.command("x" * 5000, DEFAULT), "command")
    assert str(error) == "command: at most 4096 UTF-8 bytes, got 5000"
    error = rejects(lambda: validate.owner("o" * 300, DEFAULT), "owner")
    assert str(error) == "owner: at most 256 characters, got 300"


def test_required_texts() -> None:
    rejects(lambda: validate.owner("", DEFAULT), "owner", "empty")
    rejects(lambda: validate.command("", DEFAULT), "command", "empty")
    rejects(lambda: validate.workdir("", DEFAULT), "workdir", "empty")
    rejects(lambda: validate.description(" \t\n", DEFAULT), "description", "blank")
    rejects(lambda: validate.description(None, DEFAULT), "description", "null")
    assert validate.workdir(None, DEFAULT) is None
    assert validate.title(None, DEFAULT) is None
    assert validate.title("", DEFAULT) == ""


# -- well-formedness: every text refuses lone surrogates and NUL -----------------------------------

ALL_TEXTS: list[tuple[Callable[[object], object], str]] = [
    (lambda v: validate.owner(v, DEFAULT), "owner"),
    (lambda v: validate.command(v, DEFAULT), "command"),
    (lambda v: validate.workdir(v, DEFAULT), "workdir"),
    (lambda v: validate.title(v, DEFAULT), "title"),
    (lambda v: validate.description(v, DEFAULT), "description"),
    (lambda v: validate.args(["ok", v], DEFAULT), "args[1]"),
    (lambda v: validate.env({"NAME": v}, DEFAULT), "env[NAME]"),
]


@pytest.mark.parametrize(("check", "field"), ALL_TEXTS)
@given(
    before=st.text(chars, max_size=5),
    bad=st.sampled_from(["\0", "\ud800", "\udfff", "\udc80"]),
    after=st.text(chars, max_size=5),
)
def test_malformed_text_is_refused(
    check: Callable[[object], object], field: str, before: str, bad: str, after: str
) -> None:
    value = "x" + before + bad + after
    error = rejects(lambda: check(value), field, f"position {1 + len(before)}")
    assert ("NUL" in str(error)) == (bad == "\0")


@pytest.mark.parametrize(("check", "field"), ALL_TEXTS)
def test_wrong_type_is_refused(check: Callable[[object], object], field: str) -> None:
    rejects(lambda: check(42), field, "must be a string, got integer")
    rejects(lambda: check(b"bytes"), field, "must be a string, got bytes")


VALIDATORS: list[Callable[[Any], object]] = [
    lambda v: validate.owner(v, DEFAULT),
    lambda v: validate.command(v, DEFAULT),
    lambda v: validate.args(v, DEFAULT),
    lambda v: validate.workdir(v, DEFAULT),
    lambda v: validate.title(v, DEFAULT),
    lambda v: validate.description(v, DEFAULT),
    lambda v: validate.timeout(v, DEFAULT),
    lambda v: validate.env(v, DEFAULT),
    lambda v: validate.window(v, v, DEFAULT),
    lambda v: validate.read_window(v, v, DEFAULT),
    lambda v: validate.write_data(v, DEFAULT),
    lambda v: validate.wait_ms("wait", v, DEFAULT),
]


@pytest.mark.parametrize("check", VALIDATORS)
@given(value=json_values)
def test_any_json_value_is_accepted_or_invalid_input(
    check: Callable[[Any], object], value: object
) -> None:
    with contextlib.suppress(InvalidInput):
        check(value)


# -- args ------------------------------------------------------------------------------------------


@given(words=st.lists(st.text(chars, max_size=6), min_size=1, max_size=10))
def test_args_count_bound_is_exact(words: list[str]) -> None:
    assert validate.args(words, limits(max_args=len(words))) == words
    assume(len(words) >= 2)
    rejects(
        lambda: validate.args(words, limits(max_args=len(words) - 1)),
        "args",
        f"at most {len(words) - 1} items, got {len(words)}",
    )


@given(words=st.lists(wide_texts, min_size=1, max_size=6))
def test_args_item_bound_is_exact(words: list[str]) -> None:
    longest = max(utf8(word) for word in words)
    assert validate.args(words, limits(max_arg_bytes=longest)) == words
    assume(longest >= 2)
    first_too_long = next(i for i, w in enumerate(words) if utf8(w) == longest)
    rejects(
        lambda: validate.args(words, limits(max_arg_bytes=longest - 1)),
        f"args[{first_too_long}]",
        f"at most {longest - 1} UTF-8 bytes, got {longest}",
    )


@given(words=st.lists(wide_texts, min_size=1, max_size=6))
def test_args_total_bound_is_exact(words: list[str]) -> None:
    total = sum(utf8(word) for word in words)
    assert validate.args(words, limits(max_args_total_bytes=total)) == words
    assume(total >= 2)
    rejects(
        lambda: validate.args(words, limits(max_args_total_bytes=total - 1)),
        "args",
        f"together at most {total - 1} UTF-8 bytes, got {total}",
    )


def test_args_shapes() -> None:
    assert validate.args(None, DEFAULT) == []
    assert validate.args([], DEFAULT) == []
    assert validate.args(("a", ""), DEFAULT) == ["a", ""]
    rejects(lambda: validate.args(["a", "b", "c", 3], DEFAULT), "args[3]", "got integer")
    rejects(lambda: validate.args("ls -l", DEFAULT), "args", "array of strings, got string")
    rejects(lambda: validate.args({"a": 1}, DEFAULT), "args", "got object")


# -- numbers ---------------------------------------------------------------------------------------


@given(bound=st.floats(min_value=1e-3, max_value=1e9, allow_nan=False))
def test_timeout_bound_is_exact(bound: float) -> None:
    lim = limits(max_timeout_seconds=bound)
    assert validate.timeout(bound, lim) == bound
    rejects(lambda: validate.timeout(math.nextafter(bound, math.inf), lim), "timeout", "at most")


def test_timeout_shapes() -> None:
    assert validate.timeout(None, DEFAULT) is None
    assert validate.timeout(1, DEFAULT) == 1.0
    assert isinstance(validate.timeout(1, DEFAULT), float)
    assert validate.timeout(5e-324, DEFAULT) == 5e-324
    for bad in (0, 0.0, -1, -0.0):
        rejects(partial(validate.timeout, bad, DEFAULT), "timeout", "more than 0")
    for bad in (math.inf, -math.inf, math.nan):
        rejects(partial(validate.timeout, bad, DEFAULT), "timeout", "finite")
    rejects(lambda: validate.timeout(True, DEFAULT), "timeout", "got boolean")
    rejects(lambda: validate.timeout("10", DEFAULT), "timeout", "got string")
    rejects(lambda: validate.timeout(10**400, DEFAULT), "timeout", "digits")


@given(rows=st.integers(1, 5000), cols=st.integers(1, 5000))
def test_window_bounds_are_exact(rows: int, cols: int) -> None:
    lim = limits(max_rows=rows, max_cols=cols)
    assert validate.window(rows, cols, lim) == (rows, cols)
    rejects(lambda: validate.window(rows + 1, cols, lim), "rows", f"between 1 and {rows}")
    rejects(lambda: validate.window(rows, cols + 1, lim), "cols", f"between 1 and {cols}")
    rejects(lambda: validate.window(0, cols, lim), "rows", "got 0")
    rejects(lambda: validate.window(rows, -1, lim), "cols", "got -1")


def test_window_types() -> None:
    rejects(lambda: validate.window(True, 80, DEFAULT), "rows", "integer, got boolean")
    rejects(lambda: validate.window(24, 80.0, DEFAULT), "cols", "integer, got number")
    rejects(lambda: validate.window(24, 10**5000, DEFAULT), "cols", "digits")


@given(bound=st.integers(1, 10_000), offset=st.integers(0, 10**30))
def test_read_window_bounds_are_exact(bound: int, offset: int) -> None:
    lim = limits(max_read_limit=bound, default_read_limit=min(bound, 7))
    assert validate.read_window(offset, bound, lim) == (offset, bound)
    assert validate.read_window(offset, None, lim) == (offset, min(bound, 7))
    rejects(lambda: validate.read_window(offset, bound + 1, lim), "limit", f"1 and {bound}")
    rejects(lambda: validate.read_window(offset, 0, lim), "limit", "got 0")
    rejects(lambda: validate.read_window(-1 - offset, 1, lim), "offset", "at least 0")
    rejects(lambda: validate.read_window(None, 1, lim), "offset", "got null")
    rejects(lambda: validate.read_window(False, 1, lim), "offset", "got boolean")


@given(bound=st.integers(1, 10**6))
def test_wait_ms_bound_is_exact(bound: int) -> None:
    lim = limits(max_wait_ms=bound)
    assert validate.wait_ms("idle_ms", bound, lim) == bound
    assert validate.wait_ms("idle_ms", 1, lim) == 1
    rejects(lambda: validate.wait_ms("idle_ms", bound + 1, lim), "idle_ms", f"1 and {bound}")
    rejects(lambda: validate.wait_ms("idle_ms", 0, lim), "idle_ms", "got 0")
    rejects(lambda: validate.wait_ms("idle_ms", 1.5, lim), "idle_ms", "integer")


@given(data=st.binary(min_size=1, max_size=200))
def test_write_bound_is_exact(data: bytes) -> None:
    assert validate.write_data(data, limits(max_write_bytes=len(data))) == data
    assume(len(data) >= 2)
    rejects(
        lambda: validate.write_data(data, limits(max_write_bytes=len(data) - 1)),
        "data",
        f"at most {len(data) - 1} bytes, got {len(data)}",
    )


def test_write_data_types() -> None:
    assert validate.write_data(b"", DEFAULT) == b""
    rejects(lambda: validate.write_data("text", DEFAULT), "data", "must be bytes, got string")


# -- env -------------------------------------------------------------------------------------------

env_names = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,20}\Z")


@given(env=st.dictionaries(env_names, st.text(chars, max_size=10), min_size=1, max_size=8))
def test_env_count_bound_is_exact(env: dict[str, str]) -> None:
    assert validate.env(env, limits(max_env_vars=len(env))) == env
    assume(len(env) >= 2)
    rejects(lambda: validate.env(env, limits(max_env_vars=len(env) - 1)), "env", "variables")


@given(name=env_names)
def test_env_name_bound_is_exact(name: str) -> None:
    assert validate.env({name: ""}, limits(max_env_name_bytes=len(name))) == {name: ""}
    assume(len(name) >= 2)
    rejects(
        lambda: validate.env({name: ""}, limits(max_env_name_bytes=len(name) - 1)),
        "env",
        f"at most {len(name) - 1} bytes, got {len(name)}",
    )


@given(value=wide_texts)
def test_env_value_bound_is_exact(value: str) -> None:
    size = utf8(value)
    assert validate.env({"V": value}, limits(max_env_value_bytes=size)) == {"V": value}
    assume(size >= 2)
    rejects(
        lambda: validate.env({"V": value}, limits(max_env_value_bytes=size - 1)),
        "env[V]",
        f"at most {size - 1} UTF-8 bytes, got {size}",
    )


@given(name=st.text(max_size=30))
def test_env_names_follow_the_pattern(name: str) -> None:
    good = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name, re.ASCII) is not None
    try:
        validate.env({name: "v"}, DEFAULT)
    except InvalidInput as error:
        assert not good
        assert error.field == "env"
    else:
        assert good


def test_env_shapes() -> None:
    assert validate.env(None, DEFAULT) is None
    assert validate.env({}, DEFAULT) == {}
    rejects(lambda: validate.env([("A", "b")], DEFAULT), "env", "object of strings, got array")
    rejects(lambda: validate.env({"A": 1}, DEFAULT), "env[A]", "got integer")
    rejects(lambda: validate.env({"A": None}, DEFAULT), "env[A]", "got null")
    rejects(lambda: validate.env({1: "x"}, DEFAULT), "env", "names must be strings")
    for bad in ("1A", "A-B", "A B", "", "Ä", "A=B", "٣"):
        rejects(partial(validate.env, {bad: "x"}, DEFAULT), "env", "must match")
    error = rejects(lambda: validate.env({"-" * 10_000: "x"}, DEFAULT), "env", "at most 256")
    assert len(str(error)) < 200  # a hostile name is not echoed in full


# -- shell quoting ---------------------------------------------------------------------------------

words = st.lists(st.text(chars, max_size=12), max_size=6)


@given(words=words)
def test_shell_quote_round_trips_through_shlex(words: list[str]) -> None:
    assert shlex.split(shell_quote(words)) == words


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=st.lists(st.text(chars, max_size=12), min_size=1, max_size=5))
def test_shell_quote_round_trips_through_a_real_shell(words: list[str]) -> None:
    script = "printf '%s\\0' " + shell_quote(words)
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, check=True, timeout=10)
    assert done.stdout.decode("utf-8").split("\0")[:-1] == words


def test_shell_quote_shape() -> None:
    assert shell_quote([]) == ""
    assert shell_quote(["npm", "run", "dev"]) == "'npm' 'run' 'dev'"
    assert shell_quote(["it's", ""]) == "'it'\\''s' ''"


# -- glob matching ---------------------------------------------------------------------------------

glob_patterns = st.text(st.sampled_from("ab*?\n/ "), max_size=10)
glob_texts = st.text(st.sampled_from("ab\n/ *?"), max_size=14)


@given(pattern=glob_patterns, text=glob_texts)
def test_glob_agrees_with_fnmatch(pattern: str, text: str) -> None:
    assert glob_match(pattern, text) == fnmatch.fnmatchcase(text, pattern)


@given(pattern=st.text(st.sampled_from("aAbB*?"), max_size=8), text=st.text("aAbB", max_size=10))
def test_glob_ignore_case(pattern: str, text: str) -> None:
    expected = fnmatch.fnmatchcase(text.lower(), pattern.lower())
    assert glob_match(pattern, text, ignore_case=True) == expected


def test_glob_brackets_are_literal() -> None:
    assert glob_match("[ab]", "[ab]")
    assert not glob_match("[ab]", "a")


def test_glob_is_not_exponential() -> None:
    """The pieces are found by linear regex scans, leftmost first, never by backtracking
    across pieces: the Python work does not grow with the text."""

    def match(size: int) -> None:
        text = "a" * size
        assert not glob_match("*a" * 40 + "*b", text)
        assert not glob_match("*a*a*a*a*a*a*a*a*a*a*c*", text + "b")
        assert glob_match("*?" * 50, text)

    match(100)  # the patterns compiled once
    assert python_steps(lambda: match(200_000)) == python_steps(lambda: match(100_000))


# -- the docs keep up with the bounds --------------------------------------------------------------

DOCUMENTED_BOUNDS = [
    "max_owner_length",
    "max_command_bytes",
    "max_args",
    "max_arg_bytes",
    "max_args_total_bytes",
    "max_workdir_bytes",
    "max_title_length",
    "max_description_length",
    "max_timeout_seconds",
    "max_env_vars",
    "max_env_name_bytes",
    "max_env_value_bytes",
    "max_rows",
    "max_cols",
    "default_read_limit",
    "max_read_limit",
    "max_write_bytes",
    "max_wait_ms",
]


def test_security_doc_lists_every_input_bound_with_its_default() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "security.md").read_text("utf-8")
    rows = {
        match.group(1): match.group(2).replace(",", "").replace("_", "")
        for match in re.finditer(r"^\|\s*`(\w+)`\s*\|\s*([\d.,_]+)", doc, re.MULTILINE)
    }
    for name in DOCUMENTED_BOUNDS:
        assert name in rows, f"docs/security.md has no row for {name}"
        assert float(rows[name]) == float(getattr(DEFAULT, name)), name
