"""Issue 17 on the server's tokens: findings 1 and 2 (no token through /proc or argv) and
owner-scoped tokens.

- `trio-pty serve` makes itself non-dumpable before it reads a token, so that a session (its
  child) cannot read the server's /proc/PID/environ; the token leaves its environment.
  Proven on a real server run as a non-root uid (setpriv, when the tests run as root): the
  kernel lets root read anything, see docs/security.md.
- `--token-file` takes a file only its owner may read; `--token` works with a warning.
- `[[tokens]]` entries may use only their owners (another owner's session is reported
  exactly like a missing one) and, read-only, only the reading methods.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import WebSocketConnection

from trio_pty import Limits
from trio_pty.rpc.config import ConfigError, parse_config
from trio_pty.rpc.connection import RpcConnection, Send, Start
from trio_pty.rpc.handshake import Rejection, check_handshake
from trio_pty.rpc.scope import FULL_ACCESS, TokenScope
from trio_pty.rpc.tokens import (
    ScopedToken,
    TokenError,
    check_token,
    generate_token,
    read_token_file,
    take_env_token,
)
from trio_pty.server.server import ServerOptions
from trio_pty.wire import METHODS, SERVER_INFO, MethodSpec, Params, ServerInfo

from .helpers import site_dirs, unprivileged_prefix
from .rpc_support import error_of, open_ws, requests_parked, rpc, serving, start_server

TOKEN = "server-token-0123456789"
TEAM_A = "team-a-token-0123456789"
READER = "reader-token-0123456789"
LIMITS = Limits(terminate_grace=0.2, io_timeout=2.0)


# --------------------------------------------------------------------------------------------
# Finding 1: a session cannot read its server's environment


PROBE = r"""
echo "ppid=$PPID uid=$(id -u)"
if cat /proc/$$/environ >/dev/null 2>&1; then echo self=read; else echo self=denied; fi
if cat /proc/$PPID/environ >/dev/null 2>&1; then echo parent=read; else echo parent=denied; fi
if (exec 3</proc/$PPID/mem) 2>/dev/null; then echo mem=read; else echo mem=denied; fi
if tr '\0' '\n' </proc/$$/environ | grep -qF -- "$1"; then echo own=found; else echo own=absent; fi
echo probe-end
"""


def _words(text: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", text))


async def test_a_session_of_trio_pty_serve_cannot_read_the_servers_environ(
    tmp_path: Path,
) -> None:
    """The red team's finding: `tr "\\0" "\\n" < /proc/$PPID/environ` in a session printed
    the server's TRIO_PTY_TOKEN and every secret the environment filter had removed."""
    prefix = unprivileged_prefix()
    secret = "probe-secret-71c2e0"
    server = start_server(
        tmp_path,
        "--no-ui",
        "--no-state-dir",  # the tmp dir is not writable by the unprivileged uid
        config=None,  # nor readable
        env={
            "TRIO_PTY_TOKEN": TOKEN,
            "PROBE_API_KEY": secret,
            "PYTHONPATH": os.pathsep.join(site_dirs()),
        },
        token_in_output=False,
        python=prefix,
        cwd="/",
    )
    try:
        with trio.fail_after(30):
            async with open_ws(server.url, [(b"Authorization", f"Bearer {TOKEN}".encode())]) as ws:
                spawned = await rpc(
                    ws,
                    1,
                    "pty.spawn",
                    {
                        "command": "sh",
                        "args": ["-c", PROBE, "probe", TOKEN],
                        "description": "probe",
                        "ready": {"pattern": "probe-end", "timeout_ms": 20000},
                    },
                )
                result = spawned["result"]
                text = "\n".join(line["text"] for line in result["ready"]["lines"])
                await rpc(ws, 2, "pty.kill", {"id": result["id"], "cleanup": True})
    finally:
        server.stop()
    words = _words(text)
    assert words["ppid"] == str(server.proc.pid), text  # the parent probed is the server
    if prefix[0] != sys.executable:
        assert words["uid"] != "0"  # the case the kernel does not wave through
    assert words["self"] == "read", text  # the probe can read an environ it may read
    assert (words["parent"], words["mem"]) == ("denied", "denied"), text
    assert words["own"] == "absent", text  # nor is the token in its own environment
    assert secret not in text


