"""The wire layer: hostile frames, stable error codes, strict params, lenient results, and
the method records.

Everything here is pure, so the properties run without sockets or an event loop.
"""

from __future__ import annotations

import ast
import base64
import json
import math
import pathlib
import types
import typing
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import trio_pty
import trio_pty.wire
from trio_pty import errors, wire
from trio_pty.model import Line, OutputChunk, ReadPage
from trio_pty.wire import (
    APPLICATION_ERROR_CODES,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PTY_ERROR,
    REQUEST_CANCELLED,
    ErrorObject,
    Ignored,
    Invalid,
    InvalidParams,
    MalformedResponse,
    Notification,
    Request,
    Response,
    encode_error,
    encode_error_object,
    encode_notification,
    encode_request,
    encode_result,
    error_for_exception,
    parse_message,
    parse_server_message,
)
from trio_pty.wire.convert import make_converter, structure_params

# --------------------------------------------------------------------------------------------
# Helpers and strategies


def _strict_loads(text: str) -> Any:
    def reject(name: str) -> Any:
        raise AssertionError(f"{name} in output")

    return json.loads(text, parse_constant=reject)


def assert_valid_response(text: str) -> dict[str, Any]:
    """A JSON-RPC 2.0 response: jsonrpc "2.0", an id, exactly one of result and error,
    and a frame that can go out as UTF-8."""
    text.encode("utf-8")
    obj = _strict_loads(text)
    assert isinstance(obj, dict)
    assert obj["jsonrpc"] == "2.0"
    assert "id" in obj
    assert set(obj) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"})
    if "error" in obj:
        error = obj["error"]
        assert set(error) <= {"code", "message", "data"}
        assert type(error["code"]) is int
        assert isinstance(error["message"], str)
        assert isinstance(error.get("data", {}), dict)
    return obj


def error_code(incoming: object) -> int:
    assert isinstance(incoming, Invalid), incoming
    return incoming.error.code


