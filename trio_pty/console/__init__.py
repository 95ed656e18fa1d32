"""The command-line client: `trio-pty spawn | shell | list | read | write | send | run | ...`.

`trio_pty.cli` is the entry point (and `serve`); the client verbs are here:

- `arguments`: each verb's arguments, and the values requests are built from;
- `verbs`: the request record each verb builds, how it prints the result (`tables`);
- `attach`: your terminal connected to a session (imported only when that verb runs: it
  follows the output with RE2, which no other verb needs);
- `keys` and `modes` (pure): detach-key sequences; what a program turned on in your
  terminal and what turns it off;
- `common`: exit statuses, messages, JSON output, the connection options.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Final

from trio_pty.client.client import (
    DEFAULT_URL,
    ConnectionFailed,
    ConnectionLost,
    RpcError,
    TrioPtyClient,
    connect,
    split_url,
)
from trio_pty.console.advice import explain
from trio_pty.console.arguments import add_attach, add_verbs, check, check_attach, claim_extra_words
from trio_pty.console.common import (
    EXIT_CONNECTION,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    client_options,
    client_token,
    fail,
)
from trio_pty.console.targets import resolve_target
from trio_pty.console.verbs import VERBS, Verb

__all__ = [
    "CLIENT_VERBS",
    "EXIT_CONNECTION",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "add_client_verbs",
    "client_options",
    "prepare",
    "run_client",
]


async def _attach(client: TrioPtyClient, args: argparse.Namespace) -> int:
    """`attach`, imported when it runs (RE2 and the terminal's modes are its alone)."""
    from trio_pty.console.attach import attach

    return await attach(client, args)


_ALL: dict[str, Verb] = {**VERBS, "attach": _attach}


#: The client verbs' names.
CLIENT_VERBS: Final = frozenset(_ALL)


def add_client_verbs(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], only: str | None = None
) -> None:
    """Every client verb (or, `only`, one of them), on the top parser's subparsers."""
    add_verbs(commands, only)
    if only in (None, "attach"):
        add_attach(commands)


def prepare(args: argparse.Namespace, extra: Sequence[str]) -> None:
    """Finish the arguments of a client verb (words argparse left over) and find the usage
    errors that need no server. Raises UsageError."""
    claim_extra_words(args, extra)
    check(args)
    if args.command == "attach":
        check_attach(args)


async def run_client(args: argparse.Namespace) -> int:
    """Connect, run the verb, and turn what went wrong into a message and an exit status."""
    url = args.url or os.environ.get("TRIO_PTY_URL") or DEFAULT_URL
    token = client_token(args)
    if args.url and split_url(args.url)[1] is not None:
        fail(
            "warning: the token in --url is in this process's command line, which every "
            "local user can read: set TRIO_PTY_URL or TRIO_PTY_TOKEN instead"
        )
    verb = _ALL[args.command]
    try:
        async with connect(url, token) as client:
            try:
                if "id" in vars(args):  # an id, a name, a prefix, or none (attach)
                    await resolve_target(client, args)
                return await verb(client, args)
            except RpcError as exc:
                fail(await explain(client, exc, args))
                return EXIT_ERROR
    except RpcError as exc:
        fail(f"error: {exc.message} [{exc.kind or exc.code}]")
        return EXIT_ERROR
    except UsageError as exc:
        fail(f"error: {exc}")
        return EXIT_USAGE
    except ConnectionFailed as exc:
        hint = ""
        if exc.status == 401:
            hint = "; set --token or TRIO_PTY_TOKEN"
        elif exc.status == 403:
            hint = "; the server refuses this Origin or Host"
        fail(f"{exc}{hint}")
        return EXIT_CONNECTION
    except ConnectionLost as exc:
        fail(f"connection lost: {exc}")
        return EXIT_CONNECTION
