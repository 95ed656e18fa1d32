"""The two converters between JSON and the wire records, and why they differ.

- **Requests are strict** (`structure_params`): every JSON value must already have the declared
  type and unknown fields are refused, so a client bug never silently becomes a different
  request; the `-32602` error names each offending field by its path.
- **Responses are lenient** (`structure_result`): a field the record does not know is ignored,
  so a newer server that adds one does not break an older client.
- **Results go out complete** (`unstructure_result`: every field, in declaration order), and
  **params go out without defaults** (`unstructure_params`), so a newer client asking an older
  server for something both know never sends a field the older one would refuse.

Bytes travel as standard base64 both ways, encoded and checked by pybase64 (SIMD: 40-100x
the standard library's `binascii` here, which caps an attach stream's client at about
200 MB/s of decoding; it accepts and refuses exactly the same text).
"""

from __future__ import annotations

import binascii
import collections.abc
import functools
import json
import math
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import attrs
import cattrs
import pybase64
from cattrs.cols import list_structure_factory, mapping_structure_factory
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    StructureHandlerNotFoundError,
)

from trio_pty.errors import json_type_name
from trio_pty.wire.codec import MAX_REPORTED_PROBLEMS
from trio_pty.wire.codes import INVALID_PARAMS, ErrorObject

__all__ = [
    "InvalidParams",
    "ParamProblem",
    "make_converter",
    "structure_params",
    "structure_result",
    "unstructure_params",
    "unstructure_result",
]

T = TypeVar("T")

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
        errors = [attrs.asdict(p) for p in self.problems[:MAX_REPORTED_PROBLEMS]]
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
    """A converter for request params that refuses to guess. (Long, complexity 17: one
    structure hook per JSON type, each a few lines, registered in one place.)

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
        shown = "; ".join(str(p) for p in problems[:MAX_REPORTED_PROBLEMS])
        hidden = len(problems) - MAX_REPORTED_PROBLEMS
        message = f"{shown} (and {hidden} more)" if hidden > 0 else shown
        raise InvalidParams(message, problems) from exc


# --------------------------------------------------------------------------------------------
# The shared converters


class InvalidResult(Exception):
    """A server's result did not fit the method's result record (a field missing or of the
    wrong type: extra fields are fine). The client reports it as a broken server."""


def b64encode(data: bytes) -> str:
    """Bytes as they travel: standard base64 text."""
    return pybase64.b64encode(data).decode("ascii")


def _b64decode(value: Any, _: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected base64 text, got {json_type_name(value)}")
    return pybase64.b64decode(value, validate=True)


def _with_bytes(converter: cattrs.Converter) -> cattrs.Converter:
    converter.register_unstructure_hook(bytes, b64encode)
    converter.register_structure_hook(bytes, _b64decode)
    return converter


# Each converter is built on first use: a client never structures requests or unstructures
# results, and a CLI call pays for the two it uses only.


@functools.cache
def _requests() -> cattrs.Converter:
    return make_converter()


@functools.cache
def _params_out() -> cattrs.Converter:
    return _with_bytes(cattrs.Converter(omit_if_default=True))


@functools.cache
def _results_out() -> cattrs.Converter:
    return _with_bytes(cattrs.Converter())


@functools.cache
def _results_in() -> cattrs.Converter:
    return _with_bytes(cattrs.Converter(forbid_extra_keys=False))


def structure_request(params: dict[str, Any], cls: type[T]) -> T:
    """A request's params -> `cls`, strictly (`make_converter`); `InvalidParams` names what
    is wrong."""
    return structure_params(_requests(), params, cls)


def unstructure_params(params: Any) -> dict[str, Any]:
    """A params record -> its JSON object, leaving out every field that has its default."""
    result: dict[str, Any] = _params_out().unstructure(params)
    return result


def unstructure_result(result: Any) -> Any:
    """A result or notification record -> JSON: every field, in declaration order."""
    return _results_out().unstructure(result)


def structure_result(value: Any, cls: type[T]) -> T:
    """A result or notification from the server -> `cls`, leniently: fields `cls` does not
    know are ignored (a newer server may add some). Raises `InvalidResult`."""
    try:
        return _results_in().structure(value, cls)
    except (cattrs.BaseValidationError, KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise InvalidResult(f"{cls.__name__}: {exc!r}") from exc