def request(**members: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", **members})


surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
any_text = st.text(st.characters() | surrogates, max_size=12)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
json_values_with_surrogates = st.recursive(
    json_scalars | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)

valid_ids = (
    st.none()
    | st.text(max_size=20)
    | st.integers()
    | st.integers(min_value=-(10**300), max_value=10**300)
    | st.integers(min_value=-(2**53), max_value=2**53).map(float)
)


@st.composite
def _messages(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> dict[str, Any]:
    """Objects shaped like requests: each member mostly right, sometimes wrong or missing,
    and now and then a member that does not belong."""
    right: dict[str, st.SearchStrategy[Any]] = {
        "jsonrpc": st.just("2.0"),
        "method": st.sampled_from(["pty.spawn", "pty.read"]) | st.text(max_size=6),
        "params": st.dictionaries(st.text(max_size=6), values, max_size=4),
        "id": valid_ids,
    }
    msg: dict[str, Any] = {}
    for name, strategy in right.items():
        roll = draw(st.integers(0, 5))
        if roll == 0:
            continue
        msg[name] = draw(values if roll == 1 else strategy)
    for name in ("result", "error", "colour"):
        if draw(st.integers(0, 7)) == 0:
            msg[name] = draw(values)
    return msg


def _is_valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return value.is_integer() and abs(value) <= 2**53
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    return value is None or isinstance(value, int)


def _same_id(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


# --------------------------------------------------------------------------------------------
# Error codes


def test_protocol_codes_are_the_spec_codes() -> None:
    assert (PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR) == (
        -32700,
        -32600,
        -32601,
        -32602,
        -32603,
    )
    assert REQUEST_CANCELLED == -32800


def test_application_codes_are_published_and_frozen() -> None:
    # This table is the wire contract: changing a number breaks every client that switches
    # on it. Add rows; never edit one.
    assert dict(APPLICATION_ERROR_CODES) == {
        "pty_error": -32000,
        "session_not_found": -32001,
        "limit_exceeded": -32002,
        "owner_deleted": -32003,
        "closing": -32004,
        "spawn_failed": -32005,
        "not_running": -32006,
        "write_timeout": -32007,
        "invalid_input": -32008,
        "permission_denied": -32009,
        "busy": -32010,
        "draining": -32011,
    }
    with pytest.raises(TypeError):
        APPLICATION_ERROR_CODES["x"] = 1  # type: ignore[index]


def _all_error_classes() -> list[type[errors.PtyError]]:
    found: list[type[errors.PtyError]] = []
    todo: list[type[errors.PtyError]] = [errors.PtyError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__ == errors.__name__]


def test_every_library_error_kind_has_its_own_code() -> None:
    kinds = {cls.kind for cls in _all_error_classes()}
    assert kinds <= set(APPLICATION_ERROR_CODES)
    codes = list(APPLICATION_ERROR_CODES.values())
    assert len(set(codes)) == len(codes)
    assert all(-32099 <= code <= -32000 for code in codes)


EXAMPLE_ERRORS: list[errors.PtyError] = [
    errors.PtyError("generic", extra=1),
    errors.SessionNotFound("pty_1a2b3c4d"),
    errors.LimitExceeded("too many", live_ids=["pty_1", "pty_2"]),
    errors.OwnerDeleted("chat-1"),
    errors.ManagerClosing(),
    errors.SpawnFailed("no such file", command="nope"),
    errors.NotRunning("pty_1", status="exited", exit_code=3, exit_signal=None),
    errors.WriteTimeout("pty_1", bytes_written=10, total_bytes=20, timeout=5.0),
    errors.InvalidInput("args[0]", "too long"),
    errors.PermissionDenied("read", "/etc/shadow", "outside workdir"),
    errors.Draining(12.5),
]


@pytest.mark.parametrize("exc", EXAMPLE_ERRORS, ids=lambda e: e.kind)
def test_error_for_exception(exc: errors.PtyError) -> None:
    error = error_for_exception(exc)
    assert error.code == APPLICATION_ERROR_CODES[exc.kind]
    assert error.message == exc.message
    assert error.data == {"kind": exc.kind, **exc.details()}
    obj = assert_valid_response(encode_error_object("r1", error))
    assert obj["id"] == "r1"
    assert obj["error"] == {"code": error.code, "message": exc.message, "data": error.data}


def test_unknown_kind_gets_the_catch_all_code_but_keeps_its_kind() -> None:
    class Brand(errors.PtyError):
        kind = "brand_new"

    error = error_for_exception(Brand("new", kind="spoofed", where=1))
    assert error.code == PTY_ERROR
    assert error.data == {"kind": "brand_new", "where": 1}


def test_encode_error_survives_unencodable_data() -> None:
    text = encode_error(1, -32001, "m", {"kind": "session_not_found", "x": object()})
    assert assert_valid_response(text)["error"]["data"] == {"kind": "session_not_found"}
    text = encode_error(1, -32001, "m", {"x": math.nan})
    assert "data" not in assert_valid_response(text)["error"]


def test_encode_result_refuses_non_json() -> None:
    with pytest.raises(ValueError):
        encode_result(1, math.inf)
    with pytest.raises(TypeError):
        encode_result(1, object())


def test_error_helpers() -> None:
    assert wire.method_not_found("pty.spwn") == ErrorObject(-32601, "Method not found: pty.spwn")
    assert wire.internal_error().code == -32603
    assert wire.request_cancelled().code == -32800


# --------------------------------------------------------------------------------------------
# Encoding


def test_encoding_is_compact_and_keeps_unicode() -> None:
    assert encode_result(1, {"a": "é"}) == '{"jsonrpc":"2.0","id":1,"result":{"a":"é"}}'
    assert encode_notification("pty.exited", {"id": "x"}) == (
        '{"jsonrpc":"2.0","method":"pty.exited","params":{"id":"x"}}'
    )
    assert encode_notification("ping") == '{"jsonrpc":"2.0","method":"ping"}'
    assert encode_request(7, "pty.list") == '{"jsonrpc":"2.0","id":7,"method":"pty.list"}'


def test_lone_surrogates_are_escaped_on_the_way_out() -> None:
    text = encode_result("\ud800", {"k\udfff": "a\ud83d\ude00b😀"})
    text.encode("utf-8")
    assert _strict_loads(text) == {
        "jsonrpc": "2.0",
        "id": "\ud800",
        "result": {"k\udfff": "a😀b😀"},
    }


@given(json_values_with_surrogates)
def test_encoded_frames_always_encode_to_utf8(value: Any) -> None:
    assert_valid_response(encode_result(1, value))
    assert_valid_response(encode_error(None, -32000, "m", {"v": value}))
    notification = encode_notification("n", {"v": value})
    notification.encode("utf-8")
    assert _strict_loads(notification)["params"] == {"v": value}


# --------------------------------------------------------------------------------------------
# Parsing: examples


def test_request_and_notification() -> None:
    assert parse_message(request(id=1, method="pty.list")) == Request(1, "pty.list", {})
    assert parse_message(request(id="a", method="m", params={"x": [1]})) == Request(
        "a", "m", {"x": [1]}
    )
    assert parse_message(request(id=None, method="m")) == Request(None, "m", {})
    assert parse_message(request(method="m", params={"a": 1})) == Notification("m", {"a": 1})
    assert parse_message(request(method="m").encode()) == Notification("m", {})


@pytest.mark.parametrize(
    "frame",
    [
        "",
        "{",
        "nul",
        '{"jsonrpc": "2.0", "id": 1, "method": "m",}',
        b"\xff\xfe",
        b'{"jsonrpc":"2.0","id":1,"method":"\xc3"}',
        "NaN",
        "-Infinity",
        '{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":NaN}}',
        '{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":Infinity}}',
        '{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":1e999}}',
        '{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":-1e999}}',
        "1" * 5000,
        "\ufeff{}",
        b"\xef\xbb\xbf{}",
    ],
)
def test_parse_errors_answer_with_null_id(frame: str | bytes) -> None:
    incoming = parse_message(frame)
    assert error_code(incoming) == PARSE_ERROR
    assert isinstance(incoming, Invalid)
    assert assert_valid_response(incoming.response)["id"] is None


@pytest.mark.parametrize(
    "frame",
    [
        "[" * 100_000,
        "[" * 100_000 + "]" * 100_000,
        '{"a":' * 100_000 + "1" + "}" * 100_000,
        request(id=1, method="m")[:-1] + ',"params":{"x":' + "[" * 100_000 + "]" * 100_000 + "}}",
    ],
)
def test_deep_nesting_is_a_parse_error_not_a_crash(frame: str) -> None:
    incoming = parse_message(frame)
    assert error_code(incoming) == PARSE_ERROR
    assert isinstance(incoming, Invalid)
    assert_valid_response(incoming.response)


def test_moderate_nesting_is_fine() -> None:
    params = {"x": json.loads("[" * 100 + "]" * 100)}
    assert parse_message(request(id=1, method="m", params=params)) == Request(1, "m", params)


@pytest.mark.parametrize("frame", ["[]", "[1]", request(id=1, method="m").join("[]")])
def test_batches_are_refused_as_a_whole(frame: str) -> None:
    incoming = parse_message(frame)
    assert isinstance(incoming, Invalid)
    assert incoming.id is None
    assert incoming.error.code == INVALID_REQUEST
    assert "batch" in incoming.error.message


@pytest.mark.parametrize("frame", ["1", '"x"', "null", "true", "1.5"])
def test_non_objects_are_invalid_requests(frame: str) -> None:
    incoming = parse_message(frame)
    assert error_code(incoming) == INVALID_REQUEST
    assert isinstance(incoming, Invalid) and incoming.id is None


@pytest.mark.parametrize(
    ("frame", "echoed"),
    [
        (request(id=4, method="m", jsonrpc="1.0"), 4),
        (json.dumps({"id": 4, "method": "m"}), 4),
        (request(id=4, method="m", jsonrpc=2.0), 4),
        (request(id=4), 4),
        (request(id=4, method=5), 4),
        (request(id=4, method=None), 4),
        (request(id=4, method="m", params="x"), 4),
        (request(id=4, method="m", params=None), 4),
        (request(id=4, method="m", colour="red"), 4),
        (request(method=1, params="bar"), None),
        (request(method="m", colour="red"), None),
        (json.dumps({}), None),
        # A repeated name anywhere: two parsers could disagree on which value counts.
        ('{"jsonrpc":"2.0","id":5,"method":"m","params":{"a":1,"a":2}}', 5),
        ('{"jsonrpc":"2.0","id":5,"method":"m","method":"n"}', 5),
        ('{"jsonrpc":"2.0","id":5,"id":6,"method":"m"}', None),
        # Lone surrogates decode in Python but are not Unicode.
        (r'{"jsonrpc":"2.0","id":5,"method":"\ud800"}', 5),
        (r'{"jsonrpc":"2.0","id":5,"method":"m","params":{"\uDC00":1}}', 5),
        (request(id=5, method="m", params={"a": "\udfff"}), 5),
        (r'{"jsonrpc":"2.0","id":"\ud800","method":"m"}', None),
    ],
)
def test_invalid_requests(frame: str, echoed: Any) -> None:
    incoming = parse_message(frame)
    assert error_code(incoming) == INVALID_REQUEST
    assert isinstance(incoming, Invalid)
    assert _same_id(incoming.id, echoed)
    assert _same_id(assert_valid_response(incoming.response)["id"], echoed)


def test_valid_surrogate_pairs_are_fine() -> None:
    frame = r'{"jsonrpc":"2.0","id":1,"method":"m","params":{"t":"\ud83d\ude00"}}'
    assert parse_message(frame) == Request(1, "m", {"t": "😀"})


@pytest.mark.parametrize(
    "bad_id", ["true", "false", "1.5", "-0.25", "1e300", "9007199254740994.0", "{}", "[]", "[1]"]
)
def test_invalid_ids_are_answered_with_null(bad_id: str) -> None:
    incoming = parse_message(f'{{"jsonrpc":"2.0","id":{bad_id},"method":"m"}}')
    assert error_code(incoming) == INVALID_REQUEST
    assert isinstance(incoming, Invalid)
    assert incoming.id is None
    assert "id" in incoming.error.message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0", 0),
        ("-7", -7),
        ("123456789012345678901234567890123456789", 123456789012345678901234567890123456789),
        ('"abc"', "abc"),
        ('""', ""),
        ("null", None),
        ("2.0", 2.0),
        ("1E2", 100.0),
        ("9007199254740992.0", 2.0**53),
    ],
)
def test_ids_are_echoed_exactly(raw: str, expected: Any) -> None:
    incoming = parse_message(f'{{"jsonrpc":"2.0","id":{raw},"method":"m"}}')
    assert isinstance(incoming, Request)
    assert _same_id(incoming.id, expected)
    echoed = assert_valid_response(encode_result(incoming.id, None))["id"]
    assert _same_id(echoed, expected)


def test_large_int_id_keeps_every_digit() -> None:
    big = 10**200 + 1
    incoming = parse_message(request(id=big, method="m"))
    assert isinstance(incoming, Request) and incoming.id == big
    assert str(big) in encode_result(incoming.id, 0)


def test_positional_params() -> None:
    incoming = parse_message(request(id=9, method="pty.kill", params=["pty_1"]))
    assert error_code(incoming) == INVALID_PARAMS
    assert isinstance(incoming, Invalid) and incoming.id == 9
    # A notification is never answered, not even about its params.
    assert isinstance(parse_message(request(method="pty.kill", params=["pty_1"])), Ignored)


@pytest.mark.parametrize(
    ("frame", "id"),
    [
        (request(id=1, result=None), 1),
        (request(id="x", error={"code": 1, "message": "m"}), "x"),
        (json.dumps({"result": 1}), None),
        (request(id=True, error="garbage"), None),
    ],
)
def test_responses_from_a_client_are_never_answered(frame: str, id: Any) -> None:
    incoming = parse_message(frame)
    assert isinstance(incoming, Ignored)
    assert _same_id(incoming.id, id)


def test_non_bytes_input_is_a_parse_error() -> None:
    incoming = parse_message(12)  # type: ignore[arg-type]
    assert error_code(incoming) == PARSE_ERROR


# --------------------------------------------------------------------------------------------
# Parsing: properties


@given(st.text() | st.binary())
def test_parse_message_never_raises_on_any_frame(frame: str | bytes) -> None:
    incoming = parse_message(frame)
    if isinstance(incoming, Invalid):
        assert_valid_response(incoming.response)


jsonish_text = st.text(
    st.sampled_from([*'{}[]",:0123456789.eE+- \\/ubdfnrtaslNIy', "\ud800", "é"]),
    max_size=60,
)


@given(jsonish_text)
def test_parse_message_never_raises_on_json_like_text(frame: str) -> None:
    incoming = parse_message(frame)
    if isinstance(incoming, Invalid):
        assert_valid_response(incoming.response)


@given(json_values_with_surrogates)
def test_parse_message_never_raises_on_any_json_value(value: Any) -> None:
    for frame in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        incoming = parse_message(frame)
        if isinstance(incoming, Invalid):
            assert_valid_response(incoming.response)
        if not isinstance(value, dict):
            assert isinstance(incoming, Invalid) and incoming.id is None


@given(_messages(json_values) | _messages(json_values_with_surrogates))
def test_message_like_objects_are_classified_and_answered_with_their_id(
    msg: dict[str, Any],
) -> None:
    incoming = parse_message(json.dumps(msg))
    has_valid_id = "id" in msg and _is_valid_id(msg["id"])
    response_shaped = "method" not in msg and ("result" in msg or "error" in msg)
    if response_shaped:
        assert isinstance(incoming, Ignored)
    elif isinstance(incoming, Ignored):
        assert "id" not in msg and isinstance(msg.get("params"), list)
    elif isinstance(incoming, Notification):
        assert "id" not in msg
    elif isinstance(incoming, Request):
        assert has_valid_id and _same_id(incoming.id, msg["id"])
        assert incoming.method == msg["method"]
        assert incoming.params == msg.get("params", {})
    else:
        assert isinstance(incoming, Invalid)
        expected = msg["id"] if has_valid_id else None
        assert _same_id(incoming.id, expected)
        assert _same_id(assert_valid_response(incoming.response)["id"], expected)
        assert incoming.error.code in (INVALID_REQUEST, INVALID_PARAMS)


@given(
    valid_ids,
    st.text(max_size=20),
    st.none() | st.dictionaries(st.text(max_size=8), json_values, max_size=5),
)
def test_requests_round_trip(id: Any, method: str, params: dict[str, Any] | None) -> None:
    incoming = parse_message(encode_request(id, method, params))
    assert isinstance(incoming, Request)
    assert _same_id(incoming.id, id)
    assert incoming.method == method
    assert incoming.params == (params or {})
    notification = parse_message(encode_notification(method, params))
    assert notification == Notification(method, params or {})


@given(valid_ids, json_values)
def test_responses_round_trip(id: Any, result: Any) -> None:
    reply = parse_server_message(assert_valid_response_text(encode_result(id, result)))
    assert isinstance(reply, Response)
    assert _same_id(reply.id, id) and reply.result == result and reply.error is None
    data = {"kind": "closing", "v": result}
    reply = parse_server_message(assert_valid_response_text(encode_error(id, -32004, "m", data)))
    assert reply == Response(id, error=ErrorObject(-32004, "m", data))
    assert _same_id(reply.id, id)


def assert_valid_response_text(text: str) -> str:
    assert_valid_response(text)
    return text


# --------------------------------------------------------------------------------------------
# The client-side parser


@pytest.mark.parametrize(
    "frame",
    [
        "nope",
        "[]",
        request(),
        request(id=1),
        request(id=1, result=1, error={"code": 1, "message": "m"}),
        request(id=1.5, result=1),
        request(id=1, result=1, extra=1),
        request(id=1, error={"code": "1", "message": "m"}),
        request(id=1, error={"code": True, "message": "m"}),
        request(id=1, error={"code": 1}),
        request(id=1, error={"code": 1, "message": "m", "data": 5}),
        request(id=1, method="m"),
        request(method=1),
        request(method="m", params=[1]),
        json.dumps({"jsonrpc": "1.0", "id": 1, "result": 1}),
        '{"jsonrpc":"2.0","id":1,"result":1,"result":2}',
    ],
)
def test_malformed_server_messages(frame: str) -> None:
    assert isinstance(parse_server_message(frame), MalformedResponse)


def test_server_notifications() -> None:
    frame = encode_notification("pty.output", {"id": "pty_1", "offset": 0, "data": "aGk="})
    assert parse_server_message(frame) == Notification(
        "pty.output", {"id": "pty_1", "offset": 0, "data": "aGk="}
    )


@given(
    session_id=st.text(),
    offset=st.integers(min_value=0, max_value=2**63),
    data=st.binary(max_size=512),
    gap=st.booleans(),
)
def test_output_notification_is_the_generic_encoding(
    session_id: str, offset: int, data: bytes, gap: bool
) -> None:
    """The hand-built pty.output frame is byte for byte what the JSON encoder writes."""
    chunk = OutputChunk(offset=offset, data=data, gap=gap)
    frame = wire.output_frame(session_id, chunk)
    assert frame == wire.notification_frame(wire.OUTPUT, wire.SessionOutput.of(session_id, chunk))
    params = json.loads(frame)["params"]
    assert base64.b64decode(params["data"]) == data
    assert params["next_offset"] == offset + len(data)


# --------------------------------------------------------------------------------------------
# Params


@attrs.frozen(kw_only=True)
class SpawnLike:
    command: str
    args: list[str] = attrs.Factory(list)
    owner: str = "default"
    rows: int = 24
    timeout: float | None = None
    env: dict[str, str] | None = None
    notify_on_exit: bool = True


@attrs.frozen(kw_only=True)
class Size:
    rows: int
    cols: int


@attrs.frozen(kw_only=True)
class Exotic:
    mode: typing.Literal["raw", "text", 1] = "raw"
    tags: frozenset[str] = frozenset()
    pair: tuple[int, str] | None = None
    numbers: tuple[float, ...] = ()
    either: int | str = 0
    size: Size | None = None


CONVERTER = make_converter()


def invalid(params: dict[str, Any], cls: type[Any] = SpawnLike) -> InvalidParams:
    with pytest.raises(InvalidParams) as info:
        structure_params(CONVERTER, params, cls)
    return info.value


def test_good_params() -> None:
    params = {"command": "ls", "args": ["-l"], "rows": 5, "timeout": 2, "env": {"A": "b"}}
    assert structure_params(CONVERTER, params, SpawnLike) == SpawnLike(
        command="ls", args=["-l"], rows=5, timeout=2.0, env={"A": "b"}
    )
    assert structure_params(CONVERTER, {"command": "x"}, SpawnLike) == SpawnLike(command="x")
    timeout = structure_params(CONVERTER, {"command": "x", "timeout": 2}, SpawnLike).timeout
    assert type(timeout) is float


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"command": "x", "args": ["a", "b", "c", 4]}, "args[3]: expected string, got integer"),
        ({"command": "x", "rows": "5"}, "rows: expected integer, got string"),
        ({"command": "x", "rows": True}, "rows: expected integer, got boolean"),
        ({"command": "x", "rows": 5.5}, "rows: expected integer, got number"),
        ({"command": 5}, "command: expected string, got integer"),
        ({"command": None}, "command: expected string, got null"),
        ({}, "command: required field missing"),
        ({"command": "x", "colour": "red"}, "unknown field: colour"),
        ({"command": "x", "args": "abc"}, "args: expected array, got string"),
        ({"command": "x", "args": {"a": "b"}}, "args: expected array, got object"),
        ({"command": "x", "env": {"HOME": 1}}, 'env["HOME"]: expected string, got integer'),
        ({"command": "x", "env": ["HOME"]}, "env: expected object, got array"),
        ({"command": "x", "timeout": "1"}, "timeout: expected number or null, got string"),
        ({"command": "x", "timeout": False}, "timeout: expected number or null, got boolean"),
        ({"command": "x", "timeout": 10**400}, "timeout: number out of range"),
        ({"command": "x", "notify_on_exit": 1}, "notify_on_exit: expected boolean, got integer"),
        (
            {"command": "x", "notify_on_exit": "true"},
            "notify_on_exit: expected boolean, got string",
        ),
    ],
)
def test_bad_params_name_the_field(params: dict[str, Any], message: str) -> None:
    exc = invalid(params)
    assert exc.message == message
    error = exc.to_error()
    assert error.code == INVALID_PARAMS
    assert error.message == f"Invalid params: {message}"
    assert_valid_response(encode_error_object(1, error))


