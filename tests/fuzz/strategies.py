"""Hypothesis strategies: valid requests for every method, requests with any part wrong,
arbitrary JSON, deep nesting, broken UTF-8, breaches of RFC 6455; and the batches of them."""

from __future__ import annotations

import itertools
import json
import typing
from collections.abc import Iterable
from typing import Any

import attrs
from hypothesis import assume
from hypothesis import strategies as st

from tests.fuzz.config import FUZZ_OWNER, MAX_MESSAGE, OTHER_OWNERS
from tests.fuzz.frames import OP_CLOSE, OP_CONTINUATION, OP_PING, OP_TEXT
from tests.fuzz.messages import Batch, Frame
from tests.fuzz.methods import BASE_PARAMS, METHOD_NAMES, is_union, params_of
from tests.fuzz.oracle import (
    CANCEL,
    INVALID_PARAMS,
    INVALID_REQUEST,
    NULL,
    PARSE_ERROR,
    Expect,
    has_lone_surrogate,
    key_of,
)
from tests.rpc_support import client_frame
from trio_pty.wire import METHODS, CancelParams

# Text of every kind, lone surrogates included (sent as \\u escapes: they cannot be UTF-8).
any_char = st.characters(exclude_categories=())
texts = st.text(any_char, max_size=12) | st.text(max_size=12)
long_texts = st.builds(
    lambda piece, count: piece * count,
    st.text(any_char, min_size=1, max_size=4),
    st.integers(100, 2_000),
)
strings = (
    texts
    | long_texts
    | st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "\\u0000",
            "\ud800",
            "a\udfffb",
            "cat",
            "true",
            "default",
            FUZZ_OWNER,
            "\u2028",
        ]
    )
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


@attrs.frozen
class Literal_:
    """A raw JSON number literal, spliced into the text (10**5000 cannot go through
    json.dumps: CPython refuses int->str conversions past 4300 digits)."""

    text: str


number_literals = st.one_of(
    st.sampled_from(
        [
            "1e308",
            "-1e308",
            "1.7976931348623157e308",
            "1e309",
            "-1e309",
            "1E400",
            "-0.0",
            "-0",
            "0e0",
            "0.0",
            "2.5e-324",
            "1e-400",
            "5.0",
            "1.5",
            "-1",
            "9007199254740992.0",
            "9007199254740994.0",
            "9007199254740993",
            "18446744073709551616",
            "1e15",
            "1e16",
            "4294967296",
            "2147483648",
            "-2147483649",
            "1" + "0" * 4299,
            "1" + "0" * 4300,
        ]
    ),
    st.builds(
        lambda sign, digits: sign + "9" * digits, st.sampled_from(["", "-"]), st.integers(1, 6000)
    ),
    st.builds(
        lambda mantissa, exponent: f"{mantissa}e{exponent}",
        st.integers(-9, 9),
        st.integers(-400, 400),
    ),
).map(Literal_)

ids = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(2**53 - 2, 2**64),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**60), 2**60).map(float),
    st.sampled_from([-0.0, 0.0, 1e308, 2.0**53, 2.0**53 + 2, -(2.0**53)]),
    texts,
    long_texts,
    st.lists(json_scalars, max_size=2),
    st.dictionaries(texts, json_scalars, max_size=2),
    number_literals,
)


# server.drain is never sent at random: a drain that starts refuses every later spawn of the
# server under fuzz (and ends a `serve` subprocess once its sessions are gone), by design.
# Its params go through the deterministic sweep below; its behaviour: tests/test_ops.py.
FUZZED_METHODS = [name for name in METHOD_NAMES if name != "server.drain"]
BAD_METHODS = [
    "pty.nope",
    "",
    "PTY.SPAWN",
    "pty.spawn ",
    "pty.",
    "$/cancel",
    "server.info\x00",
    "__init__",
    "dispatch",
    "rpc.discover",
]


