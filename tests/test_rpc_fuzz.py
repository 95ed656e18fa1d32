"""Protocol fuzzing against a running server, over real WebSocket connections on loopback.

`tests/test_wire.py` proves the sans-io parser's properties; this file proves that the
*running* server keeps the documented promises whatever arrives on the wire:

- every request with a valid id gets exactly one response carrying that id; notifications,
  responses and frames without a usable id get an answer only as docs/protocol.md says (an
  oracle written from the documentation, independent of `wire.parse_message`, predicts
  each frame's answer: which id, which codes), and never an internal error (-32603);
- a connection ends only by a documented close code, and only after a frame of the matching
  class (1009 after an oversized message, 1007 or a dropped TCP connection after a text frame
  that is not UTF-8; a dropped connection after a breach of RFC 6455 itself, which
  docs/protocol.md does not list): frames of every other class leave it open, whether whole,
  fragmented at any byte or interleaved with pings (each answered by its pong);
- another client's `cat` session answers a write/read round trip between fuzz batches and at
  the end;
- once the fuzz clients are gone (cleanly or abruptly, with requests in flight), the server's
  trio tasks are back at their baseline (in-process server), and a `trio-pty serve`
  subprocess is alive, serves, exits 0 on SIGTERM and leaves no process behind.

Hypothesis drives the fuzz from a worker thread (`trio.from_thread.run`), so one server and
one guard session live through all the examples of a test, and each example is a batch of
frames sent on one connection (reused while it stays open). The server only allows `cat`,
`true` and bash to run (a RulesAuthorizer), and bash only to be sent `true` or `cat` (so
`pty.run`, `pty.commands`, reads of a command and prompt waits meet a real shell, and nothing
else runs), with small waits and grace periods, so nothing the fuzz sends can start
anything heavy or wait long. Each batch gets its own owner, `cat` and shell session (named
through placeholders in the generated frames), removed after it. HYPOTHESIS_PROFILE=long runs
~30x more examples (about 5 minutes). Deterministic sweeps complete the picture: every param
of every method with every JSON type it refuses, and the message size bound byte-exact.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import math
import os
import time
import tomllib
import types
import typing
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, Literal, TypeAlias

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import trio_pty
from trio_pty import Limits
from trio_pty.client.client import TrioPtyClient, connect
from trio_pty.manager import Manager
from trio_pty.model import Wait
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.rpc.config import parse_config
from trio_pty.server.server import RpcServer, ServerOptions, open_server
from trio_pty.wire import (
    METHODS,
    CancelParams,
    KillParams,
    ListParams,
    OwnerDeleteParams,
    ReadParams,
    ServerInfoParams,
    SpawnParams,
    SpawnShellParams,
    WriteParams,
)

from . import leaks
from .helpers import alive
from .rpc_support import (
    RawSocket,
    client_frame,
    raw_connect,
    server_processes,
    start_server,
)

# --------------------------------------------------------------------------------------------
# The server under fuzz: small bounds, and nothing but `cat` and `true` may run.

TOKEN = "fuzz-token-" + "x" * 20
MAX_MESSAGE = 256 * 1024
# Placeholders, replaced before each batch is sent by the owner of that batch and its live
# `cat` session (both ASCII, so the replacement never changes how a frame parses).
FUZZ_OWNER = "@@owner@@"
FUZZ_SESSION = "@@session@@"
FUZZ_SHELL = "@@shell@@"
OTHER_OWNERS = ("default", "fuzz-2")  # shared by all batches; their sessions are killed after each

FUZZ_LIMITS = Limits(
    terminate_grace=0.2,
    close_timeout=5.0,
    io_timeout=3.0,
    notification_timeout=0.5,
    spawn_timeout=5.0,
    default_wait_ms=150,
    max_wait_ms=300,
    max_sessions=12,
    max_sessions_per_owner=4,
    max_write_bytes=8192,
    max_message_bytes=MAX_MESSAGE,
)
RULES: dict[str, Any] = {
    "*": "allow",
    "external_directory": "deny",
    "shell": {"*": "deny", "cat": "allow", "true": "allow", "bash": "allow"},
    "write": {
        "*": "allow",
        "bash <stdin> *": "deny",
        "bash <stdin> true": "allow",
        "bash <stdin> cat": "allow",
    },
}
# The shells' startup file: interactive bash ignores SIGTERM, which would cost each batch a
# grace period; with a trap on it, it ends at once.
BASHRC = "trap exit TERM\n"


def limits_toml(limits: Limits) -> str:
    """The `[limits]` table of a config file for `limits` (the fields not at their default)."""
    default = Limits()
    lines = [
        f"{field.name} = {json.dumps(getattr(limits, field.name))}"
        for field in attrs.fields(Limits)
        if getattr(limits, field.name) != getattr(default, field.name)
    ]
    return "\n".join(["[limits]", *lines])


SERVER_CONFIG = (
    limits_toml(FUZZ_LIMITS)
    + """

[permissions]
"*" = "allow"
external_directory = "deny"

[permissions.shell]
"*" = "deny"
"cat" = "allow"
"true" = "allow"
"bash" = "allow"

[permissions.write]
"*" = "allow"
"bash <stdin> *" = "deny"
"bash <stdin> true" = "allow"
"bash <stdin> cat" = "allow"
"""
)

OPEN_TIMEOUT = 10.0
SETTLE_TIMEOUT = 15.0  # every expected response of one batch (waits are at most 0.3 s)
CLOSE_TIMEOUT = 10.0
GUARD_TIMEOUT = 10.0


def examples(fraction: float) -> int:
    """A share of the profile's example count ("ci": 60, "long": 2000)."""
    return max(3, int(settings().max_examples * fraction))


# --------------------------------------------------------------------------------------------
# WebSocket frames (client side: masked), built by hand so anything can be sent.

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def fragments(payload: bytes, cuts: Sequence[float]) -> list[bytes]:
    """`payload` split at the given fractions of its length (empty pieces are legal)."""
    points = sorted(int(cut * len(payload)) for cut in cuts)
    pieces, start = [], 0
    for point in points:
        pieces.append(payload[start:point])
        start = point
    pieces.append(payload[start:])
    return pieces


