"""Issue 30, finding 3: tokens that really scope.

Direct access already held (another owner's session answers like a missing one:
tests/test_security_tokens.py); these are the indirect ways a `[[tokens]]` token reached
other owners, each attacked from where its holder sits: a WebSocket over loopback to a real
server, with the token its `[[tokens]]` entry describes. Each test failed on the code before
the fix (the config keys it uses were unknown there, or the attack worked).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from trio_websocket import WebSocketConnection

import trio_pty
from trio_pty import Limits
from trio_pty.lifecycle import Lifecycle
from trio_pty.output.cursors import Cursor, ReadCursors
from trio_pty.rpc.config import parse_config
from trio_pty.rpc.tokens import ScopedToken
from trio_pty.server.server import RpcServer, ServerOptions, open_server
from trio_pty.tenants import EVERYONE, Tenant

from .rpc_support import error_of, open_ws, raw_status, rpc, start_server

TOKEN = "server-token-0123456789"
CI = "ci-token-0123456789abc"
READER = "reader-token-0123456789"

TOKENS: list[dict[str, Any]] = [
    {"name": "ci", "env": "CI_TOKEN", "owners": ["ci-*"]},
    {"name": "reader", "env": "READER_TOKEN", "owners": ["*"], "read_only": True},
]


def scoped_tokens(tokens: list[dict[str, Any]]) -> tuple[ScopedToken, ...]:
    """The `[[tokens]]` entries as `serve` reads them (through the config's converter)."""
    environ = {"CI_TOKEN": CI, "READER_TOKEN": READER}
    entries = parse_config({"tokens": tokens}).tokens
    return tuple(ScopedToken(entry.source.read(environ), entry.scope) for entry in entries)


@asynccontextmanager
async def serving(
    limits: Limits, tokens: list[dict[str, Any]] = TOKENS
) -> AsyncIterator[RpcServer]:
    options = ServerOptions(token=TOKEN, port=0, scoped_tokens=scoped_tokens(tokens))
    async with trio_pty.open_manager(limits) as manager, open_server(manager, options) as server:
        yield server


def bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"Authorization", f"Bearer {token}".encode())]


async def spawn(
    ws: WebSocketConnection, owner: str, command: str = "cat", **extra: Any
) -> dict[str, Any]:
    params = {"command": command, "description": "scope", "owner": owner, **extra}
    return await rpc(ws, "spawn", "pty.spawn", params)


async def spawned(ws: WebSocketConnection, owner: str, **extra: Any) -> str:
    reply = await spawn(ws, owner, **extra)
    assert "result" in reply, reply
    session_id: str = reply["result"]["id"]
    return session_id


async def test_a_scoped_token_evicts_only_ended_sessions_it_sees() -> None:
    """Finding: with the server full, a `ci-*` token's spawn evicted another owner's ended
    session (its output and exit code gone). Now it may evict only its own owners' ended
    sessions, and is refused when there are none."""
    limits = Limits(max_sessions=3, max_sessions_per_owner=5, terminate_grace=0.2)
    with trio.fail_after(30):
        async with (
            serving(limits) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(CI)) as ci,
        ):
            victim = await spawned(admin, "victim", command="sh", args=["-c", "echo kept"])
            await server.manager.wait_exit(victim, owner="victim")
            await spawned(ci, "ci-1")
            ours = await spawned(ci, "ci-2")
            # Full: the only ended session is the victim's, which ci does not see.
            refused = await spawn(ci, "ci-3")
            assert error_of(refused) == (-32002, "limit_exceeded"), refused
            info = await rpc(admin, 1, "pty.get", {"id": victim, "owner": "victim"})
            assert info["result"]["exit_code"] == 0
            read = await rpc(admin, 2, "pty.read", {"id": victim, "owner": "victim"})
            assert [line["text"] for line in read["result"]["lines"]] == ["kept"]
            # Its own ended session makes room as before.
            await rpc(ci, 3, "pty.kill", {"id": ours, "owner": "ci-2"})
            assert "result" in await spawn(ci, "ci-3")
            gone = await rpc(ci, 4, "pty.get", {"id": ours, "owner": "ci-2"})
            assert error_of(gone)[1] == "session_not_found"
            assert "result" in await rpc(admin, 5, "pty.get", {"id": victim, "owner": "victim"})


