"""Which session a verb's ID means: an id, a name (`spawn --name build`), or a unique prefix
of an id (`4a3f` or `pty_4a3f`), resolved against the owner's sessions (`pty.list`); with no
ID (`attach`), the owner's most recent session. What matches nothing is sent as given, so the
server says it is not found (and the CLI why: another owner's, or evicted)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Final

from trio_pty.client.client import RpcError, TrioPtyClient
from trio_pty.console.common import UsageError
from trio_pty.model import SessionInfo
from trio_pty.wire import ListParams

__all__ = ["pick", "resolve_target"]

_ID_PREFIX = "pty_"
# A whole id (`pty_<8 hex>`, `pty_<node>_<8 hex>`): sent as it is, without asking first.
_WHOLE_ID: Final = re.compile(r"pty_(?:[A-Za-z0-9-]+_)?[0-9a-f]{8}")


def pick(given: str | None, sessions: Sequence[SessionInfo]) -> str | None:
    """The id `given` means among `sessions` (one owner's, oldest first), or None when it
    means none of them. Raises UsageError for an ambiguous prefix, or for no ID and no
    session."""
    if given is None:
        if not sessions:
            raise UsageError("no session to attach to: give an ID or a name")
        running = [info for info in sessions if info.status == "running"]
        return max(running or sessions, key=lambda info: info.created_at).id
    if any(info.id == given for info in sessions):
        return given
    named = [info for info in sessions if info.name == given]
    if named:  # a running one holds the name; else the latest that ended under it
        running = [info for info in named if info.status == "running"]
        return max(running or named, key=lambda info: info.created_at).id
    prefix = given if given.startswith(_ID_PREFIX) else _ID_PREFIX + given
    matches = [info.id for info in sessions if info.id.startswith(prefix)]
    if len(matches) > 1:
        raise UsageError(f"{given!r} is the start of several ids: {', '.join(matches)}")
    return matches[0] if matches else None


async def resolve_target(client: TrioPtyClient, args: argparse.Namespace) -> None:
    """Replace `args.id` by the id it means (see `pick`), asking the server for the owner's
    sessions once (not for a whole id: names never look like one)."""
    if args.id is not None and _WHOLE_ID.fullmatch(args.id):
        return
    try:
        sessions = (await client.request(ListParams(owner=args.owner))).sessions
    except RpcError:
        if args.id is None:
            raise
        return  # the verb's own request then says what is wrong
    found = pick(args.id, sessions)
    if found is not None:
        args.id = found