SANE: dict[str, st.SearchStrategy[Any]] = {
    "owner": st.sampled_from([FUZZ_OWNER, FUZZ_OWNER, FUZZ_OWNER, *OTHER_OWNERS]),
    "command": st.sampled_from(["cat", "true", "true", "sh", "no-such-command"]),
    "timeout_ms": st.integers(1, 300),
    "idle_ms": st.integers(1, 300),
    "timeout": st.floats(0.05, 5),
    "rows": st.integers(1, 300),
    "cols": st.integers(1, 300),
    "offset": st.integers(0, 50),
    "limit": st.integers(1, 50),
    "workdir": st.sampled_from([".", "sub", "/", "nonexistent"]),
    "pattern": st.sampled_from(["x", "^hi", "(", ".*", "a|b", "[[:alpha:]]+"]),
    "data": st.sampled_from(["hi\n", "\\x03", "\\e[A", "\\xff", "\x04", "line\r\n", "\x1a"])
    | st.text(max_size=20),
    "description": st.sampled_from(["d", "fuzz", " "]) | st.text(min_size=1, max_size=20),
    "tail": st.integers(1, 50),
    "shell": st.sampled_from(["bash", "bash", "zsh", "sh", "/bin/bash"]),
    "reader": st.sampled_from(["r1", "r2", "connection-x"]),
    "signal": st.sampled_from(["INT", "int", "SIGTERM", "HUP", "WINCH", "CONT", "USR1", "NOPE"]),
}
WILD: dict[str, st.SearchStrategy[Any]] = {
    "owner": st.sampled_from([FUZZ_OWNER, *OTHER_OWNERS]) | strings,
    "command": st.sampled_from(["cat", "true", "sh", "/bin/cat", "no-such-command"]) | strings,
    "timeout_ms": st.integers(1, 300) | st.integers(),
    "idle_ms": st.integers(1, 300) | st.integers(),
    "timeout": st.floats(0.05, 5) | st.floats(allow_nan=False, allow_infinity=False),
    "rows": st.integers(1, 300) | st.integers(),
    "cols": st.integers(1, 300) | st.integers(),
    "workdir": st.sampled_from([".", "sub", "/", "/tmp", "..", "/nonexistent"]) | strings,
    "pattern": st.sampled_from(["x", "(", "a{1000000}", "^$", "\\", ".*"]) | strings,
    "data": st.sampled_from(["hi\n", "\\x03", "\\e[A", "\\xff", "\\u12", "\x04"]) | strings,
    "tail": st.integers(1, 50) | st.integers(),
    "shell": st.sampled_from(["bash", "zsh", "sh", "fish", "/bin/bash", ""]) | strings,
    "signal": st.sampled_from(["KILL", "STOP", "9", "SIG", ""]) | strings,
}
# A command's number (`pty.read`'s `command`), as opposed to a command line.
COMMAND_NUMBERS = st.integers(1, 4)
ENV_NAMES = st.sampled_from(["A", "PATH", "HOME", "TERM", "LD_PRELOAD", "TRIO_PTY_TOKEN"])


@attrs.frozen
class Vocabulary:
    """Session ids the fuzz may name: `sane` mostly real ones, `wild` anything."""

    sane: st.SearchStrategy[Any]
    wild: st.SearchStrategy[Any]


