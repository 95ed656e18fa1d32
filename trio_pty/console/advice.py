"""What the CLI says when the server refuses: the server's messages speak the protocol (a
`busy` session says to read with `wait=Wait(prompt=True)`), a person at a shell needs the
verbs and options that do it; a session that is not found may be another owner's (the hint
is `--owner`), or one that ended and was evicted to make room."""

from __future__ import annotations

import argparse
from typing import Final

from trio_pty.client.client import RpcError, TrioPtyClient
from trio_pty.console.common import PROG
from trio_pty.wire import ListParams

__all__ = ["explain"]

# The request fields a CLI option sets, for `invalid_input`'s `field`.
_OPTION_OF: Final = {
    "wait.timeout_ms": "--wait-ms",
    "timeout_ms": "--wait-ms",
    "yield_ms": "--wait-ms",
    "wait.idle_ms": "--idle",
    "wait.pattern": "--pattern",
    "pattern": "--pattern",
    "limit": "--limit",
    "tail": "--tail",
    "offset": "--offset",
    "rows": "--rows",
    "cols": "--cols",
    "timeout": "--timeout",
    "idle_timeout": "--idle-timeout",
    "workdir": "--workdir",
    "env": "--env",
    "name": "--name",
    "reader": "--reader",
    "command": "--command",
    "data": "TEXT",
}


async def explain(client: TrioPtyClient, exc: RpcError, args: argparse.Namespace) -> str:
    """The line to print for a refusal (`error: MESSAGE [kind]`, and a hint when there is
    one); asks the server once more (`pty.list`) to find whose session an id is."""
    label = exc.kind or str(exc.code)
    message = exc.message
    if exc.kind == "busy":
        message = _busy(exc)
    elif exc.kind == "limit_exceeded":
        message += f" ({PROG} list; {PROG} kill ID)"
    elif exc.kind == "invalid_input":
        option = _OPTION_OF.get(str(exc.data.get("field")))
        if option is not None:
            message += f" (option {option})"
    elif exc.kind == "session_not_found" and not exc.data.get("evicted"):
        owner = await _owner_of(client, str(exc.data.get("id")), args)
        if owner is not None:
            message += f"; it is owner {owner!r}'s: add --owner {owner}"
    return f"error: {message} [{label}]"


def _busy(exc: RpcError) -> str:
    session = exc.data.get("id")
    command = str(exc.data.get("command", ""))
    shown = command if len(command) <= 80 else command[:79] + "…"
    return (
        f"session {session} is busy: command {exc.data.get('number')} ({shown!r}) is still "
        f"running. Wait for it ({PROG} wait {session} --prompt), type its input "
        f"({PROG} send {session} WORDS) or interrupt it ({PROG} signal {session} INT), "
        "then run again."
    )


async def _owner_of(client: TrioPtyClient, session_id: str, args: argparse.Namespace) -> str | None:
    """The other owner whose session `session_id` is, when this token may see it."""
    try:
        sessions = (await client.request(ListParams(all_owners=True))).sessions
    except RpcError:  # a token of one owner: it may not look further
        return None
    mine = getattr(args, "owner", None)
    for info in sessions:
        if info.id == session_id and info.owner != mine:
            return info.owner
    return None