def message_bytes(opcode: int, payload: bytes, cuts: Sequence[float], ping: bytes | None) -> bytes:
    """A whole message as one or more frames, a ping interleaved between fragments."""
    pieces = fragments(payload, cuts)
    out = b""
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        out += client_frame(opcode if index == 0 else OP_CONTINUATION, piece, fin=last)
        if ping is not None and not last and index == 0:
            out += client_frame(OP_PING, ping)
    if ping is not None and len(pieces) == 1:
        out += client_frame(OP_PING, ping)
    return out


# --------------------------------------------------------------------------------------------
# The oracle: what docs/protocol.md says the server answers to one frame.

Key: TypeAlias = tuple[str, str]  # an id as echoed: JSON type and exact value
Outcome: TypeAlias = int | Literal["result"]

MEMBERS = frozenset({"jsonrpc", "method", "params", "id"})
CANCEL = "$/cancelRequest"
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
INTERNAL_ERROR, CANCELLED = -32603, -32800
APPLICATION_CODES = frozenset(range(-32099, -31999))
NOTIFICATIONS = frozenset({"pty.output", "pty.exited"})


def key_of(value: Any) -> Key:
    return (type(value).__name__, repr(value))


NULL = key_of(None)


@attrs.frozen
class Expect:
    """The answer one frame may get: a response carrying one of `keys` (none at all when
    `keys` is empty) with an outcome in `outcomes` (None: anything but an internal error)."""

    keys: frozenset[Key]
    outcomes: frozenset[Outcome] | None = None
    canonical: tuple[str, Any] | None = None  # the id as the server's in-flight table sees it
    cancels: bool = False  # a $/cancelRequest: other requests may end with -32800


NO_RESPONSE = Expect(frozenset())


def one(key: Key, *codes: Outcome) -> Expect:
    return Expect(frozenset({key}), frozenset(codes))


PARSE_FAILURE = one(NULL, PARSE_ERROR)


