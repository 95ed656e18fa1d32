"""What the package exports: every public module's `__all__` names something that exists,
and the public API (`trio_pty.__all__`) exports every type its public signatures use, so a
caller can annotate what `Manager` hands out (a `CompactPage`, a `DrainStatus`, an
`Attachment`) or takes (an `Authorizer`) without reaching into private modules."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
import typing
from typing import Any

import pytest

import trio_pty
from trio_pty.manager import Manager, open_manager


def public_modules() -> list[str]:
    """Every module of the package whose dotted name has no `_`-prefixed part."""
    found = ["trio_pty"]
    for info in pkgutil.walk_packages(trio_pty.__path__, "trio_pty."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(info.name)
    return found


@pytest.mark.parametrize("name", public_modules())
def test_every_name_in_all_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", ())
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    missing = [symbol for symbol in exported if not hasattr(module, symbol)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


def test_the_root_lists_every_name_it_resolves() -> None:
    """`dir(trio_pty)` shows the lazy names too (editors and `from trio_pty import *`)."""
    assert set(trio_pty.__all__) <= set(dir(trio_pty))
    assert isinstance(trio_pty.__version__, str)
    with pytest.raises(AttributeError):
        trio_pty.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def classes_in(annotation: Any) -> set[type]:
    """The classes an annotation mentions, however nested (unions, generics, callables)."""
    if isinstance(annotation, list):  # the parameters of a Callable
        return set().union(*(classes_in(item) for item in annotation))
    found: set[type] = set()
    if isinstance(annotation, type) and not isinstance(annotation, types.GenericAlias):
        found.add(annotation)
    for argument in typing.get_args(annotation):
        found |= classes_in(argument)
    return found


def public_callables() -> list[Any]:
    """open_manager and every public method and property of Manager, overloads included."""
    found: list[Any] = [open_manager]
    for name, member in inspect.getmembers(Manager):
        if name.startswith("_"):
            continue
        function = member.fget if isinstance(member, property) else member
        if callable(function):
            found += [function, *typing.get_overloads(function)]
    return found


def test_the_public_api_exports_every_type_its_signatures_use() -> None:
    used: dict[str, set[str]] = {}
    for function in public_callables():
        # Manager, named in the annotations of functions bound as its methods (`exec =
        # oneshot.execute`), is imported there only for type checking.
        for annotation in typing.get_type_hints(function, localns={"Manager": Manager}).values():
            for cls in classes_in(annotation):
                if cls.__module__.split(".")[0] == "trio_pty":
                    used.setdefault(cls.__name__, set()).add(function.__qualname__)
    assert used, "found no signature types: the annotations were not read"
    missing = {name: sorted(where) for name, where in used.items() if name not in trio_pty.__all__}
    assert not missing, f"used in public signatures but not exported by trio_pty: {missing}"
    for name in used:
        assert getattr(trio_pty, name).__name__ == name


def test_the_exports_are_what_the_signatures_name() -> None:
    """The lazy root hands out the very classes the manager uses, not copies."""
    hints = typing.get_type_hints(Manager.drain)
    assert hints["return"] is trio_pty.DrainStatus
    assert classes_in(typing.get_type_hints(open_manager)["authorizer"]) >= {trio_pty.Authorizer}
    assert trio_pty.Manager is Manager and trio_pty.open_manager is open_manager