# --------------------------------------------------------------------------------------------
# Finding 2: the token from a file, never from argv unless insisted


def _token_file(tmp_path: Path, content: str, mode: int = 0o600, name: str = "token") -> Path:
    path = tmp_path / name
    path.write_text(content)
    path.chmod(mode)
    return path


def test_a_token_file_must_be_ours_and_private(tmp_path: Path) -> None:
    assert read_token_file(str(_token_file(tmp_path, "abc\n"))) == "abc"
    assert read_token_file(str(_token_file(tmp_path, "abc\r\n", 0o400))) == "abc"
    assert read_token_file(str(_token_file(tmp_path, "abc", 0o400))) == "abc"
    for mode in (0o640, 0o604, 0o644, 0o660, 0o602):
        with pytest.raises(TokenError, match=f"mode {mode:04o}"):
            read_token_file(str(_token_file(tmp_path, "abc\n", mode)))
    for content in ("", "\n", "abc\n\n", "two words\n", "tab\tinside", "é\n"):
        with pytest.raises(TokenError):
            read_token_file(str(_token_file(tmp_path, content)))
    with pytest.raises(TokenError, match="not a regular file"):
        read_token_file(str(tmp_path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(TokenError, match="not a regular file"):
        read_token_file(str(fifo))  # refused without waiting for a writer
    with pytest.raises(TokenError, match="cannot open"):
        read_token_file(str(tmp_path / "missing"))
    # A link is followed; the file it leads to is what is checked.
    link = tmp_path / "link"
    link.symlink_to(_token_file(tmp_path, "xyz\n", name="target"))
    assert read_token_file(str(link)) == "xyz"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_a_token_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = _token_file(tmp_path, "abc\n")
    os.chown(path, 65534, 65534)
    with pytest.raises(TokenError, match="belongs to uid 65534"):
        read_token_file(str(path))


def test_a_token_in_the_environment_leaves_it() -> None:
    environ = {"TRIO_PTY_TOKEN": "abc", "OTHER": "x"}
    assert take_env_token("TRIO_PTY_TOKEN", environ) == "abc"
    assert environ == {"OTHER": "x"}
    assert take_env_token("TRIO_PTY_TOKEN", environ) is None


def _serve_status(tmp_path: Path, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "trio_pty", "serve", "--port", "0", "--no-ui", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "TRIO_PTY_TOKEN"},
    )
    return done.returncode, done.stderr


async def test_serve_with_a_token_file(tmp_path: Path) -> None:
    path = _token_file(tmp_path, f"{TOKEN}\n")
    server = start_server(tmp_path, "--no-ui", "--token-file", str(path), token_in_output=False)
    try:
        with trio.fail_after(10):
            async with open_ws(f"{server.url}?token={TOKEN}") as ws:
                assert "result" in await rpc(ws, 1, "server.info")
    finally:
        server.stop()
    assert "--token" not in server.stderr()  # no warning: nothing in argv


def test_serve_refuses_a_readable_token_file(tmp_path: Path) -> None:
    path = _token_file(tmp_path, f"{TOKEN}\n", 0o644)
    status, stderr = _serve_status(tmp_path, "--token-file", str(path))
    assert status == 2
    assert "mode 0644" in stderr and TOKEN not in stderr
    status, stderr = _serve_status(tmp_path, "--token-file", str(path), "--token", TOKEN)
    assert status == 2 and "give one" in stderr


async def test_serve_warns_about_a_token_in_argv(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--no-ui", "--token", TOKEN, token_in_output=False)
    server.stop()
    assert "every local user" in server.stderr()
    assert TOKEN not in server.stderr()


# --------------------------------------------------------------------------------------------
# Owner-scoped tokens


SCOPED = (
    ScopedToken(TEAM_A, TokenScope(name="team-a", owners=("team-a", "team-a-*"))),
    ScopedToken(READER, TokenScope(name="reader", owners=("*",), read_only=True)),
)


def bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"Authorization", f"Bearer {token}".encode())]


async def _spawn(ws: WebSocketConnection, id: int, owner: str) -> str:
    reply = await rpc(
        ws, id, "pty.spawn", {"command": "cat", "description": "held", "owner": owner}
    )
    session_id: str = reply["result"]["id"]
    return session_id