def _strict_loads(text: str) -> tuple[Any, bool, frozenset[str]]:
    """JSON as docs/protocol.md reads it: no NaN/Infinity, finite floats; also whether any
    member name repeats, and which ones repeat in the outermost object (its hook runs last)."""
    state: dict[str, Any] = {"dup": False, "top": frozenset()}

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        counts = Counter(name for name, _ in pairs)
        repeated = frozenset(name for name, count in counts.items() if count > 1)
        state["top"] = repeated
        state["dup"] = state["dup"] or bool(repeated)
        return dict(pairs)

    def no_constants(name: str) -> Any:
        raise ValueError(name)

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value

    value = json.loads(
        text, object_pairs_hook=pairs_hook, parse_constant=no_constants, parse_float=finite
    )
    return value, state["dup"], state["top"]


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not _unicode(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
            if not all(_unicode(name) for name in item):
                return True
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _valid_id(value: Any) -> bool:
    """docs/protocol.md: strings or integers (integral floats echoed as floats, refused past
    2**53 where a float no longer holds the integer), or null."""
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return _unicode(value)
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer() and abs(value) <= 2.0**53
    return False


def _canonical(value: Any) -> tuple[str, Any] | None:
    """The id as a Python dict key (1, 1.0 and -0.0 == 0 collide), None for null."""
    if value is None:
        return None
    if isinstance(value, str):
        return ("s", value)
    return ("n", int(value))


def oracle(payload: str | bytes) -> Expect:
    """The documented answer to one frame (text frames as `str`, binary frames as `bytes`)."""
    if isinstance(payload, bytes):
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            return PARSE_FAILURE  # binary frames: "not UTF-8 are a parse error (-32700)"
    else:
        text = payload
    if text.startswith("\ufeff"):
        return PARSE_FAILURE
    try:
        value, duplicate, top_duplicates = _strict_loads(text)
    except RecursionError:  # pragma: no cover - generators keep the oracle's frames shallow
        raise AssertionError("oracle frame nested too deep; give it an explicit Expect") from None
    except ValueError:  # not JSON, NaN, an overflowing float, an int past 4300 digits
        return PARSE_FAILURE
    if not isinstance(value, dict):  # batches too: "refused as a whole with one -32600"
        return one(NULL, INVALID_REQUEST)
    if "method" not in value and ("result" in value or "error" in value):
        return NO_RESPONSE  # a response-shaped frame is never answered
    has_id = "id" in value
    id_ok = has_id and _valid_id(value["id"]) and "id" not in top_duplicates
    key = key_of(value["id"]) if id_ok else NULL
    invalid = one(key, INVALID_REQUEST)
    if duplicate or _has_lone_surrogate(value):
        return invalid
    if has_id and not id_ok:
        return one(NULL, INVALID_REQUEST)
    if set(value) - MEMBERS:
        return invalid
    version = value.get("jsonrpc")
    if not isinstance(version, str) or version != "2.0":
        return invalid
    method = value.get("method")
    if not isinstance(method, str):
        return invalid
    params = value.get("params", {})
    if isinstance(params, list):  # by-position: -32602, but notifications are never answered
        return one(key, INVALID_PARAMS) if has_id else NO_RESPONSE
    if not isinstance(params, dict):
        return invalid
    cancels = method == CANCEL
    if not has_id:
        return attrs.evolve(NO_RESPONSE, cancels=cancels)
    canonical = _canonical(value["id"])
    if cancels:
        outcomes: frozenset[Outcome] | None = frozenset({"result", INVALID_PARAMS})
    elif method not in METHODS:
        outcomes = frozenset({METHOD_NOT_FOUND})
    else:
        outcomes = None
    return Expect(frozenset({key}), outcomes, canonical, cancels)


# --------------------------------------------------------------------------------------------
# What the fuzz sends


@attrs.frozen(repr=False)
class Frame:
    """One message to send. `expect` overrides the oracle (deep nesting, where the answer
    depends on the server's own recursion limit)."""

    payload: str | bytes  # str: a text frame; bytes: a binary frame
    label: str
    cuts: tuple[float, ...] = ()
    ping: bytes | None = None
    expect: Expect | None = None

    @property
    def opcode(self) -> int:
        return OP_TEXT if isinstance(self.payload, str) else OP_BINARY

    @property
    def data(self) -> bytes:
        return self.payload.encode("utf-8") if isinstance(self.payload, str) else self.payload

    def describe(self) -> str:
        return f"{self.label} ({len(self.data)} bytes): {self.payload[:300]!r}"

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        extra = f", cuts={self.cuts}" if self.cuts else ""
        extra += f", ping={self.ping!r}" if self.ping is not None else ""
        return f"<{self.describe()}{extra}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


Tail: TypeAlias = tuple[str, Any]  # how a batch ends: ("stay", None), ("utf8", bytes), ...


@attrs.frozen
class Batch:
    frames: tuple[Frame, ...]
    tail: Tail = ("stay", None)


# --------------------------------------------------------------------------------------------
# One fuzz connection: raw frames out, responses collected by id.


class ProtocolViolation(AssertionError):
    pass


@attrs.define(eq=False)
class Ledger:
    """Expected and received answers of the frames sent since the last settled batch."""

    definite: Counter[Key] = attrs.Factory(Counter)
    flexible: list[frozenset[Key]] = attrs.Factory(list)
    allowed: dict[Key, set[Outcome] | None] = attrs.Factory(dict)
    labels: dict[Key, list[str]] = attrs.Factory(dict)
    received: Counter[Key] = attrs.Factory(Counter)
    responses: list[tuple[Key, Outcome, dict[str, Any]]] = attrs.Factory(list)

    def expect(self, expect: Expect, label: str) -> None:
        if not expect.keys:
            return
        if len(expect.keys) == 1:
            [key] = expect.keys
            self.definite[key] += 1
        else:
            self.flexible.append(expect.keys)
        for key in expect.keys:
            self.labels.setdefault(key, []).append(label)
            if expect.outcomes is None or self.allowed.get(key, set()) is None:
                self.allowed[key] = None
            else:
                current = self.allowed.setdefault(key, set())
                assert current is not None
                current.update(expect.outcomes)

    def allow(self, key: Key, outcome: Outcome) -> None:
        current = self.allowed.get(key)
        if current is not None:
            current.add(outcome)

    @property
    def expected_total(self) -> int:
        return sum(self.definite.values()) + len(self.flexible)

    def settled(self) -> bool:
        """True once every expected response is in; raises when the answers cannot be
        those expected (an extra response, an id nobody sent, one frame answered twice)."""
        total = sum(self.received.values())
        if total < self.expected_total:
            return False
        if total > self.expected_total:
            raise ProtocolViolation(f"more responses than requests: {self.describe()}")
        for key, count in self.definite.items():
            if self.received[key] < count:
                raise ProtocolViolation(f"missing responses for {key}: {self.describe()}")
        spare: list[Key] = []
        for key, count in self.received.items():
            spare += [key] * (count - self.definite[key])
        if not _perfect_matching(spare, self.flexible):
            raise ProtocolViolation(f"responses carry the wrong ids: {self.describe()}")
        return True

    def describe(self) -> str:
        expected = Counter(self.definite)
        for keys in self.flexible:
            expected.update(keys)
        missing = {
            k: self.labels.get(k, [])[:3] for k in expected if self.received[k] < self.definite[k]
        }
        extra = {k: n for k, n in self.received.items() if n > expected[k]}
        return (
            f"expected {self.expected_total}, received {sum(self.received.values())}; "
            f"missing {dict(list(missing.items())[:5])}; unexpected or repeated ids {extra}"
        )

    def check_outcomes(self) -> None:
        for key, outcome, message in self.responses:
            assert outcome != INTERNAL_ERROR, f"internal error: {message}"
            allowed = self.allowed.get(key, set())
            if allowed is not None and outcome not in allowed:
                raise ProtocolViolation(
                    f"response {json.dumps(message)[:500]} has outcome {outcome}, expected one "
                    f"of {sorted(map(str, allowed))} for {self.labels.get(key, [])[:3]}"
                )


def _perfect_matching(units: list[Key], slots: list[frozenset[Key]]) -> bool:
    """Whether each response in `units` can be the answer of a distinct `slots` frame."""
    if len(units) != len(slots):
        return False
    owner: dict[int, int] = {}  # slot -> unit

    def augment(unit: int, seen: set[int]) -> bool:
        for slot, keys in enumerate(slots):
            if units[unit] in keys and slot not in seen:
                seen.add(slot)
                if slot not in owner or augment(owner[slot], seen):
                    owner[slot] = unit
                    return True
        return False

    return all(augment(unit, set()) for unit in range(len(units)))


def _outcome(message: dict[str, Any]) -> Outcome:
    """Check a response's shape (JSON-RPC 2.0) and return "result" or its error code."""
    assert message.get("jsonrpc") == "2.0", message
    assert set(message) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}), message
    if "result" in message:
        return "result"
    error = message["error"]
    assert isinstance(error, dict) and set(error) <= {"code", "message", "data"}, message
    assert type(error["code"]) is int and isinstance(error["message"], str), message
    assert isinstance(error.get("data", {}), dict), message
    return int(error["code"])