def typed_value(tp: Any, name: str, vocab: Vocabulary, *, sane: bool) -> st.SearchStrategy[Any]:
    """Values of the field's own JSON type: in range when `sane`, anything of it otherwise."""
    special = SANE if sane else WILD
    scalar = (str, int, float, str | None, int | None, float | None)
    if name == "id" and tp in scalar:
        return vocab.sane if sane else vocab.wild
    if name == "command" and tp == int | None:
        return st.none() | (COMMAND_NUMBERS if sane else COMMAND_NUMBERS | st.integers())
    if typing.get_origin(tp) is typing.Literal:
        values = st.sampled_from(typing.get_args(tp))
        return values if sane else values | strings
    if name in special and tp in scalar:
        return special[name]
    if is_union(tp):
        members = [m for m in typing.get_args(tp) if m is not type(None)]
        none = st.none() if type(None) in typing.get_args(tp) else st.nothing()
        return none | st.one_of(*(typed_value(m, name, vocab, sane=sane) for m in members))
    if tp is str:
        return st.text(max_size=12) if sane else strings
    if tp is bool:
        return st.booleans()
    if tp is int:
        if sane:
            return st.integers(0, 300)
        return st.integers(-5, 300) | st.integers() | number_literals
    if tp is float:
        if sane:
            return st.floats(0, 10)
        return st.floats(allow_nan=False, allow_infinity=False) | st.integers() | number_literals
    origin = typing.get_origin(tp)
    if origin is list:
        [element] = typing.get_args(tp)
        return st.lists(typed_value(element, name, vocab, sane=sane), max_size=2 if sane else 3)
    if origin is dict:
        _, value = typing.get_args(tp)
        names = ENV_NAMES if sane else ENV_NAMES | texts
        return st.dictionaries(names, typed_value(value, name, vocab, sane=sane), max_size=3)
    if attrs.has(tp):
        hints = typing.get_type_hints(tp)
        optional = {
            f.name: typed_value(hints[f.name], f.name, vocab, sane=sane) for f in attrs.fields(tp)
        }
        return st.fixed_dictionaries({}, optional=optional)
    raise AssertionError(f"no strategy for {tp!r}")  # pragma: no cover - a new param type


def field_value(tp: Any, name: str, vocab: Vocabulary) -> st.SearchStrategy[Any]:
    """Mostly a value of the right type, sometimes any JSON value or number literal."""
    return st.one_of(
        typed_value(tp, name, vocab, sane=True),
        typed_value(tp, name, vocab, sane=True),
        typed_value(tp, name, vocab, sane=False),
        typed_value(tp, name, vocab, sane=False),
        json_values,
        number_literals,
    )


def render(message: Any, *, ensure_ascii: bool, indent: int | None) -> str:
    """json.dumps with `Literal_` values spliced in as raw number text."""
    spliced: dict[str, str] = {}

    def swap(value: Any) -> Any:
        if isinstance(value, Literal_):
            marker = f"@@literal{len(spliced)}@@"
            spliced[f'"{marker}"'] = value.text
            return marker
        if isinstance(value, dict):
            return {name: swap(item) for name, item in value.items()}
        if isinstance(value, list):
            return [swap(item) for item in value]
        return value

    text = json.dumps(swap(message), ensure_ascii=ensure_ascii, indent=indent)
    for marker, literal in spliced.items():
        text = text.replace(marker, literal, 1)
    return text


def _surrogates(value: Any) -> bool:
    if isinstance(value, Literal_):
        return False
    return has_lone_surrogate(value)


# Ids a client would use (and null): most requests carry one of these.
plain_ids = st.one_of(
    st.integers(0, 10**6), st.text(max_size=8), st.integers(0, 10**6).map(float), st.none()
)


@st.composite
def valid_requests(draw: st.DrawFn, vocab: Vocabulary, used_ids: list[Any]) -> dict[str, Any]:
    """A request a client could mean: right envelope, every param of its type, mostly in
    range (so the methods run: spawn `cat`/`true`, read, write, attach, kill...)."""
    method = draw(st.sampled_from(FUZZED_METHODS))
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if draw(st.integers(0, 9)) > 0:
        message["id"] = draw(plain_ids)
        used_ids.append(message["id"])
    params: dict[str, Any] = {}
    cls = CancelParams if method == CANCEL else METHODS[method].params
    for field in attrs.fields(cls):
        # Defaults are left out half the time; the owner less often, so that more requests
        # reach the batch's own sessions.
        skip = draw(st.integers(0, 9)) < (2 if field.name == "owner" else 5)
        if field.default is not attrs.NOTHING and skip:
            continue
        if method == CANCEL and used_ids:
            params["id"] = draw(st.sampled_from(used_ids).filter(lambda v: v is not None))
            continue
        tp = params_of(method)[field.name]
        params[field.name] = draw(typed_value(tp, field.name, vocab, sane=True))
    empty_params = draw(st.booleans())
    if params or empty_params:
        message["params"] = params
    return message