async def test_a_tokens_max_sessions_leaves_room_for_the_server_token() -> None:
    """Finding: spawning across many `ci-*` owners (each under max_sessions_per_owner) filled
    max_sessions, so the server's own token could not spawn. `max_sessions` in the token's
    entry bounds all the sessions of its owners together."""
    limits = Limits(max_sessions=4, max_sessions_per_owner=3, terminate_grace=0.2)
    tokens = [{**TOKENS[0], "max_sessions": 2}, TOKENS[1]]
    with trio.fail_after(30):
        async with (
            serving(limits, tokens) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(CI)) as ci,
        ):
            await spawned(ci, "ci-1")
            await spawned(ci, "ci-2")
            refused = await spawn(ci, "ci-3")
            assert error_of(refused) == (-32002, "limit_exceeded"), refused
            assert "'ci' already has 2 sessions" in refused["error"]["message"]
            await spawned(admin, "ops")
            await spawned(admin, "ops")
            assert len(server.manager.list_all()) == 4


async def test_a_tenants_bound_counts_after_the_owners_eviction() -> None:
    """The library face of the same rule (`Manager.spawn(tenant=...)`): a spawn at its
    owner's quota evicts that owner's ended session first, and the tenant's bound then
    counts what is left, so one eviction is enough and nothing else is taken."""
    limits = Limits(max_sessions=8, max_sessions_per_owner=2, terminate_grace=0.2)
    team = Tenant("team", sees=lambda owner: owner in ("ann", "bob"), max_sessions=3)
    with trio.fail_after(30):
        async with trio_pty.open_manager(limits) as manager:
            ended = await manager.spawn("cat", owner="ann", description="ended")
            await manager.kill(ended.id, owner="ann")  # returns once torn down
            await manager.spawn("cat", owner="ann", description="live")
            await manager.spawn("cat", owner="bob", description="live")
            await manager.spawn("cat", owner="ann", description="new", tenant=team)
            assert sorted(s.owner for s in manager.list_all()) == ["ann", "ann", "bob"]
            with pytest.raises(trio_pty.LimitExceeded, match="'team' already has 3"):
                await manager.spawn("cat", owner="bob", description="over", tenant=team)
            await manager.spawn("cat", owner="cyd", description="other", tenant=EVERYONE)


async def test_a_tokens_deletions_cannot_push_out_another_owners() -> None:
    """Finding: the server remembered the last 10,000 deleted owners in all, so a `ci-*`
    token deleting 10,001 owners of its own made it forget an owner the server's token had
    deleted, whose spawns then worked again. Each token's deletions are remembered apart."""
    limits = Limits(deleted_owners_remembered=3, terminate_grace=0.2)
    with trio.fail_after(30):
        async with (
            serving(limits) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(CI)) as ci,
        ):
            assert "result" in await rpc(admin, 1, "owner.delete", {"owner": "victim"})
            for number in range(limits.deleted_owners_remembered + 1):
                deleted = await rpc(ci, number, "owner.delete", {"owner": f"ci-{number}"})
                assert "result" in deleted, deleted
            assert error_of(await spawn(admin, "victim"))[1] == "owner_deleted"
            # The token's own memory is bounded as before: its oldest deletion went.
            assert "result" in await spawn(ci, "ci-0")
            assert error_of(await spawn(ci, "ci-3"))[1] == "owner_deleted"
            assert server.manager.list("victim") == []


