"""Protocol fuzzing against a running server, over real WebSocket connections on loopback.

`tests/test_wire.py` proves the sans-io parser's properties; this file proves that the
*running* server keeps the documented promises whatever arrives on the wire:

- every request with a valid id gets exactly one response carrying that id; notifications,
  responses and frames without a usable id get an answer only as docs/protocol.md says (an
  oracle written from the documentation, independent of `wire.parse_message`, predicts
  each frame's answer: which id, which codes), and never an internal error (-32603);
- a connection ends only by a documented close code, and only after a frame of the matching
  class (1009 after an oversized message, 1007 or a dropped TCP connection after a text frame
  that is not UTF-8; a dropped connection after a breach of RFC 6455 itself, which
  docs/protocol.md does not list): frames of every other class leave it open, whether whole,
  fragmented at any byte or interleaved with pings (each answered by its pong);
- another client's `cat` session answers a write/read round trip between fuzz batches and at
  the end;
- once the fuzz clients are gone (cleanly or abruptly, with requests in flight), the server's
  trio tasks are back at their baseline (in-process server), and a `trio-pty serve`
  subprocess is alive, serves, exits 0 on SIGTERM and leaves no process behind.

The framework (oracle, strategies, connections, the guard) is in `tests/fuzz/`.
HYPOTHESIS_PROFILE=long runs ~30x more examples (about 5 minutes). Deterministic sweeps
complete the picture: every param of every method with every JSON type it refuses, and the
message size bound byte-exact."""

from __future__ import annotations

import json
import os
import time
import tomllib
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from tests import leaks
from tests.fuzz.config import (
    CLOSE_TIMEOUT,
    FUZZ_LIMITS,
    MAX_MESSAGE,
    RULES,
    SERVER_CONFIG,
    TOKEN,
    examples,
)
from tests.fuzz.connection import FuzzConnection, fuzz_connection
from tests.fuzz.driving import fuzz_home, fuzz_through, in_process_server, server_errors, wait_for
from tests.fuzz.frames import OP_BINARY, OP_TEXT, upgrade_request
from tests.fuzz.messages import Frame
from tests.fuzz.methods import BASE_PARAMS, METHOD_NAMES, params_of
from tests.fuzz.oracle import CANCEL, INVALID_PARAMS, key_of, one
from tests.fuzz.sweeps import SAMPLES, padded, wrong_type_cases
from tests.fuzz.target import FuzzTarget, Guard
from tests.helpers import alive
from tests.rpc_support import RawSocket, client_frame, server_processes, start_server
from trio_pty.client.client import connect
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.rpc.config import parse_config
from trio_pty.wire import METHODS, CancelParams, ServerInfoParams