def test_every_problem_is_reported() -> None:
    exc = invalid({"args": [1], "owner": 2, "colour": 3, "shade": 4})
    assert exc.message == (
        "command: required field missing; args[0]: expected string, got integer; "
        "owner: expected string, got integer; unknown field: colour; unknown field: shade"
    )
    assert exc.to_error().data == {
        "errors": [
            {"path": "command", "problem": "required field missing"},
            {"path": "args[0]", "problem": "expected string, got integer"},
            {"path": "owner", "problem": "expected string, got integer"},
            {"path": "colour", "problem": "unknown field"},
            {"path": "shade", "problem": "unknown field"},
        ],
        "error_count": 5,
    }


def test_many_problems_are_summarised() -> None:
    exc = invalid({"command": "x", "args": list(range(100_000))})
    assert exc.message.endswith("(and 99995 more)")
    assert len(exc.problems) == 100_000
    data = exc.to_error().data
    assert data is not None and len(data["errors"]) == 5 and data["error_count"] == 100_000


def test_integral_floats_are_integers() -> None:
    # Clients with a single number type (JavaScript) may send 5.0 for 5.
    assert structure_params(CONVERTER, {"command": "x", "rows": 5.0}, SpawnLike).rows == 5


def test_exotic_shapes() -> None:
    ok = structure_params(
        CONVERTER,
        {"mode": 1, "tags": ["a", "a"], "pair": [1, "x"], "numbers": [1, 2.5], "either": "s"},
        Exotic,
    )
    assert ok == Exotic(
        mode=1, tags=frozenset({"a"}), pair=(1, "x"), numbers=(1.0, 2.5), either="s"
    )
    assert invalid({"mode": True}, Exotic).message == 'mode: expected one of "raw", "text", 1'
    assert invalid({"mode": "1"}, Exotic).message == 'mode: expected one of "raw", "text", 1'
    assert invalid({"tags": "ab"}, Exotic).message == "tags: expected array, got string"
    assert invalid({"pair": [1]}, Exotic).message == "pair: expected an array of 2 items, got 1"
    assert invalid({"pair": [1, 2]}, Exotic).message == "pair[1]: expected string, got integer"
    assert invalid({"numbers": "12"}, Exotic).message == "numbers: expected array, got string"
    assert invalid({"either": True}, Exotic).message == (
        "either: expected integer or string, got boolean"
    )
    assert invalid({"size": {"rows": 1}}, Exotic).message == "size.cols: required field missing"
    assert invalid({"size": {"rows": 1, "cols": 2, "x": 0}}, Exotic).message == (
        "unknown field: size.x"
    )
    assert invalid({"size": [1, 2]}, Exotic).message == "size: expected object, got array"


