"""JSON-RPC 2.0 framing, error codes and parameter structuring, without any I/O.

The server and the client both speak through this module, so the rules about what a
well-formed message is live in exactly one place, and they can be property-tested without a
socket or an event loop. Nothing here imports trio.

Every frame the peer sends goes through `parse_message`, which never raises: whatever arrives
(bytes that are not UTF-8, JSON nested a million deep, NaN, a batch, a response) becomes one of
`Request`, `Notification`, `Invalid` (carrying the error response to send back) or `Ignored`
(which must not be answered). Every frame we send goes through the `encode_*` functions, which
produce compact JSON that always encodes to UTF-8, so a hostile string cannot crash the sender.
"""

from __future__ import annotations

import collections.abc
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias, TypeVar

import attrs
import cattrs
from cattrs.cols import list_structure_factory, mapping_structure_factory
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    StructureHandlerNotFoundError,
)

from trio_pty.errors import PtyError, json_type_name

__all__ = [
    "APPLICATION_ERROR_CODES",
    "CLOSING",
    "INTERNAL_ERROR",
    "INVALID_INPUT",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "JSONRPC_VERSION",
    "LIMIT_EXCEEDED",
    "METHOD_NOT_FOUND",
    "NOT_RUNNING",
    "OWNER_DELETED",
    "PARSE_ERROR",
    "PERMISSION_DENIED",
    "PTY_ERROR",
    "RECEIVE_BUFFER_BYTES",
    "REQUEST_CANCELLED",
    "SESSION_NOT_FOUND",
    "SPAWN_FAILED",
    "WRITE_TIMEOUT",
    "ErrorObject",
    "Ignored",
    "Incoming",
    "Invalid",
    "InvalidParams",
    "MalformedResponse",
    "Notification",
    "ParamProblem",
    "Request",
    "RequestId",
    "Response",
    "ServerMessage",
    "dumps",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_result",
    "error_for_exception",
    "internal_error",
    "make_converter",
    "method_not_found",
    "parse_message",
    "parse_server_message",
    "request_cancelled",
    "structure_params",
]

T = TypeVar("T")

#: A request id as JSON-RPC 2.0 allows it: a string, an integer-valued number, or null.
RequestId: TypeAlias = str | int | float | None

JSONRPC_VERSION: Final = "2.0"

#: How much each side asks of the socket per read. trio-websocket's default is 4 KiB, so a
#: 64 KiB `pty.output` chunk took 22 reads, each a trip through the scheduler and wsproto's
#: buffer; at 64 KiB the attach stream is ~1.9x faster (docs/benchmarks.md).
RECEIVE_BUFFER_BYTES: Final = 65_536

# Protocol faults, as fixed by the JSON-RPC 2.0 specification.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
#: Borrowed from the Language Server Protocol: the request was cancelled before it finished.
REQUEST_CANCELLED: Final = -32800

# Application errors, one per `PtyError.kind`. Clients switch on these numbers, so once
# published they never change meaning: new kinds get new numbers, old numbers are not reused.
PTY_ERROR: Final = -32000  # the base kind, and any kind this table does not know yet
SESSION_NOT_FOUND: Final = -32001
LIMIT_EXCEEDED: Final = -32002
OWNER_DELETED: Final = -32003
CLOSING: Final = -32004
SPAWN_FAILED: Final = -32005
NOT_RUNNING: Final = -32006
WRITE_TIMEOUT: Final = -32007
INVALID_INPUT: Final = -32008
PERMISSION_DENIED: Final = -32009

#: `PtyError.kind` -> JSON-RPC error code. Read-only: it is part of the wire contract.
APPLICATION_ERROR_CODES: Final[Mapping[str, int]] = types.MappingProxyType(
    {
        "pty_error": PTY_ERROR,
        "session_not_found": SESSION_NOT_FOUND,
        "limit_exceeded": LIMIT_EXCEEDED,
        "owner_deleted": OWNER_DELETED,
        "closing": CLOSING,
        "spawn_failed": SPAWN_FAILED,
        "not_running": NOT_RUNNING,
        "write_timeout": WRITE_TIMEOUT,
        "invalid_input": INVALID_INPUT,
        "permission_denied": PERMISSION_DENIED,
    }
)