def _same_error(reply: dict[str, Any], missing: dict[str, Any], session_id: str) -> None:
    """`reply` (about another owner's session) is exactly `missing` (about no session)."""
    assert "error" in reply, reply
    assert json.dumps(reply["error"]).replace(session_id, "ID") == json.dumps(
        missing["error"]
    ).replace("pty_00000000", "ID")


SESSION_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("pty.read", {}),
    ("pty.read_raw", {}),
    ("pty.write", {"data": "x"}),
    ("pty.resize", {"rows": 10, "cols": 10}),
    ("pty.attach", {}),
    ("pty.detach", {}),
    ("pty.kill", {}),
    ("pty.kill", {"cleanup": True}),
]


async def test_a_scoped_token_cannot_reach_another_owners_sessions() -> None:
    with trio.fail_after(20):
        async with (
            serving(LIMITS, TOKEN, scoped_tokens=SCOPED) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(TEAM_A)) as team,
        ):
            theirs = await _spawn(admin, 1, "team-b")
            ours = await _spawn(admin, 2, "team-a-1")
            # Listing: every owner means every owner it may see.
            listed = await rpc(team, 1, "pty.list", {"all_owners": True})
            assert [s["id"] for s in listed["result"]["sessions"]] == [ours]
            assert error_of(await rpc(team, 2, "pty.list", {"owner": "team-b"})) == (
                -32009,
                "permission_denied",
            )
            # Every call on the other owner's session is answered as for no session at all,
            # whether it names that owner or one of its own.
            number = 10
            for method, params in SESSION_CALLS:
                for owner in ("team-b", "team-a"):
                    number += 1
                    reply = await rpc(
                        team, number, method, {"id": theirs, "owner": owner, **params}
                    )
                    missing = await rpc(
                        team, -number, method, {"id": "pty_00000000", "owner": owner, **params}
                    )
                    _same_error(reply, missing, theirs)
            # Its own owners work as usual.
            assert "result" in await rpc(team, 3, "pty.read", {"id": ours, "owner": "team-a-1"})
            # Spawning for, or deleting, another owner is refused; nothing happened to it.
            for method, params in (
                ("pty.spawn", {"command": "true", "description": "x", "owner": "team-b"}),
                ("owner.delete", {"owner": "team-b"}),
                ("owner.delete", {"owner": "team-*"}),
            ):
                reply = await rpc(team, 4, method, params)
                assert error_of(reply) == (-32009, "permission_denied"), (method, params)
            assert server.manager.get(theirs, owner="team-b").status == "running"
            # server.info counts what it sees, and says what the token may do.
            info = (await rpc(team, 5, "server.info"))["result"]
            assert info["counts"]["sessions"] == 1 and info["counts"]["owners"] == 1
            assert info["scope"] == {
                "name": "team-a",
                "owners": ["team-a", "team-a-*"],
                "read_only": False,
            }
            assert (await rpc(admin, 3, "server.info"))["result"]["counts"]["sessions"] == 2
            # Deleting its own owner works.
            deleted = await rpc(team, 6, "owner.delete", {"owner": "team-a-1"})
            assert deleted["result"] == {"owner": "team-a-1", "removed": 1}
            await rpc(admin, 4, "pty.kill", {"id": theirs, "owner": "team-b", "cleanup": True})


async def test_a_scoped_token_cannot_cancel_another_connections_request() -> None:
    with trio.fail_after(20):
        async with (
            serving(LIMITS, TOKEN, scoped_tokens=SCOPED) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(TEAM_A)) as team,
        ):
            theirs = await _spawn(admin, 1, "team-b")
            wait = {"id": theirs, "owner": "team-b", "wait": {"pattern": "go", "timeout_ms": 3000}}
            await admin.send_message(
                json.dumps({"jsonrpc": "2.0", "id": 7, "method": "pty.read", "params": wait})
            )
            await requests_parked(server, 1)  # the read waits, on the admin's connection
            cancel = await rpc(team, 7, "$/cancelRequest", {"id": 7})
            assert cancel["result"] == {"cancelled": False}
            await team.send_message(
                json.dumps({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7}})
            )
            await rpc(admin, 8, "pty.write", {"id": theirs, "owner": "team-b", "data": "go\n"})
            read = json.loads(await admin.get_message())
            while read.get("id") != 7:
                read = json.loads(await admin.get_message())
            assert read["result"]["reason"] == "matched"  # not -32800: it was not cancelled
            await rpc(admin, 9, "pty.kill", {"id": theirs, "owner": "team-b", "cleanup": True})


