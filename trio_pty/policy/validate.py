"""Bounds and well-formedness checks for every value a caller hands to trio-pty.

The same functions guard the library API and the JSON-RPC server, so they check types too:
JSON can put an int where a string belongs. Each failure is an `InvalidInput` naming the
field and the bound, and never echoes more than a short piece of the offending value back.
Every bound comes from a `Limits` argument; nothing here hard-codes a size.
"""

from __future__ import annotations

import math
import re
import signal as signals
from collections.abc import Mapping, Sequence
from functools import lru_cache

from trio_pty.errors import InvalidInput, json_type_name
from trio_pty.limits import Limits
from trio_pty.policy.escapes import decode_escapes

__all__ = [
    "ENV_NAME_PATTERN",
    "NODE_ID_PATTERN",
    "args",
    "byte_offset",
    "command",
    "description",
    "env",
    "glob_match",
    "int_between",
    "node_id",
    "owner",
    "read_window",
    "shell_quote",
    "signal_name",
    "timeout",
    "title",
    "wait_ms",
    "window",
    "workdir",
    "write_data",
    "write_text",
]

ENV_NAME_PATTERN = "[A-Za-z_][A-Za-z0-9_]*"
_ENV_NAME = re.compile(ENV_NAME_PATTERN, re.ASCII)


# -- helpers -----------------------------------------------------------------------------------


def _short(text: str, limit: int = 40) -> str:
    """A bounded, printable rendering of untrusted text for an error message."""
    shown = text if len(text) <= limit else text[:limit] + "…"
    return ascii(shown)


def _text(field: str, value: object) -> tuple[str, int]:
    """Check the rules every text shares; return it with its UTF-8 size.

    Lone surrogates (which a JSON decoder happily produces from "\\ud800") cannot be
    encoded, and NUL cannot cross execve or a C string, so both are refused here once.
    """
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, got {json_type_name(value)}")
    _text_without_surrogates(field, value)
    size = len(value.encode("utf-8"))
    nul = value.find("\0")
    if nul >= 0:
        raise InvalidInput(field, f"must not contain NUL (U+0000), found at position {nul}")
    return value, size


