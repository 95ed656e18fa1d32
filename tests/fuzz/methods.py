"""The methods under fuzz: their params and types, and for each method params it accepts
(`BASE_PARAMS`: a test fails until a new method has them)."""

from __future__ import annotations

import types
import typing
from typing import Any

from tests.fuzz.oracle import CANCEL
from trio_pty.wire import METHODS, CancelParams

FAKE_SESSION = "pty_00000000"


def params_of(method: str) -> dict[str, Any]:
    """The method's params class fields and their types (resolved annotations)."""
    if method == CANCEL:
        cls: type[Any] = CancelParams
    else:
        cls = METHODS[method].params
    return dict(typing.get_type_hints(cls))


METHOD_NAMES = [*METHODS, CANCEL]


def is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


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
    "pty.get": {"id": FAKE_SESSION},
    "pty.exec": {"command": "true"},
    "pty.record": {"id": FAKE_SESSION},
    "pty.resize": {"id": FAKE_SESSION, "rows": 24, "cols": 80},
    "pty.signal": {"id": FAKE_SESSION, "signal": "INT"},
    "pty.attach": {"id": FAKE_SESSION},
    "pty.detach": {"id": FAKE_SESSION},
    "owner.delete": {"owner": "fuzz-nobody"},
    "server.info": {},
    "server.drain": {},
    CANCEL: {"id": 1},
}