async def test_a_read_only_token_reads_and_nothing_else() -> None:
    with trio.fail_after(20):
        async with (
            serving(LIMITS, TOKEN, scoped_tokens=SCOPED) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(READER)) as reader,
        ):
            session_id = await _spawn(admin, 1, "o")
            target = {"id": session_id, "owner": "o"}
            refused: list[tuple[str, dict[str, Any]]] = [
                ("pty.spawn", {"command": "true", "description": "x", "owner": "o"}),
                ("pty.write", {**target, "data": "x"}),
                ("pty.resize", {**target, "rows": 5, "cols": 5}),
                ("pty.kill", target),
                ("pty.attach", {**target, "driver": True}),
                ("owner.delete", {"owner": "o"}),
            ]
            for method, params in refused:
                reply = await rpc(reader, 2, method, params)
                assert error_of(reply) == (-32009, "permission_denied"), method
                assert "read-only" in reply["error"]["message"]
            allowed: list[tuple[str, dict[str, Any] | None]] = [
                ("pty.read", target),
                ("pty.read_raw", target),
                ("pty.attach", target),
                ("pty.detach", target),
                ("pty.list", {"all_owners": True}),
                ("server.info", None),
            ]
            for method, asked in allowed:
                assert "result" in await rpc(reader, 3, method, asked), method
            assert server.manager.get(session_id, owner="o").status == "running"
            await rpc(admin, 4, "pty.kill", {**target, "cleanup": True})


def test_the_scope_is_decided_for_every_method_before_it_starts() -> None:
    """Sans-io: a refused call never starts. A method without an owner (server-wide, such as
    server.drain) needs a token for every owner that is not read-only; server.info is the
    exception."""
    team = TokenScope(name="team", owners=("a",))
    ownerless: MethodSpec[Params[ServerInfo], ServerInfo] = MethodSpec(
        "server.pretend_wide", SERVER_INFO.params, ServerInfo
    )
    methods = {**METHODS, ownerless.name: ownerless}

    def outcome(scope: TokenScope, method: str, params: dict[str, Any]) -> str:
        frame = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        [action] = RpcConnection(methods, scope=scope).receive(frame)
        if isinstance(action, Start):
            return "start"
        assert isinstance(action, Send)
        error = json.loads(action.frame)["error"]
        assert error["code"] != -32602, error  # the params are valid: the scope decides
        return str(error["data"]["kind"])

    assert outcome(team, "server.pretend_wide", {}) == "permission_denied"
    assert outcome(FULL_ACCESS, "server.pretend_wide", {}) == "start"
    # server.drain names no owner: only a token for every owner may drain.
    assert outcome(team, "server.drain", {"deadline_s": 5}) == "permission_denied"
    every_owner = TokenScope(name="ops", owners=("*",))
    assert outcome(every_owner, "server.drain", {"deadline_s": 5}) == "start"
    assert outcome(FULL_ACCESS, "server.drain", {}) == "start"
    # Owners that happen to cover every name are still a list of owners, not "*".
    assert outcome(TokenScope(name="all-but", owners=("?*",)), "server.drain", {}) == (
        "permission_denied"
    )
    assert outcome(team, "server.info", {}) == "start"
    assert outcome(team, "pty.list", {}) == "permission_denied"  # owner "default"
    assert outcome(team, "pty.list", {"owner": "a"}) == "start"
    assert outcome(team, "pty.list", {"all_owners": True}) == "start"  # filtered by the handler
    assert outcome(team, "pty.kill", {"id": "pty_1", "owner": "b"}) == "session_not_found"
    reader = TokenScope(name="reader", read_only=True)
    assert outcome(reader, "server.pretend_wide", {}) == "permission_denied"
    assert outcome(reader, "server.drain", {}) == "permission_denied"  # every owner, read-only
    # A named read cursor is kept for clients that may change things (issue 30, finding 3).
    named = {"id": "pty_1", "since": "last", "reader": "cli"}
    assert outcome(reader, "pty.read", named) == "permission_denied"
    assert outcome(reader, "pty.read", {**named, "reader": None}) == "start"
    # Every method the wire has is decided: a read-only token may start exactly these, and
    # a token limited to owner "a" none on owner "b" (a new method must be added here).
    valid: dict[str, dict[str, Any]] = {
        "pty.spawn": {"command": "true", "description": "x"},
        "pty.write": {"id": "pty_1", "data": "x"},
        "pty.read": {"id": "pty_1"},
        "pty.read_raw": {"id": "pty_1"},
        "pty.list": {},
        "pty.kill": {"id": "pty_1"},
        "pty.resize": {"id": "pty_1", "rows": 1, "cols": 1},
        "pty.attach": {"id": "pty_1"},
        "pty.detach": {"id": "pty_1"},
        "owner.delete": {"owner": "b"},
        "server.info": {},
        "pty.spawn_shell": {"description": "x"},
        "pty.run": {"id": "pty_1", "command": "true"},
        "pty.commands": {"id": "pty_1"},
        "pty.screen": {"id": "pty_1"},
        "pty.signal": {"id": "pty_1", "signal": "INT"},
        "server.drain": {"deadline_s": 0},
        "pty.get": {"id": "pty_1"},
        "pty.exec": {"command": "true"},
        "pty.record": {"id": "pty_1"},
    }
    assert set(valid) == set(METHODS)
    starts = {name for name, params in valid.items() if outcome(reader, name, params) == "start"}
    read_only = {"pty.read", "pty.read_raw", "pty.list", "pty.attach", "pty.detach"}
    assert starts == read_only | {"pty.commands", "pty.screen", "pty.get", "pty.record"} | {
        "server.info"
    }
    for name, params in valid.items():
        if name == "server.drain":  # names no owner: refused for "a" too (above)
            assert outcome(team, name, params) == "permission_denied"
        elif name != "server.info":
            assert outcome(team, name, {**params, "owner": "b"}) != "start", name