_MEMBERS: Final = frozenset({"jsonrpc", "method", "params", "id"})
# Integral float ids are echoed as floats; beyond 2**53 a float no longer holds the integer
# the peer wrote, so such an id could not be echoed exactly and is refused instead.
_MAX_EXACT_FLOAT: Final = 2.0**53
# An InvalidParams message lists this many problems; the rest are counted, not spelled out,
# so a list of a hundred thousand wrong elements does not produce a megabyte of error text.
_MAX_REPORTED_PROBLEMS: Final = 5

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _is_unicode(text: str) -> bool:
    """Whether `text` holds no lone surrogate, i.e. can be encoded as UTF-8.

    Checked with the codec rather than a regex: on a 64 KiB write the codec takes
    microseconds where the regex scan takes most of a millisecond.
    """
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Error objects


@attrs.frozen
class ErrorObject:
    """The `error` member of a response: what went wrong, in numbers and in words."""

    code: int
    message: str
    data: dict[str, Any] | None = None

    def encode(self, id: RequestId) -> str:
        """The complete error response for request `id`."""
        return encode_error(id, self.code, self.message, self.data)


def error_for_exception(exc: PtyError) -> ErrorObject:
    """Map a library error to its stable code, keeping its structured details for callers.

    `data.kind` is always the exception's own kind, even when the code is the catch-all
    -32000, so a client can still tell a kind this server version did not know about.
    """
    code = APPLICATION_ERROR_CODES.get(exc.kind, PTY_ERROR)
    return ErrorObject(code, exc.message, {**exc.details(), "kind": exc.kind})


def method_not_found(method: str) -> ErrorObject:
    """-32601, naming the method so a typo is obvious."""
    return ErrorObject(METHOD_NOT_FOUND, f"Method not found: {method}")


def internal_error(message: str = "Internal error") -> ErrorObject:
    """-32603: a bug on our side. Say little; the details belong in the server log."""
    return ErrorObject(INTERNAL_ERROR, message)


def request_cancelled(message: str = "Request cancelled") -> ErrorObject:
    """-32800: the request was abandoned (connection closing, server shutting down)."""
    return ErrorObject(REQUEST_CANCELLED, message)


# --------------------------------------------------------------------------------------------
# Encoding


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def dumps(obj: Any) -> str:
    """Compact JSON that is always encodable as UTF-8.

    `ensure_ascii=False` keeps non-ASCII text readable and small, but would pass a lone
    surrogate through raw, and the WebSocket layer would then fail to encode the frame. Raw
    surrogates can only sit inside JSON strings, so escaping each one is exactly what
    `ensure_ascii=True` would have written for it.
    """
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text if _is_unicode(text) else _SURROGATE.sub(_escape_surrogate, text)


def encode_request(id: RequestId, method: str, params: Mapping[str, Any] | None = None) -> str:
    """A request frame (client side). `params=None` leaves the member out."""
    obj: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "id": id, "method": method}
    if params is not None:
        obj["params"] = params
    return dumps(obj)


def encode_notification(method: str, params: Mapping[str, Any] | None = None) -> str:
    """A notification frame: no id, so the peer never answers it."""
    obj: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "method": method}
    if params is not None:
        obj["params"] = params
    return dumps(obj)


def encode_result(id: RequestId, result: Any) -> str:
    """A success response.

    Raises TypeError or ValueError when `result` is not JSON (a bug in the caller): the
    server should then answer with `internal_error()` instead.
    """
    return dumps({"jsonrpc": JSONRPC_VERSION, "id": id, "result": result})


def encode_error(
    id: RequestId, code: int, message: str, data: Mapping[str, Any] | None = None
) -> str:
    """An error response. This is the last resort of every failure path, so it never fails
    on account of `data`: if `data` cannot be encoded (a stray object in an exception's
    details, a NaN) it is replaced by just its `kind`, when that is a string."""
    obj: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "id": id}
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    obj["error"] = error
    try:
        return dumps(obj)
    except (TypeError, ValueError, RecursionError):
        if data is None:
            raise
    kind = data.get("kind")
    if isinstance(kind, str):
        error["data"] = {"kind": kind}
    else:
        del error["data"]
    return dumps(obj)