async def test_fuzz_in_process_server_tasks_return_to_baseline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Random batches against an in-process server; afterwards the server runs exactly the
    tasks it ran before the fuzz clients came (checked after they leave)."""
    started = time.monotonic()
    count = examples(2)
    with trio.fail_after(60 + 1.5 * count):
        async with (
            in_process_server(tmp_path) as (manager, server),
            connect(server.url, TOKEN) as guard_client,
            connect(server.url, TOKEN) as admin,
            trio.open_nursery() as nursery,
        ):
            guard = await Guard.start(guard_client)
            await trio.testing.wait_all_tasks_blocked()
            baseline = Counter(leaks.trio_tasks())
            target = FuzzTarget(server.port, nursery, guard, admin)
            await fuzz_through(target, count)
            # The fuzz clients are gone: only the guard's and the admin's connections remain.
            await wait_for(
                lambda: len(server.connections) == 2 and server.open_slots == 2,
                CLOSE_TIMEOUT,
                "the fuzz connections to close",
            )
            # Sessions the fuzz spawned outlive its connections by design; remove them.
            for info in manager.list_all():
                if info.owner != guard.owner:
                    await manager.kill(info.id, owner=info.owner, cleanup=True)
            assert [s.owner for s in manager.list_all()] == [guard.owner]
            await trio.testing.wait_all_tasks_blocked()
            after = Counter(leaks.trio_tasks())
            assert after == baseline, (
                f"tasks left: {after - baseline}, tasks gone: {baseline - after}"
            )
            await guard.round_trip()
            nursery.cancel_scope.cancel()
    assert not server_errors(caplog), server_errors(caplog)
    print(
        f"in-process fuzz: {target.frames_sent} frames, closes {dict(target.closes)}, "
        f"answers {dict(target.outcomes)}, {guard.trips} guard trips, "
        f"{time.monotonic() - started:.1f} s"
    )


async def test_fuzz_serve_subprocess(tmp_path: Path) -> None:
    """The same fuzz against `python -m trio_pty serve`: it survives, the guard keeps
    working, and after SIGTERM every process it ran is gone."""
    (tmp_path / "sub").mkdir()
    # `root` is a top-level key: it goes before the first table.
    config = f'root = "{tmp_path}"\n' + SERVER_CONFIG
    env = {"HOME": str(fuzz_home(tmp_path))}
    process = start_server(
        tmp_path, "--token", TOKEN, config=config, env=env, token_in_output=False
    )
    count = examples(0.5)
    try:
        with trio.fail_after(60 + 1.5 * count):
            async with (
                connect(process.url, TOKEN) as guard_client,
                connect(process.url, TOKEN) as admin,
                trio.open_nursery() as nursery,
            ):
                guard = await Guard.start(guard_client)
                target = FuzzTarget(process.port, nursery, guard, admin)
                await fuzz_through(target, count)
                with trio.fail_after(CLOSE_TIMEOUT):
                    info = await guard_client.request(ServerInfoParams())
                    while info.counts.connections != 2:
                        await trio.sleep(0.02)
                        info = await guard_client.request(ServerInfoParams())
                assert info.counts.requests_in_flight == 1, info  # this server.info
                nursery.cancel_scope.cancel()
        assert process.proc.poll() is None, f"the server died: {process.stderr()}"
        ran = server_processes(process)
        # Under the config's command rules the command runs as resolved on the server's
        # PATH (docs/security.md), so its argv[0] is a path.
        assert any(os.path.basename(view.cmdline) == "cat" for view in ran.values()), ran
    finally:
        code = process.stop()
    assert code == 0, process.stderr()
    await wait_for(
        lambda: not any(alive(pid) for pid in ran),
        5,
        f"the processes of the server to end with it: {ran}",
    )
    stderr = process.stderr()
    for marker in ("Traceback", "internal error", "connection failed"):
        assert marker not in stderr, stderr[-4000:]
    print(
        f"subprocess fuzz: {target.frames_sent} frames, closes {dict(target.closes)}, "
        f"answers {dict(target.outcomes)}"
    )


def test_subprocess_config_is_the_in_process_one() -> None:
    config = parse_config(tomllib.loads(SERVER_CONFIG))
    assert config.limits == FUZZ_LIMITS
    assert config.authorizer is not None
    assert config.authorizer.rules == RulesAuthorizer(RULES).rules


def test_base_params_cover_every_method() -> None:
    """A new method (or a renamed param) must be added to the sweep, not silently skipped."""
    assert set(BASE_PARAMS) == set(METHOD_NAMES)
    for method, params in BASE_PARAMS.items():
        assert set(params) <= set(params_of(method)), method
    assert len(wrong_type_cases()) > 150


async def test_every_param_with_every_wrong_type(tmp_path: Path) -> None:
    """For each method and each param (nested ones too), a value of each JSON type it does
    not accept: -32602 naming exactly that path; plus unknown, missing and by-position
    params. Sent concurrently on one connection, answered one to one."""
    cases = wrong_type_cases()
    extra: list[tuple[str, Any, str, str]] = []
    for method in METHOD_NAMES:
        extra.append((method, {**BASE_PARAMS[method], "colour": "red"}, "colour", "unknown field"))
        for name in BASE_PARAMS[method]:
            field = attrs.fields_dict(CancelParams if method == CANCEL else METHODS[method].params)[
                name
            ]
            if field.default is attrs.NOTHING:
                params = {k: v for k, v in BASE_PARAMS[method].items() if k != name}
                extra.append((method, params, name, "required field missing"))
        extra.append((method, [1, 2], "", "by-position"))
    extra.append(
        (
            "pty.spawn",
            {**BASE_PARAMS["pty.spawn"], "ready": {"colour": 1}},
            "ready.colour",
            "unknown field",
        )
    )
    with trio.fail_after(60):
        async with (
            in_process_server(tmp_path) as (manager, server),
            trio.open_nursery() as nursery,
            fuzz_connection(server.port, nursery) as conn,
        ):
            all_cases = cases + extra
            by_id: dict[int, tuple[str, Any, str, str]] = {}
            for start in range(0, len(all_cases), 64):
                for offset, case in enumerate(all_cases[start : start + 64]):
                    id = start + offset
                    by_id[id] = case
                    method, params, _, _ = case
                    text = json.dumps(
                        {"jsonrpc": "2.0", "id": id, "method": method, "params": params}
                    )
                    frame = Frame(text, f"{method} {params!r}")
                    conn.ledger.expect(one(key_of(id), INVALID_PARAMS), frame.describe())
                    await conn.send(frame)
                for response in await conn.settle("wrong types"):
                    method, params, path, what = by_id[response["id"]]
                    error = response["error"]
                    if what == "by-position":
                        assert "by-position" in error["message"], response
                        continue
                    problems = error["data"]["errors"]
                    assert error["data"]["error_count"] == 1, (method, params, response)
                    [problem] = problems
                    assert problem["path"] == path, (method, params, response)
                    if what in SAMPLES:
                        assert problem["problem"].startswith("expected "), response
                        assert problem["problem"].endswith(f", got {what}") or (
                            problem["problem"].startswith("expected one of")
                        ), response
                    else:
                        assert problem["problem"] == what, response
            assert len(by_id) == len(all_cases)
            assert manager.list_all() == []  # nothing ran
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("opcode", [OP_TEXT, OP_BINARY])
async def test_message_size_bound_is_exact(tmp_path: Path, opcode: int) -> None:
    """max_message_bytes counts UTF-8 bytes, for text and binary, whole or fragmented: a
    message of exactly the bound is answered, one byte more closes with 1009 and is not.
    Meanwhile another connection's requests are answered."""
    widths = ["x", "é", "€", "𝄞"] if opcode == OP_TEXT else ["x", "𝄞"]
    with trio.fail_after(60):
        async with (
            in_process_server(tmp_path) as (_, server),
            trio.open_nursery() as nursery,
            fuzz_connection(server.port, nursery) as witness,
        ):
            id = 0
            for char in widths:
                for size in (MAX_MESSAGE - 1, MAX_MESSAGE, MAX_MESSAGE + 1):
                    for cuts in ((), (0.5,), (0.001, 0.999)):
                        id += 1
                        data = padded(id, size, char)
                        async with fuzz_connection(server.port, nursery) as conn:
                            label = f"{size} bytes of {char!r} in {len(cuts) + 1} frame(s)"
                            payload: str | bytes = data.decode() if opcode == OP_TEXT else data
                            frame = Frame(payload, label, cuts)
                            if size <= MAX_MESSAGE:
                                conn.ledger.expect(one(key_of(id), INVALID_PARAMS), label)
                                await conn.send(frame)
                                await conn.settle(label)
                            else:
                                with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                                    await conn.send(frame)
                                assert await conn.wait_closed() == 1009, label
                                assert conn.ledger.responses == [], label
                        witness.ledger.expect(one(key_of(id), "result"), "witness")
                        await witness.send(
                            Frame(f'{{"jsonrpc":"2.0","id":{id},"method":"pty.list"}}', "witness")
                        )
                        await witness.settle("witness")
            nursery.cancel_scope.cancel()