# --------------------------------------------------------------------------------------------
# The config: [[tokens]]


def test_tokens_in_the_config(tmp_path: Path) -> None:
    config = parse_config(
        {
            "tokens": [
                {"name": "ci", "file": "~/ci.token", "owners": ["ci-*"], "max_sessions": 4},
                {"name": "view", "env": "VIEW_TOKEN", "owners": ["*"], "read_only": True},
            ]
        }
    )
    ci, view = config.tokens
    assert ci.source.file == os.path.expanduser("~/ci.token") and ci.source.env is None
    assert ci.scope == TokenScope(name="ci", owners=("ci-*",), max_sessions=4)
    assert ci.scope.max_connections is None  # the server's own bounds only
    assert view.source.env == "VIEW_TOKEN" and view.scope.read_only
    environ = {"VIEW_TOKEN": "v-token"}
    assert view.source.read(environ) == "v-token" and environ == {}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "token": "abc", "owners": ["a"]}, "never written in the config"),
        ({"name": "x", "owners": ["a"]}, "exactly one of file or env"),
        ({"name": "x", "file": "f", "env": "E", "owners": ["a"]}, "exactly one of file or env"),
        ({"name": "x", "file": "f"}, "owners must be"),
        ({"name": "x", "file": "f", "owners": []}, "owners must be"),
        ({"name": "x", "file": "f", "owners": [""]}, "owners must be"),
        ({"name": "x", "file": "f", "owners": ["a"], "read_only": "yes"}, "read_only must be"),
        ({"file": "f", "owners": ["a"]}, "name must be"),
        ({"name": "x", "file": "f", "owners": ["a"], "colour": 1}, "unknown key(s): colour"),
        ({"name": "x", "file": "f", "owners": ["a"], "max_sessions": 0}, "max_sessions must"),
        ({"name": "x", "file": "f", "owners": ["a"], "max_connections": -1}, "max_connections"),
        ({"name": "x", "file": "f", "owners": ["a"], "max_sessions": "2"}, "max_sessions"),
    ],
)
def test_token_entries_are_checked(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"tokens": [entry]}, source="x.toml")
    assert message in str(raised.value)
    assert "abc" not in str(raised.value)


