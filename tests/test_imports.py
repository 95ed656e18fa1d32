"""The layers are pure at run time, not only in source: importing a pure layer or the client
loads neither trio's server side nor the manager, a client verb loads no emulator and no
RE2, and the crash keeper starts on the standard library alone.

Each check runs in a fresh interpreter (this one has imported everything long ago)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from trio_pty.posix import keeper

# What a pure layer must not pull in: the event loop, the manager and its session, the
# terminal emulator.
HEAVY = ("trio", "trio_pty.manager", "trio_pty.session", "avt")
# What no client verb needs: the above except trio (the client speaks WebSocket over trio),
# RE2 (search and attach's mode tracking) and the server side.
NOT_FOR_A_CLIENT = ("trio_pty.manager", "trio_pty.session", "avt", "re2", "trio_pty.server")


def loaded_after(statement: str, names: tuple[str, ...]) -> list[str]:
    """Which of `names` are in sys.modules after running `statement` in a new interpreter."""
    program = (
        f"import json, sys\n{statement}\n"
        f"print(json.dumps([name for name in {list(names)!r} if name in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    found: list[str] = json.loads(done.stdout)
    return found


@pytest.mark.parametrize(
    "module",
    [
        "trio_pty",
        "trio_pty.wire",
        "trio_pty.output",
        "trio_pty.policy",
        "trio_pty.model",
        "trio_pty.errors",
        "trio_pty.rpc.connection",
        "trio_pty.rpc.handshake",
        "trio_pty.rpc.config",
    ],
)
def test_a_pure_layer_loads_no_trio_and_no_manager(module: str) -> None:
    assert loaded_after(f"import {module}", HEAVY) == []


def test_the_client_loads_no_manager_and_no_emulator() -> None:
    assert loaded_after("import trio_pty.client.client", NOT_FOR_A_CLIENT) == []


def test_the_command_line_client_loads_only_the_client() -> None:
    """All that `trio-pty list` imports, up to connecting (refused: nothing listens on port
    1) and reporting that it could not."""
    statement = (
        "from trio_pty import cli\n"
        "assert cli.main(['--url', 'ws://127.0.0.1:1/rpc', 'list']) == cli.EXIT_CONNECTION"
    )
    assert loaded_after(statement, NOT_FOR_A_CLIENT) == []


def test_an_export_is_imported_on_first_use() -> None:
    """The lazy root still gives every name, and the heavy ones only when asked."""
    assert loaded_after("import trio_pty; trio_pty.Limits, trio_pty.PtyError", HEAVY) == []
    assert loaded_after("import trio_pty; trio_pty.Manager", ("trio_pty.manager",)) == [
        "trio_pty.manager"
    ]


def test_the_keeper_starts_on_the_standard_library_alone() -> None:
    """The keeper's real command line, told at once that its manager is gone (its pipe is
    empty): it imports its module without site-packages, tears down nothing, exits 0."""
    argv = keeper.command("pty-imports-test", grace=0.1, close_timeout=1.0, state_dir=None)
    assert argv[1:3] == ["-I", "-S"]
    done = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=keeper.environment("pty-imports-test"),
        cwd=os.path.dirname(__file__),  # `-I`: not on sys.path, whatever is here
    )
    assert done.returncode == 0, done.stderr
    assert "tearing down 0 sessions" in done.stderr
