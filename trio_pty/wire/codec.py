"""JSON-RPC 2.0 framing, without any I/O: what a well-formed frame is, both ways.

Every frame a client sends goes through `parse_message`, which never raises: whatever arrives
(bytes that are not UTF-8, JSON nested a million deep, NaN, a batch, a response) becomes one of
`Request`, `Notification`, `Invalid` (carrying the error response to send back) or `Ignored`
(which must not be answered). Every frame the server sends goes through the `encode_*`
functions, which produce compact JSON that always encodes to UTF-8, so a hostile string cannot
crash the sender. The client reads the server's frames with `parse_server_message`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final, TypeAlias

import attrs

from trio_pty.wire.codes import INVALID_PARAMS, PARSE_ERROR, ErrorObject, invalid_request

__all__ = [
    "JSONRPC_VERSION",
    "MAX_REPORTED_PROBLEMS",
    "RECEIVE_BUFFER_BYTES",
    "Ignored",
    "Incoming",
    "Invalid",
    "MalformedResponse",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "ServerMessage",
    "dumps",
    "encode_error",
    "encode_error_object",
    "encode_notification",
    "encode_request",
    "encode_result",
    "is_unicode",
    "parse_message",
    "parse_server_message",
]

#: A request id as JSON-RPC 2.0 allows it: a string, an integer-valued number, or null.
RequestId: TypeAlias = str | int | float | None

JSONRPC_VERSION: Final = "2.0"

#: How much each side asks of the socket per read. trio-websocket's default is 4 KiB, so a
#: 64 KiB `pty.output` chunk took 22 reads, each a trip through the scheduler and wsproto's
#: buffer; at 64 KiB the attach stream is ~1.9x faster (docs/benchmarks.md).
RECEIVE_BUFFER_BYTES: Final = 65_536

#: An error message lists this many problems (unknown members, bad params); the rest are
#: counted, not spelled out, so a hostile frame cannot produce a megabyte of error text.
MAX_REPORTED_PROBLEMS: Final = 5

_MEMBERS: Final = frozenset({"jsonrpc", "method", "params", "id"})
# Integral float ids are echoed as floats; beyond 2**53 a float no longer holds the integer
# the peer wrote, so such an id could not be echoed exactly and is refused instead.
_MAX_EXACT_FLOAT: Final = 2.0**53

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def is_unicode(text: str) -> bool:
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
    return text if is_unicode(text) else _SURROGATE.sub(_escape_surrogate, text)


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


def encode_error_object(id: RequestId, error: ErrorObject) -> str:
    """The complete error response for request `id`."""
    return encode_error(id, error.code, error.message, error.data)


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
        return encode_error_object(self.id, self.error)


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
            if not is_unicode(item):
                return True
        elif isinstance(item, dict):
            for key, member in item.items():
                if not is_unicode(key):
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
        return is_unicode(value)
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
    return Invalid(id, invalid_request(detail))


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
    # One backslash is looked for first: a one-character search is a memchr (5 us on an
    # attach chunk's 350 KB), a two-character one a scan (380 us, as long as the parse).
    escaped = "\\" in text and "\\u" in text
    maybe = escaped or (isinstance(frame, str) and not is_unicode(text))
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
        names = ", ".join(json.dumps(name) for name in unknown[:MAX_REPORTED_PROBLEMS])
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