# --------------------------------------------------------------------------------------------
# Parsing what a client sends


@attrs.frozen
class Request:
    """A call that must be answered with exactly one response carrying `id`."""

    id: RequestId
    method: str
    params: dict[str, Any]


@attrs.frozen
class Notification:
    """A call without an id: it is executed but never answered, not even with an error."""

    method: str
    params: dict[str, Any]


@attrs.frozen
class Invalid:
    """A frame that broke the protocol; send `response` back and carry on with the connection."""

    id: RequestId
    error: ErrorObject

    @property
    def response(self) -> str:
        """The encoded error response to send."""
        return self.error.encode(self.id)


@attrs.frozen
class Ignored:
    """A frame that is wrong but must not be answered (see `parse_message`). `reason` is for
    logs and metrics only."""

    reason: str
    id: RequestId = None


Incoming: TypeAlias = Request | Notification | Invalid | Ignored


class _ParseFailure(ValueError):
    """Raised inside the JSON decoder hooks; becomes a -32700 response."""


def _reject_constant(name: str) -> Any:
    raise _ParseFailure(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _ParseFailure(f"number out of range: {text[:40]}")
    return value


_NO_NAMES: Final[frozenset[str]] = frozenset()


class _Decoder:
    """One parse: `json.loads` with strict number hooks that also notices duplicate names.

    Duplicate member names are refused because two parsers (a proxy, a log, us) could
    disagree about which value counts. The outermost object's hook runs last, so after the
    parse `top_duplicates` describes the top-level object.
    """

    def __init__(self) -> None:
        self.duplicate: str | None = None
        self.top_duplicates: frozenset[str] = _NO_NAMES

    def _object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) == len(pairs):  # the hot path: once per JSON object of every frame
            self.top_duplicates = _NO_NAMES
            return obj
        seen: set[str] = set()
        duplicates: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                duplicates.add(name)
            seen.add(name)
        self.top_duplicates = frozenset(duplicates)
        if self.duplicate is None:
            self.duplicate = min(duplicates)
        return obj

    def loads(self, text: str) -> Any:
        return json.loads(
            text,
            object_pairs_hook=self._object,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )


@attrs.frozen
class _Document:
    """A decoded frame, with what the decoder noticed that JSON itself allows."""

    value: Any
    duplicate: str | None  # the first repeated member name found anywhere, if any
    top_duplicates: frozenset[str]  # the names repeated in the top-level object
    lone_surrogate: bool