async def test_named_read_cursors_are_kept_per_token() -> None:
    """Finding: a read with a named `reader` moved the cursor of that name whoever read, so
    a read-only token (or another token seeing the owner) made another client's
    `since="last"` skip output. A named cursor is now kept per token, and a read-only token
    may not use one (its connection's own cursor is its own)."""
    limits = Limits(terminate_grace=0.2)
    tokens = [{**TOKENS[0], "owners": ["ci-*", "shared"]}, TOKENS[1]]
    with trio.fail_after(30):
        async with (
            serving(limits, tokens) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(CI)) as ci,
            open_ws(server.url, bearer(READER)) as reader,
        ):
            session = {"id": await spawned(admin, "shared"), "owner": "shared"}
            last = {**session, "since": "last", "reader": "cli"}

            async def texts(ws: WebSocketConnection, params: dict[str, Any]) -> list[str]:
                reply = await rpc(ws, "read", "pty.read", params)
                assert "result" in reply, reply
                return [line["text"] for line in reply["result"]["lines"]]

            await rpc(admin, 1, "pty.write", {**session, "data": "alpha\n"})
            wait_for = {"wait": {"pattern": "alpha", "timeout_ms": 10_000}}
            assert "alpha" in await texts(admin, {**last, **wait_for})
            await rpc(admin, 2, "pty.write", {**session, "data": "beta\n"})
            assert "beta" in await texts(admin, {**session, "wait": {"pattern": "beta"}})
            # Another token's cursor of the same name is its own: it starts at the start.
            assert "alpha" in await texts(ci, last)
            refused = await rpc(reader, 3, "pty.read", last)
            assert error_of(refused) == (-32009, "permission_denied"), refused
            assert "read-only" in refused["error"]["message"]
            assert "alpha" in await texts(reader, {**session, "since": "last"})
            # The cursor the admin's client keeps did not move.
            assert "beta" in await texts(admin, last)
            assert server.manager.get(session["id"], owner="shared").status == "running"


async def test_made_up_reader_names_cannot_push_out_another_sessions_cursors() -> None:
    """Finding (beside the issue's): cursors were dropped least recently used across the
    whole server, so a token reading its own session under many made-up reader names
    dropped the cursor another client keeps on another owner's session, whose next
    `since="last"` then started over from the oldest line. Each session keeps its share."""
    limits = Limits(max_sessions=4, max_read_cursors=8, terminate_grace=0.2)
    with trio.fail_after(30):
        async with (
            serving(limits) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(CI)) as ci,
        ):
            session_id = await spawned(admin, "ops", command="sh", args=["-c", "echo seen"])
            theirs = {"id": session_id, "owner": "ops"}
            await server.manager.wait_exit(session_id, owner="ops")  # all its output is in
            last = {**theirs, "since": "last", "reader": "cli"}
            first = await rpc(admin, 2, "pty.read", last)
            assert [line["text"] for line in first["result"]["lines"]] == ["seen"], first
            ours = {"id": await spawned(ci, "ci-1"), "owner": "ci-1"}
            for number in range(limits.max_read_cursors + 1):
                params = {**ours, "since": "last", "reader": f"made-up-{number}"}
                assert "result" in await rpc(ci, number, "pty.read", params)
            again = await rpc(admin, 3, "pty.read", last)
            assert again["result"]["lines"] == [], again  # nothing new since its last read


@given(
    capacity=st.integers(1, 64),
    sessions=st.integers(1, 8),
    sets=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 40)), max_size=200),
)
def test_read_cursors_stay_within_capacity_and_within_each_session(
    capacity: int, sessions: int, sets: list[tuple[int, int]]
) -> None:
    """With at most `sessions` sessions, all cursors stay within `capacity` (or one per
    session, when there are more sessions than that), and setting a cursor of one session
    never drops a cursor of another."""
    cursors = ReadCursors(capacity, sessions=sessions)
    for session, reader in sets:
        session_id = f"s{session % sessions}"
        others = {
            (f"s{other}", f"r{key}"): cursors.get(f"s{other}", f"r{key}")
            for other in range(sessions)
            if other != session % sessions
            for key in range(41)
        }
        cursors.set(session_id, f"r{reader}", Cursor(reader, reader))
        assert cursors.get(session_id, f"r{reader}") == Cursor(reader, reader)
        for (other_id, key), before in others.items():
            assert cursors.get(other_id, key) == before
        assert len(cursors) <= max(capacity, sessions)
    for session in range(sessions):
        cursors.forget(f"s{session}")
    assert len(cursors) == 0