@attrs.define(eq=False)
class FuzzConnection:
    """A raw WebSocket client: frames out as built, every server frame read by one task."""

    raw: RawSocket
    ledger: Ledger = attrs.Factory(Ledger)
    notifications: Counter[str] = attrs.Factory(Counter)
    pings: list[bytes] = attrs.Factory(list)
    pongs: list[bytes] = attrs.Factory(list)
    problems: list[str] = attrs.Factory(list)
    closed: bool = False
    close_code: int | None = None
    changed: trio.Event = attrs.Factory(trio.Event)
    done: trio.Event = attrs.Factory(trio.Event)

    def _wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def read_loop(self) -> None:
        try:
            while True:
                try:
                    opcode, payload = await self.raw.read_frame()
                except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
                    self.closed, self.close_code = True, None
                    return
                if opcode == OP_CLOSE:
                    self.closed = True
                    self.close_code = int.from_bytes(payload[:2], "big") if payload else 1005
                    return
                if opcode == OP_PONG:
                    self.pongs.append(payload)
                elif opcode == OP_TEXT:
                    self._record(payload)
                else:
                    self.problems.append(f"unexpected server frame: opcode {opcode:#x}")
                self._wake()
        finally:
            self.done.set()
            self._wake()

    def _record(self, payload: bytes) -> None:
        try:
            message = json.loads(payload.decode("utf-8"), parse_constant=_reject)
            if isinstance(message, dict) and "method" in message:
                assert "id" not in message, message
                assert message["method"] in NOTIFICATIONS, message
                assert isinstance(message.get("params"), dict), message
                self.notifications[message["method"]] += 1
                return
            assert isinstance(message, dict), message
            outcome = _outcome(message)
        except (AssertionError, ValueError, KeyError) as exc:
            self.problems.append(f"malformed server frame {payload[:300]!r}: {exc!r}")
            return
        key = key_of(message["id"])
        self.ledger.received[key] += 1
        self.ledger.responses.append((key, outcome, message))

    async def send(self, frame: Frame) -> None:
        if frame.ping is not None:
            self.pings.append(frame.ping)
        await self.raw.stream.send_all(
            message_bytes(frame.opcode, frame.data, frame.cuts, frame.ping)
        )

    async def send_raw(self, data: bytes) -> None:
        await self.raw.stream.send_all(data)

    async def settle(self, context: str) -> list[dict[str, Any]]:
        """Wait (bounded) until every expected response and pong is in, then check them."""
        try:
            with trio.fail_after(SETTLE_TIMEOUT):
                while not (self.ledger.settled() and len(self.pongs) >= len(self.pings)):
                    self._check_problems()
                    if self.closed:
                        raise ProtocolViolation(
                            f"connection closed ({self.close_code}) before the batch was "
                            f"answered: {self.ledger.describe()}"
                        )
                    await self.changed.wait()
        except trio.TooSlowError:
            raise ProtocolViolation(
                f"{context}: responses missing after {SETTLE_TIMEOUT} s: {self.ledger.describe()}"
            ) from None
        self._check_problems()
        self.ledger.check_outcomes()
        assert sorted(self.pongs) == sorted(self.pings), "every ping gets its pong"
        responses = [message for _, _, message in self.ledger.responses]
        self.ledger = Ledger()
        self.pings.clear()
        self.pongs.clear()
        return responses

    async def wait_closed(self) -> int | None:
        with trio.fail_after(CLOSE_TIMEOUT):
            await self.done.wait()
        return self.close_code

    def _check_problems(self) -> None:
        if self.problems:
            raise ProtocolViolation("; ".join(self.problems))

    async def close(self) -> None:
        """The closing handshake, bounded; then drop the socket."""
        try:
            with trio.move_on_after(CLOSE_TIMEOUT):
                if not self.closed:
                    with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await self.send_raw(client_frame(OP_CLOSE, (1000).to_bytes(2, "big")))
                    await self.done.wait()
        finally:
            await trio.aclose_forcefully(self.raw.stream)


def _reject(name: str) -> Any:
    raise ValueError(f"{name} in server output")


@asynccontextmanager
async def fuzz_connection(port: int, nursery: trio.Nursery) -> AsyncIterator[FuzzConnection]:
    with trio.fail_after(OPEN_TIMEOUT):
        raw = await raw_connect(port, headers=[("Authorization", f"Bearer {TOKEN}")])
    if raw.status != 101:
        await raw.stream.aclose()
        raise AssertionError(f"handshake refused: {raw.head!r}")
    conn = FuzzConnection(raw)
    nursery.start_soon(conn.read_loop)
    try:
        yield conn
    finally:
        await conn.close()


# --------------------------------------------------------------------------------------------
# Strategies

FAKE_SESSION = "pty_00000000"

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


def params_of(method: str) -> dict[str, Any]:
    """The method's params class fields and their types (resolved annotations)."""
    if method == CANCEL:
        cls: type[Any] = CancelParams
    else:
        cls = METHODS[method].params
    return dict(typing.get_type_hints(cls))


METHOD_NAMES = [*METHODS, CANCEL]
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


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


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
    if _is_union(tp):
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
    return _has_lone_surrogate(value)


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


# --------------------------------------------------------------------------------------------
# Running a batch


