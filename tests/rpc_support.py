"""Shared helpers of the RPC tests (no tests here): a real `trio-pty serve` subprocess,
raw WebSocket frames over a plain TCP stream, and small JSON-RPC conveniences.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from trio_websocket import WebSocketConnection, wrap_client_stream

import trio_pty
from tests import leaks
from tests.helpers import alive
from trio_pty import Limits
from trio_pty.client.client import TrioPtyClient
from trio_pty.server.server import RpcServer, ServerOptions, open_server
from trio_pty.wire import ServerInfoParams

# Small bounds keep the e2e tests quick; see docs/protocol.md for the format.
TEST_CONFIG = """
[limits]
terminate_grace = 0.3
io_timeout = 1.0
http_head_timeout = 1.0
notification_timeout = 1.0
close_timeout = 5.0
max_sessions = 48
max_sessions_per_owner = 3

[permissions]
"*" = "allow"

[permissions.shell]
"*" = "allow"
"false" = "deny"
"""

STARTUP_TIMEOUT = 15.0


@attrs.define
class ServerProcess:
    proc: subprocess.Popen[bytes]
    url: str
    token: str | None
    token_url: str | None
    port: int
    stderr_path: Path

    def stdout_rest(self, timeout: float) -> str:
        """What the server printed after the URL lines, once it has exited."""
        assert self.proc.stdout is not None
        self.proc.wait(timeout)
        return self.proc.stdout.read().decode()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def _read_line(stream: Any, deadline: float) -> str:
    line = b""
    fd = stream.fileno()
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("server did not print its URL in time")
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            byte = os.read(fd, 1)
            if not byte:
                raise EOFError("server exited before printing its URL")
            line += byte
    return line.decode().strip()


def start_server(
    tmp_path: Path,
    *args: str,
    config: str | None = TEST_CONFIG,
    env: dict[str, str] | None = None,
    token_in_output: bool = True,
    python: Sequence[str] = (sys.executable,),
    cwd: str | None = None,
) -> ServerProcess:
    """Start `python -m trio_pty serve --port 0` and read its URL line(s) (bounded).
    `python` is the interpreter's argv (a prefix such as setpriv included)."""
    command = [*python, "-m", "trio_pty", "serve", "--port", "0", *args]
    if config is not None:
        config_path = tmp_path / "server.toml"
        config_path.write_text(config)
        command += ["--config", str(config_path)]
    stderr_path = tmp_path / "server.err"
    child_env = {k: v for k, v in os.environ.items() if k != "TRIO_PTY_TOKEN"}
    child_env["XDG_STATE_HOME"] = str(tmp_path / "xdg-state")  # its own state directory
    child_env.update(env or {})
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env=child_env,
            cwd=cwd,
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        assert proc.stdout is not None
        url = _read_line(proc.stdout, deadline)
        token_url = _read_line(proc.stdout, deadline) if token_in_output else None
    except BaseException:
        proc.kill()
        proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()
        raise
    token = None
    if token_url is not None:
        token = urllib.parse.parse_qs(urllib.parse.urlsplit(token_url).query)["token"][0]
    port = urllib.parse.urlsplit(url).port
    assert port is not None
    return ServerProcess(proc, url, token, token_url, port, stderr_path)


def server_processes(server: ServerProcess) -> dict[int, leaks.ProcessView]:
    """The server's living descendants (its sessions and what they started)."""
    return {
        pid: view
        for pid, view in leaks.descendants([server.proc.pid], keepers=False).items()
        if view.state not in ("Z", "X")
    }