async def test_a_request_sent_with_the_upgrade_request_is_answered_or_refused(
    tmp_path: Path,
) -> None:
    """RFC 6455 (4.1) tells a client to wait for the 101 before it sends frames. One that
    does not, and sends its first request in the same segment as the upgrade request, must
    not wait forever: the server answers the request, or fails the connection. wsproto 1.3's
    server handshake drops bytes received with the upgrade request (H11Handshake._accept
    builds its Connection without h11's trailing_data), so the HTTP front holds them back
    until the 101 is sent (server/http.py ReplayStream)."""
    with trio.fail_after(20):
        async with in_process_server(tmp_path) as (_, server), trio.open_nursery() as nursery:
            request = b'{"jsonrpc":"2.0","id":1,"method":"pty.list"}'
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            await stream.send_all(upgrade_request(server.port) + client_frame(OP_TEXT, request))
            received = b""
            while b"\r\n\r\n" not in received:
                data = await stream.receive_some(65536)
                assert data, "closed during the handshake"
                received += data
            head, _, rest = received.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 "), head
            conn = FuzzConnection(RawSocket(stream, 101, head, rest))
            nursery.start_soon(conn.read_loop)
            try:
                # Answered in milliseconds when it is; the bound only ends the wait for
                # an answer that never comes (a loaded machine can take a second or more).
                with trio.move_on_after(10):
                    while not conn.ledger.responses and not conn.closed:
                        await conn.changed.wait()
                answered = [message["id"] for _, _, message in conn.ledger.responses]
                assert conn.closed or answered == [1], "the pipelined request was dropped"
            finally:
                await conn.close()
                nursery.cancel_scope.cancel()