def test_class_validators_become_invalid_params() -> None:
    @attrs.frozen
    class Positive:
        n: int = attrs.field(validator=attrs.validators.gt(0))

    assert "n" in invalid({"n": 0}, Positive).message


def test_params_must_be_an_object() -> None:
    assert invalid([1], SpawnLike).message == "params must be an object"  # type: ignore[arg-type]


def test_an_unsupported_parameter_class_is_our_bug_not_the_clients() -> None:
    class Opaque:
        pass

    @attrs.frozen
    class Odd:
        thing: Opaque

    with pytest.raises(Exception) as info:
        structure_params(CONVERTER, {"thing": 1}, Odd)
    assert not isinstance(info.value, InvalidParams)


spawn_fields = st.sampled_from(
    ["command", "args", "owner", "rows", "timeout", "env", "notify_on_exit", "colour"]
)


@given(st.dictionaries(spawn_fields | st.text(max_size=5), json_values_with_surrogates))
def test_arbitrary_params_only_ever_raise_invalid_params(params: dict[str, Any]) -> None:
    for cls in (SpawnLike, Exotic):
        try:
            structure_params(CONVERTER, params, cls)
        except InvalidParams as exc:
            assert exc.message
            assert_valid_response(encode_error_object(1, exc.to_error()))