@st.composite
def envelopes(draw: st.DrawFn, vocab: Vocabulary, used_ids: list[Any]) -> dict[str, Any]:
    """A request-shaped object: every member mostly right, each sometimes wrong."""
    message: dict[str, Any] = {}
    version = draw(st.sampled_from(["2.0"] * 12 + ["1.0", "2", 2.0, 2, None, "", "2.0 ", "omit"]))
    if version != "omit":
        message["jsonrpc"] = version
    method = draw(
        st.one_of(
            st.sampled_from(FUZZED_METHODS),
            st.sampled_from(FUZZED_METHODS),
            st.sampled_from(BAD_METHODS),
            json_values.filter(lambda v: not isinstance(v, str)),
        )
    )
    message["method"] = method
    shape = draw(st.sampled_from(["id"] * 6 + ["notification"]))
    if shape == "id":
        if used_ids and draw(st.integers(0, 9)) == 0:
            message["id"] = draw(st.sampled_from(used_ids))  # the same id twice in flight
        else:
            message["id"] = draw(plain_ids | ids)
        used_ids.append(message["id"])
    params_shape = draw(st.sampled_from(["fields"] * 12 + ["omit", "array", "scalar"]))
    if params_shape == "fields" and isinstance(method, str) and method in METHOD_NAMES:
        fields = params_of(method)
        params: dict[str, Any] = {}
        for name, tp in fields.items():
            reuse = draw(st.booleans())
            if name == "id" and method == CANCEL and used_ids and reuse:
                params["id"] = draw(st.sampled_from(used_ids))
                continue
            if draw(st.integers(0, 3)) > 0:
                params[name] = draw(field_value(tp, name, vocab))
        if draw(st.integers(0, 9)) == 0:
            params[draw(texts)] = draw(json_values)  # an unknown field
        message["params"] = params
    elif params_shape == "fields":
        message["params"] = draw(st.dictionaries(texts, json_values, max_size=3))
    elif params_shape == "array":
        message["params"] = draw(st.lists(json_values, max_size=3))
    elif params_shape == "scalar":
        message["params"] = draw(json_scalars)
    if draw(st.integers(0, 14)) == 0:
        message[draw(st.sampled_from(["result", "error", "extra", "Id", "params2"]))] = draw(
            json_values
        )
    return message


@st.composite
def serialized(draw: st.DrawFn, message: Any) -> str:
    ascii_only = draw(st.booleans()) or _surrogates(message)
    text = render(message, ensure_ascii=ascii_only, indent=draw(st.sampled_from([None, None, 1])))
    if isinstance(message, dict) and draw(st.integers(0, 14)) == 0:
        # A repeated member name, spliced in front of the others.
        name = draw(st.sampled_from(["id", "method", "jsonrpc", "params", "x"]))
        member = json.dumps(name) + ":" + render(draw(json_scalars), ensure_ascii=True, indent=None)
        text = "{" + member + ("," if len(message) else "") + text.lstrip()[1:]
    return text


def deep_frame(depth: int, kind: str, place: str, unique: str) -> Frame:
    """Nesting near and past the parser's recursion limit, with the answer the docs give
    whichever way the server's own stack depth decides the parse."""
    opener, leaf, closer = ("[", "", "]") if kind == "array" else ('{"a":', "0", "}")
    deep = opener * depth + leaf + closer * depth
    either_null = Expect(frozenset({NULL}), frozenset({INVALID_REQUEST, PARSE_ERROR}))
    if place == "whole":
        return Frame(deep, f"deep {kind} x{depth} as the message", expect=either_null)
    if place == "id":
        text = '{"jsonrpc":"2.0","method":"server.info","id":' + deep + "}"
        return Frame(text, f"deep {kind} x{depth} as the id", expect=either_null)
    key = key_of(unique)
    if place == "member":
        text = '{"jsonrpc":"2.0","id":' + json.dumps(unique) + ',"method":"pty.list","x":' + deep
        expect = Expect(frozenset({key, NULL}), frozenset({INVALID_REQUEST, PARSE_ERROR}))
        return Frame(text + "}", f"deep {kind} x{depth} as an unknown member", expect=expect)
    param = {"args": "pty.spawn", "env": "pty.spawn", "ready": "pty.spawn", "wait": "pty.read"}
    method = param[place]
    base = {"pty.spawn": '"command":"true","description":"d",', "pty.read": '"id":"x",'}[method]
    text = (
        '{"jsonrpc":"2.0","id":'
        + json.dumps(unique)
        + ',"method":"'
        + method
        + '","params":{'
        + base
        + json.dumps(place)
        + ":"
        + deep
        + "}}"
    )
    expect = Expect(frozenset({key, NULL}), frozenset({INVALID_PARAMS, PARSE_ERROR}))
    return Frame(text, f"deep {kind} x{depth} in params.{place}", expect=expect)


