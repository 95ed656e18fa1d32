"""What the fuzz sends: a frame (with the answer it expects, when the oracle cannot say) and
a batch of them."""

from __future__ import annotations

from typing import Any, TypeAlias

import attrs

from tests.fuzz.frames import OP_BINARY, OP_TEXT
from tests.fuzz.oracle import Expect


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
