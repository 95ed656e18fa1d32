"""What every verb of the command-line client shares: exit statuses, messages, JSON output,
the connection options."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Final

from trio_pty.client.client import DEFAULT_URL
from trio_pty.wire import unstructure_result

__all__ = [
    "EXIT_CONNECTION",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "EXIT_WAIT",
    "PROG",
    "UsageError",
    "client_options",
    "fail",
    "note",
    "plural",
    "print_json",
]

PROG: Final = "trio-pty"

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1  # the server refused the request
EXIT_USAGE: Final = 2
EXIT_CONNECTION: Final = 3  # cannot connect, refused at the handshake, connection lost
EXIT_WAIT: Final = 4  # a wait ended otherwise than asked (its timeout, or the session ended)
EXIT_TIMEOUT: Final = 124  # `run`: the command still runs (as timeout(1) says it)
EXIT_INTERRUPTED: Final = 130


class UsageError(Exception):
    """Arguments that make no request (exit status 2, before connecting)."""


def fail(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def note(message: str) -> None:
    """A remark for the person (stderr), never part of what a script reads."""
    print(message, file=sys.stderr, flush=True)


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def print_json(value: Any) -> None:
    """A result record (or a list of them) as indented JSON, as the server sent it."""
    if isinstance(value, list):
        value = [unstructure_result(item) for item in value]
    else:
        value = unstructure_result(value)
    print(json.dumps(value, indent=2, ensure_ascii=False), flush=True)


def client_token(args: argparse.Namespace) -> str | None:
    """The token to present: `--token` (with a warning on stderr: argv is readable by every
    local user, in `ps` and /proc/PID/cmdline, for as long as the command runs), else
    TRIO_PTY_TOKEN (the environment is readable by the same user only)."""
    given: str | None = getattr(args, "token", None)
    if given:
        fail(
            "warning: --token puts the token in this process's command line, which every "
            "local user can read (ps, /proc/PID/cmdline): set TRIO_PTY_TOKEN instead"
        )
        return given
    return os.environ.get("TRIO_PTY_TOKEN") or None


def client_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """--url, --token, --json: on the top parser and again on each verb (so they may come
    before or after it)."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--url", default=default, help=f"server URL (env TRIO_PTY_URL, default {DEFAULT_URL})"
    )
    parser.add_argument(
        "--token",
        default=default,
        help="access token (prefer env TRIO_PTY_TOKEN: every local user can read argv)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print the result as JSON (for scripts)",
    )