@attrs.frozen
class FrameOptions:
    cuts: tuple[float, ...]  # fragment the message at these fractions of its length
    ping: bytes | None  # a ping to interleave with its fragments
    binary: bool  # send a text message's bytes as a binary frame


frame_options = st.builds(
    FrameOptions,
    cuts=st.lists(st.floats(0, 1), max_size=3).map(tuple) | st.just(()),
    ping=st.none() | st.none() | st.binary(max_size=125),
    binary=st.integers(0, 7).map(lambda n: n == 0),
)


@st.composite
def frames(draw: st.DrawFn, vocab: Vocabulary, used_ids: list[Any], serial: Iterable[int]) -> Frame:
    kind = draw(
        st.sampled_from(
            ["valid"] * 8
            + ["envelope"] * 8
            + [
                "json",
                "json",
                "truncated",
                "truncated",
                "bytes",
                "deep",
                "wrong type",
                "wrong type",
            ]
        )
    )
    options = draw(frame_options)
    frame: Frame
    if kind == "valid":
        message = draw(valid_requests(vocab, used_ids))
        frame = Frame(draw(serialized(message)), "valid request")
    elif kind == "envelope":
        message = draw(envelopes(vocab, used_ids))
        frame = Frame(draw(serialized(message)), "request-like")
    elif kind == "json":
        frame = Frame(draw(serialized(draw(json_values))), "any JSON value")
    elif kind == "truncated":
        text = draw(serialized(draw(valid_requests(vocab, used_ids) | envelopes(vocab, used_ids))))
        if draw(st.booleans()):
            data = text.encode("utf-8")
            cut = draw(st.integers(0, max(0, len(data) - 1)))
            assume(cut <= MAX_MESSAGE)
            return Frame(data[:cut], f"request cut at byte {cut} (binary)", options.cuts)
        cut = draw(st.integers(0, max(0, len(text) - 1)))
        frame = Frame(text[:cut], f"request cut at character {cut}")
    elif kind == "bytes":
        data = draw(
            st.binary(max_size=64)
            | st.sampled_from(
                [
                    b"\xef\xbb\xbf{}",
                    b"\xc0\xaf",
                    b"\xed\xa0\x80",
                    b"\xf4\x90\x80\x80",
                    b"\x00",
                    '{"jsonrpc":"2.0","id":1,"method":"pty.list"}'.encode("utf-16"),
                ]
            )
        )
        return Frame(data, "random bytes (binary)", options.cuts, options.ping)
    elif kind == "deep":
        depth = draw(st.integers(300, 1200) | st.integers(5_000, 40_000))
        place = draw(st.sampled_from(["whole", "id", "member", "args", "env", "ready", "wait"]))
        unique = f"deep-{next(iter(serial))}"
        frame = deep_frame(depth, draw(st.sampled_from(["array", "object"])), place, unique)
    else:
        method = draw(st.sampled_from([name for name in FUZZED_METHODS if name != CANCEL]))
        params = dict(BASE_PARAMS[method])
        fields = params_of(method)
        if fields:
            name = draw(st.sampled_from(sorted(fields)))
            params[name] = draw(json_values | number_literals)
        message = {
            "jsonrpc": "2.0",
            "id": draw(plain_ids | ids),
            "method": method,
            "params": params,
        }
        used_ids.append(message["id"])
        frame = Frame(draw(serialized(message)), "one param of any type")
    if options.binary:
        frame = attrs.evolve(frame, payload=frame.data, label=frame.label + " (binary)")
    assume(len(frame.data) <= MAX_MESSAGE)  # oversized messages are a closing tail
    return attrs.evolve(frame, cuts=options.cuts, ping=options.ping)