@given(
    st.builds(
        dict,
        command=st.text(),
        args=st.lists(st.text()),
        owner=st.text(),
        rows=st.integers(),
        timeout=st.none() | st.floats(allow_nan=False, allow_infinity=False),
        env=st.none() | st.dictionaries(st.text(), st.text()),
        notify_on_exit=st.booleans(),
    )
)
def test_well_typed_params_always_structure(params: dict[str, Any]) -> None:
    result = structure_params(CONVERTER, params, SpawnLike)
    assert attrs.asdict(result) == params


# --------------------------------------------------------------------------------------------
# The method records


def _typed(tp: Any) -> st.SearchStrategy[Any]:
    """Values of a params field's type (as JSON can carry them: finite floats)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_typed(arg) for arg in args))
    if tp is type(None):
        return st.none()
    if origin is typing.Literal:
        return st.sampled_from(args)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(-(2**63), 2**63)
    if tp is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if tp is str:
        return st.text(max_size=8)
    if origin is list:
        return st.lists(_typed(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(_typed(args[0]), _typed(args[1]), max_size=3)
    assert attrs.has(tp), tp
    return _records(tp)


def _records(cls: type[Any]) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: _typed(hints[f.name]) for f in attrs.fields(cls)})


ALL_SPECS = [*wire.METHODS.values(), wire.CANCEL]


@given(data=st.data())
def test_params_go_out_and_come_back_unchanged(data: Any) -> None:
    """For every method: what the client sends (defaults left out, through JSON) is what the
    server gets."""
    spec = data.draw(st.sampled_from(ALL_SPECS))
    params = data.draw(_records(spec.params))
    assert wire.spec_of(params) is spec
    sent = wire.unstructure_params(params)
    assert all(
        name not in sent
        for name, field in attrs.fields_dict(spec.params).items()
        if field.default is not attrs.NOTHING
        and not isinstance(field.default, attrs.Factory)  # type: ignore[arg-type]
        and getattr(params, name) == field.default
    )
    assert wire.structure_request(json.loads(wire.dumps(sent)), spec.params) == params


def test_every_method_is_declared_once_with_its_result() -> None:
    assert wire.CANCEL.name not in wire.METHODS
    assert len({spec.params for spec in ALL_SPECS}) == len(ALL_SPECS)
    with pytest.raises(TypeError, match="must subclass Params"):
        wire.MethodSpec("pty.spawn", wire.SpawnParams, wire.SessionList)


def test_results_are_read_leniently() -> None:
    """A newer server may add fields: an older client ignores them (but not a missing one)."""
    info = wire.ServerInfo(
        version="1",
        uptime=1.5,
        limits=trio_pty.Limits(),
        counts=wire.ServerCounts(
            sessions=0, by_status={}, owners=0, connections=1, requests_in_flight=1, queued_chars=0
        ),
        environment=wire.ServerEnvironment(mode="inherit", deny={"names": ["X"]}),
        allowed_origins=[],
    )
    sent = json.loads(wire.dumps(wire.unstructure_result(info)))
    assert wire.structure_result(sent, wire.ServerInfo) == info
    newer = {**sent, "colour": "red", "counts": {**sent["counts"], "zombies": 2}}
    newer["limits"]["max_widgets"] = 3
    assert wire.structure_result(newer, wire.ServerInfo) == info
    del newer["version"]
    with pytest.raises(wire.InvalidResult):
        wire.structure_result(newer, wire.ServerInfo)
    # Requests stay strict.
    with pytest.raises(InvalidParams, match="unknown field: colour"):
        wire.structure_request({"colour": "red"}, wire.ServerInfoParams)


@st.composite
def read_pages(draw: st.DrawFn) -> ReadPage:
    """Pages as the buffer makes them: line numbers only grow, with gaps where a search or a
    hidden line skipped some (or none), and any text."""
    first = draw(st.integers(0, 2**40))
    steps = draw(st.lists(st.one_of(st.just(1), st.integers(1, 5)), max_size=30))
    numbers = [first + sum(steps[:i]) for i in range(len(steps))]
    texts = draw(st.lists(st.text(), min_size=len(numbers), max_size=len(numbers)))
    total = (numbers[-1] + 1 if numbers else first) + draw(st.integers(0, 3))
    return ReadPage(
        lines=[Line(n, t) for n, t in zip(numbers, texts, strict=True)],
        total_lines=total,
        first_line=draw(st.integers(0, first)),
        has_more=draw(st.booleans()),
        next_offset=draw(st.integers(0, total)),
        missed_lines=draw(st.integers(0, 5)),
        reason=draw(st.sampled_from([None, "matched", "idle", "exited", "timeout", "prompt"])),
    )


@given(read_pages())
def test_compact_and_object_pages_carry_the_same_lines(page: ReadPage) -> None:
    """What the client makes of the compact form, after the JSON round trip, is exactly the
    object form's page; consecutive numbers are implied, not sent."""
    compact = wire.CompactPage.of(page)
    sent = json.loads(wire.dumps(wire.unstructure_result(compact)))
    assert wire.structure_result(sent, wire.CompactPage).page() == page
    numbers = [line.number for line in page.lines]
    consecutive = numbers == list(range(numbers[0], numbers[0] + len(numbers))) if numbers else True
    assert (sent["numbers"] is None) == consecutive
    assert all(isinstance(text, str) for text in sent["lines"])
    as_object = json.loads(wire.dumps(wire.unstructure_result(page)))
    assert wire.structure_result(as_object, ReadPage) == page