def oversized(how: str) -> bytes:
    """A message just over max_message_bytes, as (possibly several) frames."""
    if how == "ascii":
        return client_frame(OP_TEXT, b"x" * (MAX_MESSAGE + 1))
    if how == "wide":  # fewer characters than the bound, more UTF-8 bytes
        return client_frame(OP_TEXT, ("€" * (MAX_MESSAGE // 3 + 1)).encode())
    if how == "binary":
        return client_frame(OP_BINARY, b"[" * (MAX_MESSAGE + 1))
    half = b" " * (MAX_MESSAGE // 2 + 1)
    return client_frame(OP_TEXT, half, fin=False) + client_frame(OP_CONTINUATION, half)


def bind(frame: Frame, owner: str, session_id: str, shell_id: str) -> Frame:
    """The frame with the batch's owner and sessions in place of the placeholders."""
    places = ((FUZZ_OWNER, owner), (FUZZ_SESSION, session_id), (FUZZ_SHELL, shell_id))
    if isinstance(frame.payload, str):
        text = frame.payload
        for placeholder, value in places:
            text = text.replace(placeholder, value)
        return attrs.evolve(frame, payload=text)
    data = frame.payload
    for placeholder, value in places:
        data = data.replace(placeholder.encode(), value.encode())
    return attrs.evolve(frame, payload=data)


@attrs.define(eq=False)
class FuzzTarget:
    """A server under fuzz, its guard session, and the current fuzz connection."""

    port: int
    nursery: trio.Nursery
    guard: Guard
    admin: TrioPtyClient  # starts and removes each batch's owner and `cat`
    conn: FuzzConnection | None = None
    examples: int = 0
    closes: Counter[str] = attrs.Factory(Counter)
    outcomes: Counter[Outcome] = attrs.Factory(Counter)
    frames_sent: int = 0

    async def connection(self) -> FuzzConnection:
        if self.conn is None or self.conn.closed:
            if self.conn is not None:
                await self.conn.close()
            with trio.fail_after(OPEN_TIMEOUT):
                raw = await raw_connect(self.port, headers=[("Authorization", f"Bearer {TOKEN}")])
            assert raw.status == 101, raw.head
            self.conn = FuzzConnection(raw)
            self.nursery.start_soon(self.conn.read_loop)
        return self.conn

    async def drop(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def run(self, batch: Batch) -> None:
        conn = await self.connection()
        canonical: Counter[tuple[str, Any]] = Counter()
        expectations = []
        for frame in batch.frames:
            expect = frame.expect if frame.expect is not None else oracle(frame.payload)
            expectations.append(expect)
            conn.ledger.expect(expect, frame.describe())
            if expect.canonical is not None:
                canonical[expect.canonical] += 1
        # Documented reactions to other frames of the batch: an id already in flight is
        # refused (-32600), and a $/cancelRequest may cancel a request (-32800).
        cancels = any(expect.cancels for expect in expectations)
        for expect in expectations:
            for key in expect.keys:
                if expect.canonical is not None and canonical[expect.canonical] > 1:
                    conn.ledger.allow(key, INVALID_REQUEST)
                if cancels:
                    conn.ledger.allow(key, CANCELLED)
        mode, detail = batch.tail
        try:
            for frame in batch.frames:
                await conn.send(frame)
                self.frames_sent += 1
            if mode == "abandon":
                if detail == "partial frame":
                    await conn.send_raw(client_frame(OP_TEXT, b'{"jsonrpc":"2.0"' * 50)[:300])
                elif detail == "mid message":
                    await conn.send_raw(client_frame(OP_TEXT, b'{"jsonrpc":', fin=False))
                await self.drop()
                self.closes["abandoned"] += 1
                return
            for response in await conn.settle(f"batch of {len(batch.frames)}"):
                self.outcomes[_outcome(response)] += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ProtocolViolation(
                f"the server dropped the connection (close code {conn.close_code}): {exc!r}"
            ) from None
        if mode == "stay":
            return
        if mode == "client close":
            await conn.send_raw(client_frame(OP_CLOSE, int(detail).to_bytes(2, "big") + b"bye"))
            code = await conn.wait_closed()
            assert code == detail, f"the server answered close {detail} with {code}"
            self.closes["client close"] += 1
            await self.drop()
            return
        # A frame that must end the connection, and only with its documented code.
        # (The server may drop the connection before it has read all of the frame.)
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            if mode == "utf8":
                await conn.send_raw(client_frame(OP_TEXT, detail))
            elif mode == "violation":
                await conn.send_raw(VIOLATIONS[detail])
            else:
                await conn.send_raw(oversized(detail))
        code = await conn.wait_closed()
        allowed = {"utf8": {1007, None}, "violation": {1002, 1007, None}}.get(mode, {1009})
        assert code in allowed, f"{mode} {detail!r}: close code {code}, expected one of {allowed}"
        assert conn.ledger.responses == [], "a closing frame was answered"
        self.closes[f"{mode}: {code}"] += 1
        await self.drop()

    async def example(self, batch: Batch) -> None:
        """One batch, with its own owner, `cat` and shell (removed after it), then the
        guard's round trip."""
        with trio.fail_after(60):
            self.examples += 1
            owner = f"batch-{self.examples}"
            info = await self.admin.request(
                SpawnParams(command="cat", owner=owner, description="fuzz target")
            )
            try:
                shell = await self.admin.request(
                    SpawnShellParams(owner=owner, description="fuzz shell", shell="bash")
                )
                frames = tuple(bind(frame, owner, info.id, shell.id) for frame in batch.frames)
                await self.run(attrs.evolve(batch, frames=frames))
            finally:
                await self.admin.request(OwnerDeleteParams(owner=owner))
                for other in OTHER_OWNERS:
                    for session in (await self.admin.request(ListParams(owner=other))).sessions:
                        await self.admin.request(
                            KillParams(id=session.id, owner=other, cleanup=True)
                        )
            await self.guard.round_trip()


# --------------------------------------------------------------------------------------------
# The guard: another client whose `cat` must keep working whatever the fuzz does.


@attrs.define(eq=False)
class Guard:
    client: TrioPtyClient
    owner: str
    session_id: str
    trips: int = 0

    @classmethod
    async def start(cls, client: TrioPtyClient) -> Guard:
        owner = f"guard-{uuid.uuid4().hex}"
        info = await client.request(SpawnParams(command="cat", owner=owner, description="guard"))
        guard = cls(client, owner, info.id)
        await guard.round_trip()
        return guard

    async def round_trip(self) -> None:
        """Write a fresh line; `cat` must echo it back (tty echo plus cat's copy: 2 lines)."""
        self.trips += 1
        word = f"ping-{self.trips}-{uuid.uuid4().hex[:8]}"
        with trio.fail_after(GUARD_TIMEOUT):
            [before] = (await self.client.request(ListParams(owner=self.owner))).sessions
            assert (before.id, before.status) == (self.session_id, "running")
            start = max(0, before.line_count - 1)
            written = await self.client.request(
                WriteParams(id=self.session_id, data=word + "\n", owner=self.owner)
            )
            assert written.bytes_written == len(word) + 1
            while True:
                page = await self.client.request(
                    ReadParams(
                        id=self.session_id,
                        owner=self.owner,
                        offset=start,
                        pattern=f"^{word}$",
                        wait=Wait(pattern=f"^{word}$", timeout_ms=200),
                    )
                )
                if len(page.lines) >= 2:
                    break
                await trio.sleep(0.01)


# --------------------------------------------------------------------------------------------
# Running hypothesis against a live trio loop


def drive(target: FuzzTarget, strategy: st.SearchStrategy[Batch], max_examples: int) -> None:
    """Run hypothesis in this (worker) thread; each example runs in the trio loop."""

    @settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(strategy)
    def fuzz(batch: Batch) -> None:
        for frame in batch.frames:
            note(frame.describe())  # (hypothesis keeps its notes per thread)
        note(f"then: {batch.tail[0]} {batch.tail[1]!r}"[:300])
        trio.from_thread.run(target.example, batch)

    fuzz()


async def fuzz_through(target: FuzzTarget, count: int) -> None:
    """`count` examples through `target`, its clients dropped after, then one round trip of
    the guard: the bystander still works."""
    try:
        await trio.to_thread.run_sync(drive, target, batches(vocabulary()), count)
    finally:
        await target.drop()
    await target.guard.round_trip()


@asynccontextmanager
async def in_process_server(root: Path) -> AsyncIterator[tuple[Manager, RpcServer]]:
    (root / "sub").mkdir(exist_ok=True)
    environ = {**os.environ, "HOME": str(fuzz_home(root))}
    async with (
        trio_pty.open_manager(
            FUZZ_LIMITS, root=str(root), authorizer=RulesAuthorizer(RULES), environ=environ
        ) as manager,
        open_server(manager, ServerOptions(token=TOKEN, port=0)) as server,
    ):
        yield manager, server


def fuzz_home(root: Path) -> Path:
    """The HOME of the fuzzed server's sessions, with BASHRC."""
    home = root / "home"
    home.mkdir(exist_ok=True)
    (home / ".bashrc").write_text(BASHRC)
    return home


def vocabulary() -> Vocabulary:
    known = st.sampled_from([FUZZ_SESSION, FUZZ_SESSION, FUZZ_SHELL, FUZZ_SHELL, FAKE_SESSION])
    return Vocabulary(sane=known, wild=st.one_of(known, strings))


def server_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith("trio_pty")
    ]


async def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    with trio.move_on_after(timeout):
        while not condition():  # noqa: ASYNC110 - an observation, nothing to wait on
            await trio.sleep(0.01)
        return
    raise AssertionError(f"timed out waiting for {what}")


# --------------------------------------------------------------------------------------------
# The tests


async def test_fuzz_in_process_server_tasks_return_to_baseline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Random batches against an in-process server; afterwards the server runs exactly the
    tasks it ran before the fuzz clients came (checked after they leave)."""
    started = time.monotonic()
    count = examples(2)
    with trio.fail_after(60 + 1.5 * count):
        async with (
            in_process_server(tmp_path) as (manager, server),
            connect(server.url, TOKEN) as guard_client,
            connect(server.url, TOKEN) as admin,
            trio.open_nursery() as nursery,
        ):
            guard = await Guard.start(guard_client)
            await trio.testing.wait_all_tasks_blocked()
            baseline = Counter(leaks.trio_tasks())
            target = FuzzTarget(server.port, nursery, guard, admin)
            await fuzz_through(target, count)
            # The fuzz clients are gone: only the guard's and the admin's connections remain.
            await wait_for(
                lambda: len(server.connections) == 2 and server.open_slots == 2,
                CLOSE_TIMEOUT,
                "the fuzz connections to close",
            )
            # Sessions the fuzz spawned outlive its connections by design; remove them.
            for info in manager.list_all():
                if info.owner != guard.owner:
                    await manager.kill(info.id, owner=info.owner, cleanup=True)
            assert [s.owner for s in manager.list_all()] == [guard.owner]
            await trio.testing.wait_all_tasks_blocked()
            after = Counter(leaks.trio_tasks())
            assert after == baseline, (
                f"tasks left: {after - baseline}, tasks gone: {baseline - after}"
            )
            await guard.round_trip()
            nursery.cancel_scope.cancel()
    assert not server_errors(caplog), server_errors(caplog)
    print(
        f"in-process fuzz: {target.frames_sent} frames, closes {dict(target.closes)}, "
        f"answers {dict(target.outcomes)}, {guard.trips} guard trips, "
        f"{time.monotonic() - started:.1f} s"
    )


async def test_fuzz_serve_subprocess(tmp_path: Path) -> None:
    """The same fuzz against `python -m trio_pty serve`: it survives, the guard keeps
    working, and after SIGTERM every process it ran is gone."""
    (tmp_path / "sub").mkdir()
    # `root` is a top-level key: it goes before the first table.
    config = f'root = "{tmp_path}"\n' + SERVER_CONFIG
    env = {"HOME": str(fuzz_home(tmp_path))}
    process = start_server(
        tmp_path, "--token", TOKEN, config=config, env=env, token_in_output=False
    )
    count = examples(0.5)
    try:
        with trio.fail_after(60 + 1.5 * count):
            async with (
                connect(process.url, TOKEN) as guard_client,
                connect(process.url, TOKEN) as admin,
                trio.open_nursery() as nursery,
            ):
                guard = await Guard.start(guard_client)
                target = FuzzTarget(process.port, nursery, guard, admin)
                await fuzz_through(target, count)
                with trio.fail_after(CLOSE_TIMEOUT):
                    info = await guard_client.request(ServerInfoParams())
                    while info.counts.connections != 2:
                        await trio.sleep(0.02)
                        info = await guard_client.request(ServerInfoParams())
                assert info.counts.requests_in_flight == 1, info  # this server.info
                nursery.cancel_scope.cancel()
        assert process.proc.poll() is None, f"the server died: {process.stderr()}"
        ran = server_processes(process)
        # Under the config's command rules the command runs as resolved on the server's
        # PATH (docs/security.md), so its argv[0] is a path.
        assert any(os.path.basename(view.cmdline) == "cat" for view in ran.values()), ran
    finally:
        code = process.stop()
    assert code == 0, process.stderr()
    await wait_for(
        lambda: not any(alive(pid) for pid in ran),
        5,
        f"the processes of the server to end with it: {ran}",
    )
    stderr = process.stderr()
    for marker in ("Traceback", "internal error", "connection failed"):
        assert marker not in stderr, stderr[-4000:]
    print(
        f"subprocess fuzz: {target.frames_sent} frames, closes {dict(target.closes)}, "
        f"answers {dict(target.outcomes)}"
    )


# --------------------------------------------------------------------------------------------
# Deterministic sweeps: every param with every wrong JSON type, sizes at the bound.

SAMPLES: dict[str, Any] = {
    "null": None,
    "boolean": True,
    "integer": 7,
    "number": 1.5,
    "string": "s",
    "array": [],
    "object": {},
}

BASE_PARAMS: dict[str, dict[str, Any]] = {
    "pty.spawn": {"command": "true", "description": "fuzz"},
    "pty.spawn_shell": {"description": "fuzz"},
    "pty.run": {"id": FAKE_SESSION, "command": "true"},
    "pty.commands": {"id": FAKE_SESSION},
    "pty.screen": {"id": FAKE_SESSION},
    "pty.write": {"id": FAKE_SESSION, "data": "x"},
    "pty.read": {"id": FAKE_SESSION},
    "pty.read_raw": {"id": FAKE_SESSION},
    "pty.list": {},
    "pty.kill": {"id": FAKE_SESSION},
    "pty.resize": {"id": FAKE_SESSION, "rows": 24, "cols": 80},
    "pty.signal": {"id": FAKE_SESSION, "signal": "INT"},
    "pty.attach": {"id": FAKE_SESSION},
    "pty.detach": {"id": FAKE_SESSION},
    "owner.delete": {"owner": "fuzz-nobody"},
    "server.info": {},
    "server.drain": {},
    "pty.get": {"id": FAKE_SESSION},
    "pty.exec": {"command": "true"},
    "pty.record": {"id": FAKE_SESSION},
    CANCEL: {"id": 1},
}


def accepted(tp: Any) -> set[str]:
    """The JSON types a param of type `tp` accepts (integral numbers count for int)."""
    if _is_union(tp):
        return set().union(*(accepted(member) for member in typing.get_args(tp)))
    if tp is type(None):
        return {"null"}
    if typing.get_origin(tp) is typing.Literal:
        return {"string"} if all(isinstance(v, str) for v in typing.get_args(tp)) else set()
    simple = {str: {"string"}, bool: {"boolean"}, int: {"integer"}, float: {"integer", "number"}}
    if tp in simple:
        return simple[tp]
    if typing.get_origin(tp) is list:
        return {"array"}
    if typing.get_origin(tp) is dict or attrs.has(tp):
        return {"object"}
    raise AssertionError(f"unknown param type {tp!r}")  # pragma: no cover


def wrong_type_cases() -> list[tuple[str, Any, str, str]]:
    """(method, params, expected path, JSON type) for every param, nested ones included
    (list elements, mapping values, fields of a Wait), with every JSON type it refuses."""
    cases: list[tuple[str, Any, str, str]] = []

    def walk(method: str, tp: Any, path: str, wrap: Wrap) -> None:
        for name in sorted(set(SAMPLES) - accepted(tp)):
            cases.append((method, wrap(SAMPLES[name]), path, name))
        members = [m for m in typing.get_args(tp) if m is not type(None)] if _is_union(tp) else [tp]
        for member in members:
            if typing.get_origin(member) is list:
                [element] = typing.get_args(member)
                walk(method, element, f"{path}[0]", nest(wrap, list_of))
            elif typing.get_origin(member) is dict:
                _, value_tp = typing.get_args(member)
                walk(method, value_tp, f'{path}["K"]', nest(wrap, member_of("K")))
            elif attrs.has(member):
                hints = typing.get_type_hints(member)
                for field in attrs.fields(member):
                    walk(
                        method,
                        hints[field.name],
                        f"{path}.{field.name}",
                        nest(wrap, member_of(field.name)),
                    )

    for method in METHOD_NAMES:
        for name, tp in params_of(method).items():
            walk(method, tp, name, nest(base_with(method), member_of(name)))
    return cases


Wrap: TypeAlias = Callable[[Any], Any]


def nest(outer: Wrap, inner: Wrap) -> Wrap:
    return lambda value: outer(inner(value))


def list_of(value: Any) -> list[Any]:
    return [value]


def member_of(name: str) -> Wrap:
    return lambda value: {name: value}


def base_with(method: str) -> Wrap:
    """The method's base params with the one given member put in."""
    return lambda member: {**BASE_PARAMS[method], **member}


def test_subprocess_config_is_the_in_process_one() -> None:
    config = parse_config(tomllib.loads(SERVER_CONFIG))
    assert config.limits == FUZZ_LIMITS
    assert config.authorizer is not None
    assert config.authorizer.rules == RulesAuthorizer(RULES).rules


def test_base_params_cover_every_method() -> None:
    """A new method (or a renamed param) must be added to the sweep, not silently skipped."""
    assert set(BASE_PARAMS) == set(METHOD_NAMES)
    for method, params in BASE_PARAMS.items():
        assert set(params) <= set(params_of(method)), method
    assert len(wrong_type_cases()) > 150


async def test_every_param_with_every_wrong_type(tmp_path: Path) -> None:
    """For each method and each param (nested ones too), a value of each JSON type it does
    not accept: -32602 naming exactly that path; plus unknown, missing and by-position
    params. Sent concurrently on one connection, answered one to one."""
    cases = wrong_type_cases()
    extra: list[tuple[str, Any, str, str]] = []
    for method in METHOD_NAMES:
        extra.append((method, {**BASE_PARAMS[method], "colour": "red"}, "colour", "unknown field"))
        for name in BASE_PARAMS[method]:
            field = attrs.fields_dict(CancelParams if method == CANCEL else METHODS[method].params)[
                name
            ]
            if field.default is attrs.NOTHING:
                params = {k: v for k, v in BASE_PARAMS[method].items() if k != name}
                extra.append((method, params, name, "required field missing"))
        extra.append((method, [1, 2], "", "by-position"))
    extra.append(
        (
            "pty.spawn",
            {**BASE_PARAMS["pty.spawn"], "ready": {"colour": 1}},
            "ready.colour",
            "unknown field",
        )
    )
    with trio.fail_after(60):
        async with (
            in_process_server(tmp_path) as (manager, server),
            trio.open_nursery() as nursery,
            fuzz_connection(server.port, nursery) as conn,
        ):
            all_cases = cases + extra
            by_id: dict[int, tuple[str, Any, str, str]] = {}
            for start in range(0, len(all_cases), 64):
                for offset, case in enumerate(all_cases[start : start + 64]):
                    id = start + offset
                    by_id[id] = case
                    method, params, _, _ = case
                    text = json.dumps(
                        {"jsonrpc": "2.0", "id": id, "method": method, "params": params}
                    )
                    frame = Frame(text, f"{method} {params!r}")
                    conn.ledger.expect(one(key_of(id), INVALID_PARAMS), frame.describe())
                    await conn.send(frame)
                for response in await conn.settle("wrong types"):
                    method, params, path, what = by_id[response["id"]]
                    error = response["error"]
                    if what == "by-position":
                        assert "by-position" in error["message"], response
                        continue
                    problems = error["data"]["errors"]
                    assert error["data"]["error_count"] == 1, (method, params, response)
                    [problem] = problems
                    assert problem["path"] == path, (method, params, response)
                    if what in SAMPLES:
                        assert problem["problem"].startswith("expected "), response
                        assert problem["problem"].endswith(f", got {what}") or (
                            problem["problem"].startswith("expected one of")
                        ), response
                    else:
                        assert problem["problem"] == what, response
            assert len(by_id) == len(all_cases)
            assert manager.list_all() == []  # nothing ran
            nursery.cancel_scope.cancel()


PAD_REQUEST = '{"jsonrpc":"2.0","id":%d,"method":"server.info","params":{"pad":"%s"}}'


def padded(id: int, size: int, char: str) -> bytes:
    """A request of exactly `size` UTF-8 bytes, padded with `char` (and ASCII)."""
    base = len((PAD_REQUEST % (id, "")).encode())
    room = size - base
    width = len(char.encode())
    text = PAD_REQUEST % (id, char * (room // width) + "x" * (room % width))
    data = text.encode()
    assert len(data) == size
    return data


@pytest.mark.parametrize("opcode", [OP_TEXT, OP_BINARY])
async def test_message_size_bound_is_exact(tmp_path: Path, opcode: int) -> None:
    """max_message_bytes counts UTF-8 bytes, for text and binary, whole or fragmented: a
    message of exactly the bound is answered, one byte more closes with 1009 and is not.
    Meanwhile another connection's requests are answered."""
    widths = ["x", "é", "€", "𝄞"] if opcode == OP_TEXT else ["x", "𝄞"]
    with trio.fail_after(60):
        async with (
            in_process_server(tmp_path) as (_, server),
            trio.open_nursery() as nursery,
            fuzz_connection(server.port, nursery) as witness,
        ):
            id = 0
            for char in widths:
                for size in (MAX_MESSAGE - 1, MAX_MESSAGE, MAX_MESSAGE + 1):
                    for cuts in ((), (0.5,), (0.001, 0.999)):
                        id += 1
                        data = padded(id, size, char)
                        async with fuzz_connection(server.port, nursery) as conn:
                            label = f"{size} bytes of {char!r} in {len(cuts) + 1} frame(s)"
                            payload: str | bytes = data.decode() if opcode == OP_TEXT else data
                            frame = Frame(payload, label, cuts)
                            if size <= MAX_MESSAGE:
                                conn.ledger.expect(one(key_of(id), INVALID_PARAMS), label)
                                await conn.send(frame)
                                await conn.settle(label)
                            else:
                                with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                                    await conn.send(frame)
                                assert await conn.wait_closed() == 1009, label
                                assert conn.ledger.responses == [], label
                        witness.ledger.expect(one(key_of(id), "result"), "witness")
                        await witness.send(
                            Frame(f'{{"jsonrpc":"2.0","id":{id},"method":"pty.list"}}', "witness")
                        )
                        await witness.settle("witness")
            nursery.cancel_scope.cancel()


# --------------------------------------------------------------------------------------------
# Found by fuzzing the handshake's timing


def upgrade_request(port: int) -> bytes:
    """A WebSocket upgrade request for /rpc with the fuzz token (what raw_connect sends)."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        "GET /rpc HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        f"Authorization: Bearer {TOKEN}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_a_request_sent_with_the_upgrade_request_is_answered_or_refused(
    tmp_path: Path,
) -> None:
    """RFC 6455 (4.1) tells a client to wait for the 101 before it sends frames. One that
    does not, and sends its first request in the same segment as the upgrade request, must
    not wait forever: the server answers the request, or fails the connection. wsproto 1.3's
    server handshake drops bytes received with the upgrade request (H11Handshake._accept
    builds its Connection without h11's trailing_data), so the HTTP front holds them back
    until the 101 is sent (server/http.py ReplayStream)."""
    with trio.fail_after(20):
        async with in_process_server(tmp_path) as (_, server), trio.open_nursery() as nursery:
            request = b'{"jsonrpc":"2.0","id":1,"method":"pty.list"}'
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            await stream.send_all(upgrade_request(server.port) + client_frame(OP_TEXT, request))
            received = b""
            while b"\r\n\r\n" not in received:
                data = await stream.receive_some(65536)
                assert data, "closed during the handshake"
                received += data
            head, _, rest = received.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 "), head
            conn = FuzzConnection(RawSocket(stream, 101, head, rest))
            nursery.start_soon(conn.read_loop)
            try:
                with trio.move_on_after(1):  # answered in milliseconds when it is
                    while not conn.ledger.responses and not conn.closed:
                        await conn.changed.wait()
                answered = [message["id"] for _, _, message in conn.ledger.responses]
                assert conn.closed or answered == [1], "the pipelined request was dropped"
            finally:
                await conn.close()
                nursery.cancel_scope.cancel()
