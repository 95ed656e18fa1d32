"""The oracle: what docs/protocol.md says the server answers to one frame, written from the
documentation and independent of `wire.parse_message`."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any, Literal, TypeAlias

import attrs

from trio_pty.wire import METHODS

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


def has_lone_surrogate(value: Any) -> bool:
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
    if duplicate or has_lone_surrogate(value):
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