def test_a_compact_page_with_numbers_not_matching_its_lines_is_refused() -> None:
    broken = wire.CompactPage(
        start=0,
        lines=["a", "b"],
        numbers=[3],
        total_lines=5,
        first_line=0,
        has_more=False,
        next_offset=5,
    )
    with pytest.raises(ValueError, match="1 numbers for 2 lines"):
        broken.page()


@given(offset=st.integers(0, 2**53), data=st.binary(max_size=64), gap=st.booleans())
def test_output_travels_as_base64(offset: int, data: bytes, gap: bool) -> None:
    chunk = OutputChunk(offset=offset, data=data, gap=gap)
    raw = wire.unstructure_result(wire.RawOutput.of(chunk))
    assert raw == {
        "offset": offset,
        "data": base64.b64encode(data).decode(),
        "gap": gap,
        "next_offset": offset + len(data),
    }
    back = wire.structure_result(json.loads(wire.dumps(raw)), wire.RawOutput)
    assert (back.offset, back.data, back.gap) == (offset, data, gap)


base64_like = st.text(st.sampled_from("AQaz09+/=-_ \n\x00é"), max_size=16) | st.binary(
    max_size=12
).map(lambda data: base64.b64encode(data).decode())


@given(base64_like)
def test_bytes_accept_exactly_standard_base64(text: str) -> None:
    """Bytes travel as standard base64, checked strictly (by pybase64, for speed): what the
    standard library's strict decoder refuses is refused, what it accepts decodes the same."""
    try:
        expected: bytes | None = base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error is one
        expected = None
    raw = {"offset": 0, "data": text, "gap": False, "next_offset": 0}
    try:
        got: bytes | None = wire.structure_result(raw, wire.RawOutput).data
    except wire.InvalidResult:
        got = None
    assert got == expected


def test_the_exit_notification_names_itself() -> None:
    event = trio_pty.ExitEvent(
        id="pty_1",
        owner="o",
        description="d",
        exit_code=0,
        exit_signal=None,
        timeout_seconds=None,
        timed_out=False,
        output_lines=1,
        last_line="",
    )
    frame = json.loads(wire.notification_frame(wire.EXITED, event))
    assert frame["method"] == frame["params"]["type"] == "pty.exited"


# --------------------------------------------------------------------------------------------
# House rules


_ALLOWED_IMPORTS = ("trio_pty.wire", "trio_pty.model", "trio_pty.errors", "trio_pty.limits")


def test_the_wire_imports_neither_trio_nor_the_layers_above() -> None:
    for path in pathlib.Path(trio_pty.wire.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name != "trio" and not name.startswith("trio."), (path, name)
                if name.startswith("trio_pty"):
                    assert name.startswith(_ALLOWED_IMPORTS), (path, name)