def test_every_token_presented_must_be_the_same_one() -> None:
    def decide(target: str, *headers: tuple[bytes, bytes]) -> str | int:
        decided = check_handshake(
            target=target,
            host="127.0.0.1:1",
            headers=list(headers),
            tokens={TOKEN: "server", TEAM_A: "team-a"},
            hosts={"127.0.0.1:1"},
            origins=(),
        )
        return decided.status if isinstance(decided, Rejection) else decided

    assert decide(f"/rpc?token={TEAM_A}") == "team-a"
    assert decide("/rpc", *bearer(TOKEN)) == "server"
    assert decide(f"/rpc?token={TEAM_A}", *bearer(TEAM_A)) == "team-a"
    assert decide(f"/rpc?token={TEAM_A}", *bearer(TOKEN)) == 401  # two tokens: neither
    assert decide(f"/rpc?token={TEAM_A}&token={TOKEN}") == 401
    assert decide(f"/rpc?token={TEAM_A}x") == 401


def test_token_entry_names_are_unique() -> None:
    entry = {"name": "x", "file": "f", "owners": ["a"]}
    with pytest.raises(ConfigError, match="two entries have this name"):
        parse_config({"tokens": [entry, entry]})


def test_every_token_is_unique() -> None:
    scope = TokenScope(name="x")
    with pytest.raises(ValueError, match="two tokens are the same"):
        ServerOptions(token=TOKEN, scoped_tokens=(ScopedToken(TOKEN, scope),))
    # Deletions and named cursors are kept per token name: no scoped token shares the
    # server's own (issue 30, finding 3).
    server = TokenScope(name="server", owners=("ci-*",))
    with pytest.raises(ValueError, match="same name"):
        ServerOptions(token=TOKEN, scoped_tokens=(ScopedToken(TEAM_A, server),))
    with pytest.raises(ConfigError, match="the name of the server's own token"):
        parse_config({"tokens": [{"name": "server", "env": "E", "owners": ["a"]}]})


async def test_serve_with_scoped_tokens_from_a_file_and_the_environment(tmp_path: Path) -> None:
    team_file = _token_file(tmp_path, f"{TEAM_A}\n", name="team.token")
    config = f"""
[limits]
terminate_grace = 0.3

[[tokens]]
name = "team-a"
file = "{team_file}"
owners = ["team-a"]

[[tokens]]
name = "reader"
env = "READER_TOKEN"
owners = ["*"]
read_only = true
"""
    server = start_server(
        tmp_path,
        "--no-ui",
        config=config,
        env={"TRIO_PTY_TOKEN": TOKEN, "READER_TOKEN": READER},
        token_in_output=False,
    )
    try:
        with trio.fail_after(10):
            for token, name in ((TOKEN, "server"), (TEAM_A, "team-a"), (READER, "reader")):
                async with open_ws(server.url, bearer(token)) as ws:
                    info = await rpc(ws, 1, "server.info")
                    assert info["result"]["scope"]["name"] == name
    finally:
        server.stop()
    for token in (TOKEN, TEAM_A, READER):
        assert token not in server.stderr()


def test_serve_refuses_a_scoped_token_equal_to_its_own(tmp_path: Path) -> None:
    path = _token_file(tmp_path, f"{TOKEN}\n")
    config = tmp_path / "c.toml"
    config.write_text(f'[[tokens]]\nname = "x"\nfile = "{path}"\nowners = ["a"]\n')
    status, stderr = _serve_status(tmp_path, "--token-file", str(path), "--config", str(config))
    assert status == 2 and "two tokens are the same" in stderr


def test_a_generated_token_never_starts_with_a_dash() -> None:
    """One in 64 URL-safe tokens starts with "-", and `trio-pty list --token -abc` then fails
    in argparse (a missing value); 2,000 draws find one with near certainty on the old code."""
    made = [generate_token() for _ in range(2000)]
    assert not [token for token in made if token.startswith("-")]
    assert all(check_token(token, "generated") == token for token in made[:50])
    assert len(set(made)) == len(made)