async def test_a_read_only_attachment_does_not_keep_a_session_alive() -> None:
    """Finding: a read-only token attached to a session, and the session never reached its
    `idle_timeout`. Watching is not using: only a token that may change something keeps a
    session from being idle by attaching."""
    limits = Limits(terminate_grace=0.2)
    with trio.fail_after(30):
        async with (
            serving(limits) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(READER)) as reader,
        ):
            session = {"id": await spawned(admin, "o", idle_timeout=0.5), "owner": "o"}
            began = trio.current_time()
            attached = await rpc(reader, 1, "pty.attach", session)
            assert "result" in attached, attached
            # Without the fix this waits for ever (the bound above fails the test).
            event = await server.manager.wait_exit(session["id"], owner="o")
            assert trio.current_time() - began < 10
            info = server.manager.get(session["id"], owner="o")
            assert (info.timed_out, info.reason) == (True, "idle_timeout"), (event, info)


async def test_only_an_active_attachment_holds_off_idleness() -> None:
    """The lifecycle's rule behind it: an active attachment (a token that may change things)
    makes the session not idle, as before; a watcher's neither does that nor, detaching,
    restarts the idle clock (attaching and detaching in a loop would keep it alive)."""
    lifecycle = Lifecycle(on_change=None, shutdown_moment=trio.current_time, watch_detaching=True)
    before = lifecycle.idle_since()
    assert before is not None
    lifecycle.attached(driver=False, active=False)
    await trio.sleep(0.01)
    lifecycle.detached(driver=False, active=False)
    assert lifecycle.idle_since() == before
    lifecycle.attached(driver=False)
    assert lifecycle.idle_since() is None
    lifecycle.attached(driver=False, active=False)
    lifecycle.detached(driver=False, active=False)
    assert lifecycle.idle_since() is None
    lifecycle.detached(driver=False)
    since = lifecycle.idle_since()
    assert since is not None and since > before


async def test_server_info_counts_only_what_the_token_sees() -> None:
    """A scoped token's `server.info` counted every connection of the server (whoever's);
    now its own token's only (sessions were already limited to the owners it sees)."""
    limits = Limits(terminate_grace=0.2)
    with trio.fail_after(30):
        async with (
            serving(limits) as server,
            open_ws(server.url, bearer(TOKEN)) as admin,
            open_ws(server.url, bearer(READER)),
            open_ws(server.url, bearer(CI)) as ci,
        ):
            await spawned(admin, "ops")
            counts = (await rpc(ci, 1, "server.info"))["result"]["counts"]
            assert (counts["sessions"], counts["connections"]) == (0, 1)
            assert counts["pending_connections"] == 0
            counts = (await rpc(admin, 1, "server.info"))["result"]["counts"]
            assert (counts["sessions"], counts["connections"]) == (1, 3)


async def test_a_tokens_max_connections_bounds_only_that_token(tmp_path: Path) -> None:
    """Finding: one token could take every connection slot of the server. `max_connections`
    in its `[[tokens]]` entry bounds its own; the server's token still connects. Run on
    `trio-pty serve` with the entries in its config file (and `max_sessions` with them)."""
    config = """
[limits]
terminate_grace = 0.3
max_sessions = 8

[[tokens]]
name = "ci"
env = "CI_TOKEN"
owners = ["ci-*"]
max_connections = 2
max_sessions = 1
"""
    server = start_server(
        tmp_path,
        "--no-ui",
        config=config,
        env={"TRIO_PTY_TOKEN": TOKEN, "CI_TOKEN": CI},
        token_in_output=False,
    )
    headers = [("Authorization", f"Bearer {CI}")]
    try:
        with trio.fail_after(30):
            async with (
                open_ws(server.url, bearer(CI)) as first,
                open_ws(server.url, bearer(CI)),
            ):
                assert await raw_status(server.port, headers=headers) == 503
                async with open_ws(server.url, bearer(TOKEN)) as admin:
                    assert "result" in await rpc(admin, 1, "server.info")
                await spawned(first, "ci-1")
                assert error_of(await spawn(first, "ci-2"))[1] == "limit_exceeded"
                await rpc(first, 2, "owner.delete", {"owner": "ci-1"})
            # Closed connections give their slots back (once the server has seen them go).
            # A server in another process: no event to wait on, so ask again until it has.
            while await raw_status(server.port, headers=headers) != 101:  # noqa: ASYNC110
                await trio.sleep(0.05)
    finally:
        server.stop()
