"""Structured log events, and the JSON format of `trio-pty serve --log-format json`.

An event is an ordinary `logging` record that also carries a name and its fields, given as
`log.info("session %s started ...", ..., extra=event("spawn", id=..., owner=...))`: the text
format shows the message as before, `JsonFormatter` writes one JSON object per line with
`ts`, `level`, `logger`, `event` (null for a record that is no event), `msg`, the fields, and
`exc` (the traceback) when there is one.

What a field may hold: ids, owners, the program's name (never its arguments), numbers, exit
statuses, peers' addresses. Never the token, an environment value, or anything written to or
read from a session: the callers keep to that, and tests/test_ops.py checks a real server's
log for planted values.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

__all__ = ["EVENT_FIELDS", "JsonFormatter", "event", "writes_json"]

#: The attribute of a log record that holds an event's fields.
EVENT_FIELDS: Final = "trio_pty_fields"
_BASE: Final = ("ts", "level", "logger", "event", "msg", "exc")


def event(name: str, **fields: Any) -> dict[str, Any]:
    """The `extra` of a log call that records event `name` with `fields`."""
    return {"event": name, EVENT_FIELDS: fields}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (JSON escapes every newline in a string)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None),
            "msg": record.getMessage(),
        }
        fields = getattr(record, EVENT_FIELDS, None)
        if isinstance(fields, dict):
            entry.update((key, value) for key, value in fields.items() if key not in _BASE)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


def writes_json(logger: logging.Logger) -> bool:
    """Whether this logger's records reach a handler that writes JSON lines: a helper
    process that shares the stream (the keeper) then writes JSON lines too."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(isinstance(h.formatter, JsonFormatter) for h in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False
