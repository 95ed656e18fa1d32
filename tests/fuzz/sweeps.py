"""The deterministic sweeps' data: every param of every method with every JSON type it
refuses, and messages of an exact size."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, TypeAlias

import attrs

from tests.fuzz.methods import BASE_PARAMS, METHOD_NAMES, is_union, params_of

SAMPLES: dict[str, Any] = {
    "null": None,
    "boolean": True,
    "integer": 7,
    "number": 1.5,
    "string": "s",
    "array": [],
    "object": {},
}


def accepted(tp: Any) -> set[str]:
    """The JSON types a param of type `tp` accepts (integral numbers count for int)."""
    if is_union(tp):
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
        members = [m for m in typing.get_args(tp) if m is not type(None)] if is_union(tp) else [tp]
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