def _has_lone_surrogate(value: Any) -> bool:
    """Whether any string in the document (member names included) is not valid Unicode.

    Python decodes `"\\ud800"` into a str that cannot be encoded as UTF-8; letting it into a
    method would fail far from here (writing to the PTY, logging). Iterative, so depth cannot
    hurt.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not _is_unicode(item):
                return True
        elif isinstance(item, dict):
            for key, member in item.items():
                if not _is_unicode(key):
                    return True
                stack.append(member)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _valid_id(value: Any) -> bool:
    """JSON-RPC 2.0: a string, a number without a fractional part, or null."""
    if value is None:
        return True
    if isinstance(value, str):
        return _is_unicode(value)
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer() and abs(value) <= _MAX_EXACT_FLOAT
    return False


def _parse_error(detail: str) -> Invalid:
    return Invalid(None, ErrorObject(PARSE_ERROR, f"Parse error: {detail}"))


def _invalid_request(id: RequestId, detail: str) -> Invalid:
    return Invalid(id, ErrorObject(INVALID_REQUEST, f"Invalid request: {detail}"))


def _decode(frame: str | bytes) -> _Document | Invalid:
    """The JSON value of a frame, or the parse error to answer with."""
    if isinstance(frame, str):
        text = frame
    else:
        try:
            text = bytes(frame).decode("utf-8")
        except UnicodeDecodeError as exc:
            return _parse_error(f"frame is not valid UTF-8 ({exc.reason} at byte {exc.start})")
        except TypeError:
            return _parse_error("frame is neither text nor bytes")
    if text.startswith("\ufeff"):
        return _parse_error("byte order mark not allowed")
    decoder = _Decoder()
    try:
        value = decoder.loads(text)
    except RecursionError:
        return _parse_error("nesting too deep")
    except _ParseFailure as exc:
        return _parse_error(str(exc))
    except json.JSONDecodeError as exc:
        return _parse_error(f"{exc.msg} at line {exc.lineno} column {exc.colno}")
    except ValueError:
        # Integers longer than CPython's int/str conversion limit (4300 digits).
        return _parse_error("number too large")
    # A surrogate can come from a \\u escape, or (for text frames) be in the text itself.
    maybe = "\\u" in text or (isinstance(frame, str) and not _is_unicode(text))
    lone = maybe and _has_lone_surrogate(value)
    return _Document(value, decoder.duplicate, decoder.top_duplicates, lone)


def parse_message(frame: str | bytes) -> Incoming:
    """Classify one frame from a client. Never raises.

    Answer a `Request` with one response carrying its id, and an `Invalid` with its
    `response`; execute a `Notification` without answering; drop an `Ignored`.

    Choices beyond the letter of JSON-RPC 2.0 (all answered with id null unless noted):
    bytes must be UTF-8, with no byte order mark; NaN, Infinity and numbers that overflow a
    float are parse errors; nesting deeper than the decoder can follow is a parse error; a
    batch (array) is refused as a whole with one -32600; a lone surrogate or a repeated
    member name anywhere is -32600; an unknown top-level member is -32600; by-position
    params are -32602 because every method takes named params. Errors found after a valid
    id has been read echo that id.

    Two kinds of frame are never answered (`Ignored`): response-shaped frames (no `method`,
    but a `result` or `error`), because this server sends no requests and answering a stray
    response risks two peers trading error responses forever; and notifications with
    by-position params, because an error about a notification's params is a method-level
    error and JSON-RPC forbids answering notifications.
    """
    doc = _decode(frame)
    if isinstance(doc, Invalid):
        return doc
    if isinstance(doc.value, list):
        return _invalid_request(None, "batch requests are not supported")
    if not isinstance(doc.value, dict):
        return _invalid_request(None, "a request must be a JSON object")
    msg: dict[str, Any] = doc.value

    if "method" not in msg and ("result" in msg or "error" in msg):
        raw_id = msg.get("id")
        return Ignored("unexpected response from client", raw_id if _valid_id(raw_id) else None)

    has_id = "id" in msg
    id_ok = _valid_id(msg.get("id")) and "id" not in doc.top_duplicates
    echo_id: RequestId = msg.get("id") if has_id and id_ok else None

    if doc.duplicate is not None:
        return _invalid_request(echo_id, f"duplicate member name: {json.dumps(doc.duplicate)}")
    if doc.lone_surrogate:
        return _invalid_request(echo_id, "strings must be valid Unicode (lone surrogate)")
    if has_id and not id_ok:
        return _invalid_request(None, "id must be a string, an integer or null")
    unknown = sorted(set(msg) - _MEMBERS)
    if unknown:
        names = ", ".join(json.dumps(name) for name in unknown[:_MAX_REPORTED_PROBLEMS])
        return _invalid_request(echo_id, f"unknown member: {names}")
    version = msg.get("jsonrpc")
    if not (isinstance(version, str) and version == JSONRPC_VERSION):
        return _invalid_request(echo_id, 'jsonrpc must be exactly "2.0"')
    method = msg.get("method")
    if not isinstance(method, str):
        return _invalid_request(echo_id, "method must be a string")
    params = msg.get("params", {})
    if isinstance(params, list):
        if not has_id:
            return Ignored("notification with by-position params")
        return Invalid(
            echo_id,
            ErrorObject(
                INVALID_PARAMS,
                "Invalid params: params must be an object (by-name); "
                "by-position params are not supported",
            ),
        )
    if not isinstance(params, dict):
        return _invalid_request(echo_id, "params must be an object")
    if has_id:
        return Request(echo_id, method, params)
    return Notification(method, params)


# --------------------------------------------------------------------------------------------
# Parsing what the server sends (for the client)


@attrs.frozen
class Response:
    """The answer to request `id`: exactly one of `result` and `error` is meaningful."""

    id: RequestId
    result: Any = None
    error: ErrorObject | None = None


@attrs.frozen
class MalformedResponse:
    """A frame from the server that is not JSON-RPC 2.0; the client should drop the
    connection, since it can no longer trust which answer belongs to which request."""

    reason: str


ServerMessage: TypeAlias = Response | Notification | MalformedResponse


def parse_server_message(frame: str | bytes) -> ServerMessage:
    """Classify one frame from the server (client side). Never raises."""
    doc = _decode(frame)
    if isinstance(doc, Invalid):
        return MalformedResponse(doc.error.message)
    if doc.duplicate is not None or doc.lone_surrogate:
        return MalformedResponse("duplicate member name or lone surrogate")
    if not isinstance(doc.value, dict):
        return MalformedResponse("a message must be a JSON object")
    msg: dict[str, Any] = doc.value
    if msg.get("jsonrpc") != JSONRPC_VERSION or not isinstance(msg.get("jsonrpc"), str):
        return MalformedResponse('jsonrpc must be exactly "2.0"')
    if "method" in msg:
        method, params = msg["method"], msg.get("params", {})
        if "id" in msg or not isinstance(method, str) or not isinstance(params, dict):
            return MalformedResponse("malformed notification")
        return Notification(method, params)
    if "id" not in msg or not _valid_id(msg["id"]):
        return MalformedResponse("response without a valid id")
    if set(msg) - {"jsonrpc", "id", "result", "error"}:
        return MalformedResponse("unknown member in response")
    if ("result" in msg) == ("error" in msg):
        return MalformedResponse("a response needs exactly one of result and error")
    if "result" in msg:
        return Response(msg["id"], result=msg["result"])
    error = msg["error"]
    if not (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and not isinstance(error.get("code"), bool)
        and isinstance(error.get("message"), str)
        and isinstance(error.get("data", {}), dict)
        and not set(error) - {"code", "message", "data"}
    ):
        return MalformedResponse("malformed error object")
    return Response(
        msg["id"], error=ErrorObject(error["code"], error["message"], error.get("data"))
    )


# --------------------------------------------------------------------------------------------
# Structuring params


@attrs.frozen
class ParamProblem:
    """One thing wrong with a request's params: where (`args[3]`, `env["HOME"]`, empty for
    the params object itself) and what."""

    path: str
    problem: str

    def __str__(self) -> str:
        if self.problem == "unknown field":
            return f"unknown field: {self.path}"
        return f"{self.path}: {self.problem}" if self.path else self.problem


class InvalidParams(Exception):
    """The params did not fit the method's parameter class; answered with -32602."""

    def __init__(self, message: str, problems: Sequence[ParamProblem] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.problems = tuple(problems)

    def to_error(self) -> ErrorObject:
        """-32602 with the first problems spelled out in `data.errors` for programs, and
        `data.error_count` saying how many there were in all."""
        errors = [attrs.asdict(p) for p in self.problems[:_MAX_REPORTED_PROBLEMS]]
        return ErrorObject(
            INVALID_PARAMS,
            f"Invalid params: {self.message}",
            {"errors": errors, "error_count": len(self.problems)},
        )


class _Mismatch(TypeError):
    """A JSON value of the wrong type; the message is already fit for a client."""


def _mismatch(expected: str, value: Any) -> _Mismatch:
    return _Mismatch(f"expected {expected}, got {json_type_name(value)}")


def _structure_str(value: Any, _: Any) -> str:
    if isinstance(value, str):
        return value
    raise _mismatch("string", value)


def _structure_int(value: Any, _: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 5.0 from a client that has only one number type
    raise _mismatch("integer", value)


def _structure_float(value: Any, _: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _mismatch("number", value)
    try:
        result = float(value)
    except OverflowError:
        raise _Mismatch("number out of range") from None
    if not math.isfinite(result):
        raise _Mismatch("number out of range")
    return result


def _structure_bool(value: Any, _: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise _mismatch("boolean", value)


_PRIMITIVES: Final[dict[Any, tuple[str, Callable[[Any, Any], Any]]]] = {
    str: ("string", _structure_str),
    int: ("integer", _structure_int),
    float: ("number", _structure_float),
    bool: ("boolean", _structure_bool),
}


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Literal and all(
        value is None or type(value) in _PRIMITIVES for value in typing.get_args(tp)
    )


def _literal_factory(tp: Any) -> Callable[[Any, Any], Any]:
    """Literals compare by type as well as value: `True` is not `Literal[1]`."""
    allowed = typing.get_args(tp)
    text = ", ".join(json.dumps(value) for value in allowed)

    def structure(value: Any, _: Any) -> Any:
        for candidate in allowed:
            if type(value) is type(candidate) and value == candidate:
                return candidate
        raise _Mismatch(f"expected one of {text}")

    return structure


def _union_members(tp: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(tp)
    return ()


def _is_primitive_union(tp: Any) -> bool:
    members = _union_members(tp)
    return bool(members) and all(m is type(None) or m in _PRIMITIVES for m in members)


def _primitive_union_factory(tp: Any) -> Callable[[Any, Any], Any]:
    """Pick the member by the JSON type of the value, so member order never matters and an
    integer is never read as a string (or the other way round)."""
    members = typing.get_args(tp)
    names = " or ".join("null" if m is type(None) else _PRIMITIVES[m][0] for m in members)

    def structure(value: Any, _: Any) -> Any:
        if value is None and type(None) in members:
            return None
        if isinstance(value, bool):
            preference: tuple[Any, ...] = (bool,)
        elif isinstance(value, int):
            preference = (int, float)
        elif isinstance(value, float):
            preference = (float, int)
        elif isinstance(value, str):
            preference = (str,)
        else:
            preference = ()
        for member in preference:
            if member in members:
                return _PRIMITIVES[member][1](value, member)
        raise _mismatch(names, value)

    return structure


_LIST_ORIGINS: Final = frozenset({list, collections.abc.Sequence, collections.abc.MutableSequence})
_SET_ORIGINS: Final[dict[Any, Callable[[list[Any]], Any]]] = {
    set: set,
    frozenset: frozenset,
    collections.abc.Set: frozenset,
    collections.abc.MutableSet: set,
}
_MAPPING_ORIGINS: Final = frozenset({dict, collections.abc.Mapping, collections.abc.MutableMapping})


def _origin(tp: Any) -> Any:
    return typing.get_origin(tp) or tp


def _list_of(element: Any) -> Any:
    """`list[element]` for a type known only at run time."""
    return list[element]


def _element_type(tp: Any) -> Any:
    args = typing.get_args(tp)
    return args[0] if args else Any


def make_converter() -> cattrs.Converter:
    """A converter for request params that refuses to guess.

    cattrs by default calls `int("5")`, `str(5)` and `list("abc")`; for a protocol that
    would mean a client bug silently becomes a different request. Here every JSON value must
    already have the declared type: strings stay strings, booleans are not integers, an
    integer field takes only integer-valued numbers, a float field takes any finite number,
    arrays are required for sequences and sets, objects for mappings and attrs classes.
    Unknown fields are refused, and errors are collected per field (detailed validation) so
    `structure_params` can name every offending path.
    """
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    for tp, (_, hook) in _PRIMITIVES.items():
        conv.register_structure_hook(tp, hook)
    conv.register_structure_hook_factory(_is_literal, _literal_factory)
    conv.register_structure_hook_factory(_is_primitive_union, _primitive_union_factory)

    def list_factory(tp: Any) -> Callable[[Any, Any], Any]:
        target = _list_of(_element_type(tp))
        inner = list_structure_factory(target, conv)

        def structure(value: Any, _: Any) -> Any:
            if not isinstance(value, list):
                raise _mismatch("array", value)
            return inner(value, target)

        return structure

    def set_factory(tp: Any) -> Callable[[Any, Any], Any]:
        target = _list_of(_element_type(tp))
        inner, build = conv.get_structure_hook(target), _SET_ORIGINS[_origin(tp)]
        return lambda value, _: build(inner(value, target))

    def tuple_factory(tp: Any) -> Callable[[Any, Any], Any]:
        args = typing.get_args(tp)
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            target = _list_of(args[0] if args else Any)
            inner = conv.get_structure_hook(target)
            return lambda value, _: tuple(inner(value, target))
        fixed = conv.gen_structure_hetero_tuple(tp)

        def structure(value: Any, _: Any) -> Any:
            if not isinstance(value, list):
                raise _mismatch("array", value)
            if len(value) != len(args):
                raise _Mismatch(f"expected an array of {len(args)} items, got {len(value)}")
            return fixed(value, tp)

        return structure

    def mapping_factory(tp: Any) -> Callable[[Any, Any], Any]:
        inner = mapping_structure_factory(tp, conv, dict)

        def structure(value: Any, _: Any) -> Any:
            if not isinstance(value, dict):
                raise _mismatch("object", value)
            return inner(value, tp)

        return structure

    def attrs_factory(tp: Any) -> Callable[[Any, Any], Any]:
        inner = conv.gen_structure_attrs_fromdict(tp)

        def structure(value: Any, _: Any) -> Any:
            if not isinstance(value, dict):
                raise _mismatch("object", value)
            return inner(value, tp)

        return structure

    conv.register_structure_hook_factory(lambda tp: _origin(tp) in _LIST_ORIGINS, list_factory)
    conv.register_structure_hook_factory(lambda tp: _origin(tp) in _SET_ORIGINS, set_factory)
    conv.register_structure_hook_factory(lambda tp: _origin(tp) is tuple, tuple_factory)
    conv.register_structure_hook_factory(
        lambda tp: _origin(tp) in _MAPPING_ORIGINS, mapping_factory
    )
    conv.register_structure_hook_factory(
        lambda tp: isinstance(tp, type) and attrs.has(tp), attrs_factory
    )
    return conv


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _index(path: str, index: Any) -> str:
    if isinstance(index, int):
        return f"{path}[{index}]"
    return f"{path}[{json.dumps(str(index), ensure_ascii=False)}]"


def _problems(exc: BaseException, path: str, out: list[ParamProblem]) -> None:
    """Flatten cattrs' tree of validation errors into (path, problem) pairs."""
    if isinstance(exc, StructureHandlerNotFoundError):
        raise exc  # a parameter class cattrs cannot handle: our bug, not the client's
    if isinstance(exc, ClassValidationError):
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            _problems(sub, _join(path, note.name), out)
        for sub in without:
            _problems(sub, path, out)
    elif isinstance(exc, IterableValidationError):
        iter_notes, rest = exc.group_exceptions()
        for sub, inote in iter_notes:
            _problems(sub, _index(path, inote.index), out)
        for sub in rest:
            _problems(sub, path, out)
    elif isinstance(exc, ForbiddenExtraKeysError):
        for key in sorted(exc.extra_fields):
            out.append(ParamProblem(_join(path, key), "unknown field"))
    elif isinstance(exc, _Mismatch):
        out.append(ParamProblem(path, str(exc)))
    elif isinstance(exc, KeyError):
        out.append(ParamProblem(path, "required field missing"))
    else:
        # A validator of the parameter class (attrs validators raise ValueError/TypeError).
        out.append(ParamProblem(path, str(exc) or type(exc).__name__))


def structure_params(converter: cattrs.Converter, params: dict[str, Any], cls: type[T]) -> T:
    """Build the method's parameter object, or raise `InvalidParams` naming what is wrong.

    The message reads like `args[3]: expected string, got integer; unknown field: colour`
    (at most a handful of problems, then a count); `InvalidParams.problems` has them all.
    """
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object", [ParamProblem("", "expected object")])
    try:
        return converter.structure(params, cls)
    except (
        ClassValidationError,
        IterableValidationError,
        ForbiddenExtraKeysError,
        KeyError,
        TypeError,
        ValueError,
    ) as exc:
        problems: list[ParamProblem] = []
        _problems(exc, "", problems)
        shown = "; ".join(str(p) for p in problems[:_MAX_REPORTED_PROBLEMS])
        hidden = len(problems) - _MAX_REPORTED_PROBLEMS
        message = f"{shown} (and {hidden} more)" if hidden > 0 else shown
        raise InvalidParams(message, problems) from exc