def wait_no_server_processes(server: ServerProcess, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while (left := server_processes(server)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not left, f"the server still runs {left}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real server for the module's tests (each test uses its own owner)."""
    process = start_server(tmp_path_factory.mktemp("server"))
    try:
        yield process
    finally:
        process.stop()


def wait_no_server_zombies(server: ServerProcess, timeout: float = 3.0) -> None:
    """The server holds a torn-down session's zombie for a while when it pins a group or
    session id (posix/reap.py), and collects it at its next orphan round (every
    `orphan_reap_interval`, 1 s) once the id is quiet: wait for that, so the leak check
    that follows does not see it, and fail if the server never collects it."""
    deadline = time.monotonic() + timeout
    while (zombies := _server_zombies(server)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not zombies, f"the server did not reap {zombies}"


def _server_zombies(server: ServerProcess) -> list[int]:
    found = leaks.descendants([server.proc.pid], keepers=False)
    return [pid for pid, view in found.items() if view.state in ("Z", "X")]


@pytest.fixture
def live(server: ServerProcess) -> Iterator[ServerProcess]:
    """The module's server; after the test it must run no session process, hold no
    zombie, and be alive."""
    yield server
    wait_no_server_processes(server)
    wait_no_server_zombies(server)
    assert server.proc.poll() is None, f"the server died: {server.stderr()}"


def owner_for(request: pytest.FixtureRequest) -> str:
    name: str = request.node.name
    return "t-" + name[-200:]


def alive_any(pids: Sequence[int]) -> list[int]:
    return [pid for pid in pids if alive(pid)]


# --------------------------------------------------------------------------------------------
# An in-process server


@asynccontextmanager
async def serving(
    limits: Limits, token: str, *, manager_options: dict[str, Any] | None = None, **options: Any
) -> AsyncIterator[RpcServer]:
    """A manager with `limits` (and `manager_options`, more `open_manager` arguments) and a
    server for it on a free loopback port; `options` are more `ServerOptions` (they may
    override the port too)."""
    async with (
        trio_pty.open_manager(limits, **(manager_options or {})) as manager,
        open_server(manager, ServerOptions(**{"token": token, "port": 0, **options})) as server,
    ):
        yield server


async def requests_parked(server: RpcServer, count: int) -> None:
    """Wait until the server holds `count` requests between reading them and answering, and
    every task is blocked: the calls are parked in their waits, not about to start them."""
    while server.info().counts.requests_in_flight < count:  # noqa: ASYNC110 - no event for it
        await trio.sleep(0.01)
    await trio.testing.wait_all_tasks_blocked()


async def requests_held(client: TrioPtyClient, count: int) -> None:
    """Wait until the server holds `count` requests between reading and answering them,
    besides the `server.info` that asks (the server's own count, from the moment it reads a
    request: one that waits has begun its wait before a request sent after this is read)."""
    info = ServerInfoParams()
    while (await client.request(info)).counts.requests_in_flight < count + 1:  # noqa: ASYNC110
        await trio.sleep(0.01)


# --------------------------------------------------------------------------------------------
# JSON-RPC over a trio-websocket connection


@asynccontextmanager
async def open_ws(
    url: str, headers: Sequence[tuple[bytes, bytes]] = (), **kwargs: Any
) -> AsyncIterator[WebSocketConnection]:
    """A trio-websocket client connection whose socket is closed on every way out
    (`open_websocket_url` leaves it open when the server closed first)."""
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    resource = parts.path + (f"?{parts.query}" if parts.query else "")
    stream = await trio.open_tcp_stream(parts.hostname, parts.port)
    try:
        async with trio.open_nursery() as nursery:
            ws = await wrap_client_stream(
                nursery,
                stream,
                f"{parts.hostname}:{parts.port}",
                resource,
                extra_headers=list(headers),
                **kwargs,
            )
            try:
                yield ws
            finally:
                with trio.move_on_after(2):
                    await ws.aclose()
                nursery.cancel_scope.cancel()
    finally:
        await trio.aclose_forcefully(stream)


async def rpc(
    ws: WebSocketConnection, id: int | str, method: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Send one request and return its response, skipping notifications."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    await ws.send_message(json.dumps(message))
    return await response_to(ws, id)


async def response_to(ws: WebSocketConnection, id: int | str | None) -> dict[str, Any]:
    while True:
        reply = json.loads(await ws.get_message())
        if "method" not in reply and reply.get("id") == id:
            return dict(reply)


def error_of(reply: dict[str, Any]) -> tuple[int, str | None]:
    assert "error" in reply, reply
    error = reply["error"]
    return error["code"], (error.get("data") or {}).get("kind")


# --------------------------------------------------------------------------------------------
# Raw WebSocket over TCP (for what a well-behaved client library cannot send)


def client_frame(opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0) -> bytes:
    """One masked client frame (the XOR done on big integers: fast for 100 KiB payloads)."""
    mask = os.urandom(4)
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    length = len(payload)
    if length < 126:
        head += bytes([0x80 | length])
    elif length < 65536:
        head += bytes([0x80 | 126]) + length.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + length.to_bytes(8, "big")
    if not payload:
        return head + mask
    stretched = (mask * (length // 4 + 1))[:length]
    masked = int.from_bytes(payload, "big") ^ int.from_bytes(stretched, "big")
    return head + mask + masked.to_bytes(length, "big")


@attrs.define
class RawSocket:
    stream: trio.SocketStream
    status: int
    head: bytes
    buffer: bytes = b""

    async def _fill(self, size: int) -> None:
        while len(self.buffer) < size:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("connection closed")
            self.buffer += data

    async def read_frame(self) -> tuple[int, bytes]:
        """(opcode, payload) of the next server frame (servers do not mask)."""
        await self._fill(2)
        opcode, length = self.buffer[0] & 0x0F, self.buffer[1] & 0x7F
        offset = 2
        if length == 126:
            await self._fill(4)
            length, offset = int.from_bytes(self.buffer[2:4], "big"), 4
        elif length == 127:
            await self._fill(10)
            length, offset = int.from_bytes(self.buffer[2:10], "big"), 10
        await self._fill(offset + length)
        payload = self.buffer[offset : offset + length]
        self.buffer = self.buffer[offset + length :]
        return opcode, payload

    async def send(self, opcode: int, payload: bytes) -> None:
        await self.stream.send_all(client_frame(opcode, payload))

    async def close_code(self) -> int | None:
        """Read frames until the server's close frame and return its status code, or None
        when the server closed the TCP connection without one."""
        while True:
            try:
                opcode, payload = await self.read_frame()
            except (EOFError, trio.BrokenResourceError):
                return None
            if opcode == 0x8:
                return int.from_bytes(payload[:2], "big")


async def raw_connect(
    port: int,
    *,
    target: str = "/rpc",
    host: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> RawSocket:
    """Open a TCP connection and send an upgrade request; read the HTTP response head."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: {host if host is not None else f'127.0.0.1:{port}'}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in headers),
    ]
    await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        data = await stream.receive_some(65536)
        if not data:
            break
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    return RawSocket(stream, status, head, rest)


async def raw_status(port: int, **kwargs: Any) -> int:
    """The HTTP status the server answers an upgrade request with (101 = accepted)."""
    raw = await raw_connect(port, **kwargs)
    await raw.stream.aclose()
    return raw.status