def _text_without_surrogates(field: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = ord(value[exc.start])
        raise InvalidInput(
            field,
            f"must be well-formed Unicode: lone surrogate U+{bad:04X} at position {exc.start}",
        ) from None


def _max_bytes(field: str, size: int, bound: int) -> None:
    if size > bound:
        raise InvalidInput(field, f"at most {bound} UTF-8 bytes, got {size}")


def _max_chars(field: str, value: str, bound: int) -> None:
    if len(value) > bound:
        raise InvalidInput(field, f"at most {bound} characters, got {len(value)}")


def _number(value: float) -> str:
    """Show a number in a message without tripping over huge ints (int -> str is bounded)."""
    if isinstance(value, int):
        if abs(value) < 10**30:
            return str(value)
        return f"a number of about {int(value.bit_length() * 0.30103)} digits"
    return f"{value:g}"


def _int(field: str, value: object) -> int:
    """An integer that is not a bool (True is not a row count)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, f"must be an integer, got {json_type_name(value)}")
    return value


def _int_between(field: str, value: object, low: int, high: int) -> int:
    number = _int(field, value)
    if not low <= number <= high:
        raise InvalidInput(field, f"must be between {low} and {high}, got {_number(number)}")
    return number


# -- one function per input kind ---------------------------------------------------------------


def owner(value: object, limits: Limits) -> str:
    """The owner key that scopes sessions; counted in characters like other labels."""
    text, _ = _text("owner", value)
    if not text:
        raise InvalidInput("owner", "must not be empty")
    _max_chars("owner", text, limits.max_owner_length)
    return text


def reader(value: object, limits: Limits) -> str:
    """The key of a read cursor (`Manager.read(since="last")`), bounded like an owner."""
    text, _ = _text("reader", value)
    if not text:
        raise InvalidInput("reader", "must not be empty")
    _max_chars("reader", text, limits.max_owner_length)
    return text


def command(value: object, limits: Limits) -> str:
    """The program to run; counted in bytes because that is what execve carries."""
    text, size = _text("command", value)
    if not text:
        raise InvalidInput("command", "must not be empty")
    _max_bytes("command", size, limits.max_command_bytes)
    return text


def args(values: object, limits: Limits) -> list[str]:
    """The argument vector: bounded in count, per item and in total (all in bytes)."""
    if values is None:
        return []
    if not isinstance(values, list | tuple):
        raise InvalidInput("args", f"must be an array of strings, got {json_type_name(values)}")
    if len(values) > limits.max_args:
        raise InvalidInput("args", f"at most {limits.max_args} items, got {len(values)}")
    checked: list[str] = []
    total = 0
    for index, item in enumerate(values):
        field = f"args[{index}]"
        text, size = _text(field, item)
        _max_bytes(field, size, limits.max_arg_bytes)
        checked.append(text)
        total += size
    if total > limits.max_args_total_bytes:
        raise InvalidInput(
            "args", f"together at most {limits.max_args_total_bytes} UTF-8 bytes, got {total}"
        )
    return checked


def workdir(value: object, limits: Limits) -> str | None:
    """A working directory path (None means the manager's root); resolved later."""
    if value is None:
        return None
    text, size = _text("workdir", value)
    if not text:
        raise InvalidInput("workdir", "must not be empty (omit it for the default directory)")
    _max_bytes("workdir", size, limits.max_workdir_bytes)
    return text


def title(value: object, limits: Limits) -> str | None:
    """An optional display title."""
    if value is None:
        return None
    text, _ = _text("title", value)
    _max_chars("title", text, limits.max_title_length)
    return text


def description(value: object, limits: Limits) -> str:
    """Why the session exists; required so that every listing and exit event explains itself."""
    text, _ = _text("description", value)
    if not text.strip():
        raise InvalidInput("description", "must not be blank")
    _max_chars("description", text, limits.max_description_length)
    return text


def timeout(value: object, limits: Limits, *, field: str = "timeout") -> float | None:
    """Seconds before the session is killed (`field`: "timeout", or "idle_timeout" for
    the seconds of idleness); None means none."""
    if value is None:
        return None
    return _seconds(field, value, limits, zero=False)


def seconds_from_zero(field: str, value: object, limits: Limits) -> float:
    """A number of seconds from 0 (included) to `max_timeout_seconds`."""
    return _seconds(field, value, limits, zero=True)


def _seconds(field: str, value: object, limits: Limits, *, zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(field, f"must be a number of seconds, got {json_type_name(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(field, f"must be a finite number of seconds, got {value}")
    bound = limits.max_timeout_seconds
    in_range = value >= 0 if zero else value > 0
    if not in_range or value > bound:
        lowest = "at least 0" if zero else "more than 0"
        raise InvalidInput(
            field, f"must be {lowest} and at most {bound:g} seconds, got {_number(value)}"
        )
    return float(value)


# A DNS label: session ids carry it (`pty_<node>_<hex>`) and the router reads it back.
NODE_ID_PATTERN = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NODE_ID = re.compile(NODE_ID_PATTERN)


def node_id(value: object) -> str:
    """A node id as session ids carry it: a DNS label (1 to 63 of a-z, 0-9 and `-`, not
    starting or ending with `-`), so that it can name the host in a URL pattern too."""
    text, _ = _text("node_id", value)
    if _NODE_ID.fullmatch(text) is None:
        raise InvalidInput(
            "node_id",
            f"must be a DNS label (1 to 63 of a-z, 0-9 and -, not starting or ending "
            f"with -), got {text[:80]!r}",
        )
    return text


def env(mapping: object, limits: Limits) -> dict[str, str] | None:
    """Extra environment variables for the child (names POSIX-portable, values bounded)."""
    if mapping is None:
        return None
    if not isinstance(mapping, Mapping):
        raise InvalidInput("env", f"must be an object of strings, got {json_type_name(mapping)}")
    if len(mapping) > limits.max_env_vars:
        raise InvalidInput("env", f"at most {limits.max_env_vars} variables, got {len(mapping)}")
    checked: dict[str, str] = {}
    total = 0
    for name, value in mapping.items():
        if not isinstance(name, str):
            raise InvalidInput("env", f"variable names must be strings, got {json_type_name(name)}")
        if len(name) > limits.max_env_name_bytes:
            # Checked before the pattern so that a huge name is never scanned or echoed.
            raise InvalidInput(
                "env",
                f"variable names at most {limits.max_env_name_bytes} bytes, "
                f"got {len(name.encode('utf-8', 'surrogatepass'))} for {_short(name)}",
            )
        if not _ENV_NAME.fullmatch(name):
            raise InvalidInput(
                "env", f"variable name must match {ENV_NAME_PATTERN}, got {_short(name)}"
            )
        field = f"env[{name}]"
        text, size = _text(field, value)
        _max_bytes(field, size, limits.max_env_value_bytes)
        total += len(name) + 1 + size + 1
        checked[name] = text
    # The kernel refuses an exec whose strings exceed ARG_MAX: say so here, not as E2BIG.
    _max_bytes("env (all variables together)", total, limits.max_env_total_bytes)
    return checked


def window(rows: object, cols: object, limits: Limits) -> tuple[int, int]:
    """A terminal size in character cells."""
    return (
        _int_between("rows", rows, 1, limits.max_rows),
        _int_between("cols", cols, 1, limits.max_cols),
    )


def read_window(offset: object, limit: object, limits: Limits) -> tuple[int, int]:
    """A page request: a line offset and a line count (None means the default count)."""
    start = _int("offset", offset)
    if start < 0:
        raise InvalidInput("offset", f"must be at least 0, got {_number(start)}")
    if limit is None:
        return start, limits.default_read_limit
    return start, _int_between("limit", limit, 1, limits.max_read_limit)


def write_data(data: object, limits: Limits) -> bytes:
    """The bytes about to reach the terminal, counted after escape decoding."""
    if not isinstance(data, bytes):
        raise InvalidInput("data", f"must be bytes, got {json_type_name(data)}")
    if len(data) > limits.max_write_bytes:
        raise InvalidInput("data", f"at most {limits.max_write_bytes} bytes, got {len(data)}")
    return data


def write_text(value: object, limits: Limits, *, escapes: bool = False) -> bytes:
    """Text for the terminal as bytes: UTF-8, or escape-decoded (`\\x03` is Ctrl-C), bounded
    after decoding. NUL can only be sent deliberately, as the escape `\\x00`."""
    if isinstance(value, str) and escapes:
        _text_without_surrogates("data", value)
        data = decode_escapes(value)
    else:
        data = _text("data", value)[0].encode("utf-8")
    return write_data(data, limits)


def int_between(field: str, value: object, low: int, high: int) -> int:
    """An integer (not a bool, not a float) within [low, high]."""
    return _int_between(field, value, low, high)


def signal_name(value: object) -> tuple[int, str]:
    """A signal named as `kill -l` names it ("INT", "SIGINT", any case) -> (its number, its
    full name "SIGINT"). Numbers are refused: they differ between systems."""
    text, _ = _text("signal", value)
    name = text.upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    try:
        number = signals.Signals[name]
    except KeyError:
        raise InvalidInput(
            "signal", f"not a signal name: {_short(text)} (INT, TERM, HUP, KILL, USR1, ...)"
        ) from None
    return int(number), number.name


def byte_offset(value: object) -> int:
    """An absolute byte offset into a session's output."""
    number = _int("offset", value)
    if number < 0:
        raise InvalidInput("offset", f"must not be negative, got {_number(number)}")
    return number


def wait_ms(field: str, value: object, limits: Limits) -> int:
    """A wait in milliseconds; every wait has a bound."""
    return _int_between(field, value, 1, limits.max_wait_ms)


# -- text helpers shared by the policy modules -------------------------------------------------


def shell_quote(words: Sequence[str]) -> str:
    """Render words so that a POSIX shell reads them back exactly, for people and authorizers.

    Every word is single-quoted (even plain ones) so the rendering is unambiguous: word
    boundaries and metacharacters can never be confused, whatever the words contain.
    """
    return " ".join("'" + word.replace("'", "'\\''") + "'" for word in words)


@lru_cache(maxsize=256)
def _glob_plan(pattern: str) -> tuple[str, tuple[re.Pattern[str], ...], str]:
    """Split a glob at its stars; compile each star-free piece to a fixed-length regex."""
    pieces = pattern.split("*")
    compiled = tuple(
        re.compile("".join("." if ch == "?" else re.escape(ch) for ch in piece), re.DOTALL)
        for piece in pieces
    )
    return pieces[0], compiled, pieces[-1]


def glob_match(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    """Match a glob with `*` (any run, newlines and `/` included) and `?` (one character).

    There are no character classes and no escapes: `[` is literal. Unlike a regex
    translation (which backtracks exponentially on `*a*a*a*b`), this anchors the first
    and last pieces and finds the middle ones leftmost-first, so the cost is at most
    len(text) x len(pattern) and usually linear.
    """
    if ignore_case:
        pattern, text = pattern.casefold(), text.casefold()
    first, compiled, last = _glob_plan(pattern)
    if len(compiled) == 1:
        return compiled[0].fullmatch(text) is not None
    end = len(text) - len(last)
    if end < len(first):
        return False
    if compiled[0].match(text, 0) is None or compiled[-1].match(text, end) is None:
        return False
    position = len(first)
    for piece in compiled[1:-1]:
        if not piece.pattern:
            continue
        found = piece.search(text, position, end)
        if found is None:
            return False
        position = found.end()
    return True