def _unmasked(opcode: int, payload: bytes) -> bytes:
    return bytes([0x80 | opcode, len(payload)]) + payload


_REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"pty.list"}'
# Breaches of RFC 6455 itself: the WebSocket layer fails the connection. docs/protocol.md
# does not list these; trio-websocket drops the TCP connection without a close frame.
VIOLATIONS: dict[str, bytes] = {
    "reserved opcode 0x3": client_frame(0x3, b"x"),
    "reserved opcode 0xB": client_frame(0xB, b"x"),
    "RSV1 without an extension": client_frame(OP_TEXT, _REQUEST, rsv=4),
    "RSV3": client_frame(OP_TEXT, _REQUEST, rsv=1),
    "unmasked client frame": _unmasked(OP_TEXT, _REQUEST),
    "ping over 125 bytes": client_frame(OP_PING, b"x" * 126),
    "fragmented ping": client_frame(OP_PING, b"x", fin=False),
    "continuation without a start": client_frame(OP_CONTINUATION, _REQUEST),
    "new message inside a fragmented one": (
        client_frame(OP_TEXT, b"[", fin=False) + client_frame(OP_TEXT, _REQUEST)
    ),
    "close frame of 1 byte": client_frame(OP_CLOSE, b"\x03"),
    "close code 999": client_frame(OP_CLOSE, (999).to_bytes(2, "big")),
    "close code 1005 on the wire": client_frame(OP_CLOSE, (1005).to_bytes(2, "big")),
    "close reason not UTF-8": client_frame(OP_CLOSE, (1000).to_bytes(2, "big") + b"\xff"),
    "length not minimally encoded": (
        bytes([0x81, 0x80 | 126]) + len(_REQUEST).to_bytes(2, "big") + b"\0\0\0\0" + _REQUEST
    ),
}

# How a batch ends: stay open; a frame that must close the connection (1007/1009); the client
# leaving abruptly with its requests in flight; a closing handshake from the client; or a
# frame that breaks the WebSocket protocol itself.
tails = st.one_of(
    st.just(("stay", None)),
    st.just(("stay", None)),
    st.just(("stay", None)),
    st.tuples(
        st.just("utf8"),
        st.one_of(
            st.binary(max_size=40).map(lambda b: b + b"\xff" + b),
            st.sampled_from(
                [
                    b"\xc0\xaf",
                    b"\xed\xa0\x80",
                    b'{"a":"\xed\xb0\x80"}',
                    b"\xe2\x82",
                    b"\xf8\x88\x80\x80\x80",
                    '{"x":"\ud800"}'.encode("utf-8", "surrogatepass"),
                ]
            ),
        ),
    ),
    st.tuples(st.just("oversize"), st.sampled_from(["ascii", "wide", "binary", "fragments"])),
    st.tuples(st.just("abandon"), st.sampled_from(["at once", "partial frame", "mid message"])),
    st.tuples(st.just("client close"), st.sampled_from([1000, 1001, 3000, 4999])),
    st.tuples(st.just("violation"), st.sampled_from(sorted(VIOLATIONS))),
)


_serial = itertools.count()  # unique ids for frames whose answer has two possible ids


@st.composite
def batches(draw: st.DrawFn, vocab: Vocabulary) -> Batch:
    used_ids: list[Any] = []
    count = draw(st.integers(1, 24))
    drawn = tuple(draw(frames(vocab, used_ids, _serial)) for _ in range(count))
    return Batch(drawn, draw(tails))
