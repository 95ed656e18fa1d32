"""What operators run trio-pty with (issue 19, docs/deploy.md), against real `trio-pty serve`
processes on port 0: drain (server.drain, SIGUSR1, `trio-pty drain`), /healthz, /metrics,
host-qualified ids, socket activation (`--listen-fd`), JSON logs, the client-side Router.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import trio
from hypothesis import strategies as st

from trio_pty.client.client import ConnectionFailed, RpcError, connect
from trio_pty.client.router import Router, node_of
from trio_pty.errors import InvalidInput
from trio_pty.metrics import Family, Histogram, Sample, render
from trio_pty.policy import validate
from trio_pty.posix import activation
from trio_pty.wire import KillParams, ListParams, SpawnParams

from .helpers import alive, poll_until, signal_pending
from .rpc_support import (
    TEST_CONFIG,
    ServerProcess,
    _read_line,
    error_of,
    open_ws,
    rpc,
    start_server,
)

TOKENS = {
    "team": "team-token-" + "t" * 24,
    "view": "view-token-" + "v" * 24,
    "ops": "ops-token-" + "o" * 24,
}
SCOPED_CONFIG = (
    TEST_CONFIG
    + """
[[tokens]]
name = "team"
env = "T_TEAM"
owners = ["a"]

[[tokens]]
name = "view"
env = "T_VIEW"
owners = ["*"]
read_only = true

[[tokens]]
name = "ops"
env = "T_OPS"
owners = ["*"]
"""
)
SCOPED_ENV = {"T_TEAM": TOKENS["team"], "T_VIEW": TOKENS["view"], "T_OPS": TOKENS["ops"]}


def http_request(
    port: int,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    host: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest(method, path, skip_host=True)
        connection.putheader("Host", host or f"127.0.0.1:{port}")
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def spawn_params(owner: str, command: str = "cat", *args: str) -> dict[str, Any]:
    return {"command": command, "args": list(args), "description": "ops test", "owner": owner}


async def wait_exit(server: ServerProcess, timeout: float) -> int:
    await poll_until(lambda: server.proc.poll() is not None, timeout=timeout)
    return server.proc.returncode


# --------------------------------------------------------------------------------------------
# Drain


async def test_a_drain_refuses_spawns_and_the_server_stops_when_its_sessions_end(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path, "--no-ui")
    assert server.token_url is not None
    try:
        # /healthz needs no token and says nothing more than ok.
        status, headers, body = http_request(server.port, "/healthz")
        assert (status, body) == (200, b"ok\n")
        assert "server" not in headers and headers["cache-control"] == "no-store"
        assert http_request(server.port, "/healthz?probe=1")[::2] == (200, b"ok\n")
        for method in ("HEAD", "POST", "PUT"):
            assert http_request(server.port, "/healthz", method=method)[0] == 405
        assert http_request(server.port, "/healthz", host="evil.example")[0] == 403
        assert http_request(server.port, "/")[0] == 404  # --no-ui: only the page is gone
        with trio.fail_after(30):
            async with open_ws(server.token_url) as ws:
                cat = (await rpc(ws, 1, "pty.spawn", spawn_params("o")))["result"]
                # Refused deadlines start nothing.
                for number, bad in enumerate([-1, 3601, 1e300]):
                    reply = await rpc(ws, 10 + number, "server.drain", {"deadline_s": bad})
                    assert error_of(reply) == (-32008, "invalid_input"), reply
                    assert reply["error"]["data"]["field"] == "deadline_s"
                reply = await rpc(ws, 13, "server.drain", {"deadline_s": "soon"})
                assert reply["error"]["code"] == -32602
                info = (await rpc(ws, 14, "server.info"))["result"]
                assert (info["draining"], info["drain_remaining_s"]) == (False, None)

                drained = (await rpc(ws, 2, "server.drain", {"deadline_s": 60}))["result"]
                assert drained["draining"] is True and drained["running"] == 1
                assert 59 < drained["drain_remaining_s"] <= 60
                refused = await rpc(ws, 3, "pty.spawn", spawn_params("o"))
                assert error_of(refused) == (-32011, "draining")
                assert 0 < refused["error"]["data"]["drain_remaining_s"] <= 60
                status, _, body = http_request(server.port, "/healthz")
                assert (status, body) == (503, b"draining\n")
                info = (await rpc(ws, 4, "server.info"))["result"]
                assert info["draining"] is True and 0 < info["drain_remaining_s"] <= 60
                # Everything but spawning goes on.
                written = await rpc(
                    ws,
                    5,
                    "pty.write",
                    {
                        "id": cat["id"],
                        "owner": "o",
                        "data": "still here\n",
                        "wait": {"idle_ms": 100},
                    },
                )
                assert "still here" in json.dumps(written["result"])
                # A deadline can come forward, never go back.
                sooner = (await rpc(ws, 6, "server.drain", {"deadline_s": 30}))["result"]
                assert sooner["drain_remaining_s"] <= 30
                later = (await rpc(ws, 7, "server.drain", {"deadline_s": 100}))["result"]
                assert later["drain_remaining_s"] <= 30
                assert server.proc.poll() is None
                # The last session ends: the drain is over, the normal shutdown follows (it
                # closes this connection, maybe before the kill's answer goes out).
                kill = {"jsonrpc": "2.0", "id": 8, "method": "pty.kill"}
                await ws.send_message(
                    json.dumps({**kill, "params": {"id": cat["id"], "owner": "o"}})
                )
            assert await wait_exit(server, 15) == 0
        # The kill ended it, and the drain with it: the shutdown had nothing left to reap.
        assert "shutdown: 0 sessions reaped" in server.stdout_rest(5)
        assert not alive(cat["pid"])
    finally:
        server.stop()


async def test_at_the_deadline_running_sessions_are_torn_down(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--no-ui")
    assert server.token_url is not None
    try:
        with trio.fail_after(30):
            async with open_ws(server.token_url) as ws:
                cat = (await rpc(ws, 1, "pty.spawn", spawn_params("o")))["result"]
                began = time.monotonic()
                await rpc(ws, 2, "server.drain", {"deadline_s": 0.5})
                assert await wait_exit(server, 15) == 0
            took = time.monotonic() - began
        assert 0.5 <= took < 0.5 + 5.0 + 3.0, took  # deadline, close_timeout, the exit
        assert "shutdown: 1 session reaped" in server.stdout_rest(5)
        assert not alive(cat["pid"])
    finally:
        server.stop()


async def test_sigusr1_drains_a_second_changes_nothing_and_sigterm_ends_it(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path, "--no-ui")
    assert server.token_url is not None
    try:
        with trio.fail_after(30):
            async with open_ws(server.token_url) as ws:
                cat = (await rpc(ws, 1, "pty.spawn", spawn_params("o")))["result"]
                server.proc.send_signal(signal.SIGUSR1)
                await poll_until(lambda: http_request(server.port, "/healthz")[0] == 503)
                info = (await rpc(ws, 2, "server.info"))["result"]
                asked = trio.current_time()
                assert info["draining"] is True
                assert 299 < info["drain_remaining_s"] <= 300  # Limits.drain_timeout
                # A second SIGUSR1 leaves the deadline where it was. Had it begun the drain
                # again, the deadline would have moved back by the 0.5 s slept here first.
                await trio.sleep(0.5)
                server.proc.send_signal(signal.SIGUSR1)
                # Taken by the server (its handler ran and woke the loop, which handles it
                # before a request that is sent after it).
                await poll_until(lambda: not signal_pending(server.proc.pid, signal.SIGUSR1))
                # From the first answer to the second question: at most the time between
                # the server's two readings, whatever the latency (+ the rounding to ms).
                waited = trio.current_time() - asked
                again = (await rpc(ws, 3, "server.info"))["result"]
                assert again["drain_remaining_s"] <= info["drain_remaining_s"] - waited + 0.002
                assert error_of(await rpc(ws, 4, "pty.spawn", spawn_params("o")))[1] == "draining"
                assert server.proc.poll() is None and alive(cat["pid"])  # the session runs on
                server.proc.send_signal(signal.SIGTERM)  # at once, drain or not
                assert await wait_exit(server, 15) == 0
        assert "shutdown: 1 session reaped" in server.stdout_rest(5)
        assert not alive(cat["pid"])
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------
# Who may drain and scrape; what /healthz and /metrics answer


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the Prometheus text format, by (name, labels); checks the lines."""
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram"), line
            typed.add(name)
            continue
        if line.startswith("# HELP "):
            continue
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        assert match is not None, line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match[2] or ""))
        samples[match[1], labels] = float(match[3])
        assert re.sub(r"_(bucket|sum|count)$", "", match[1]) in typed or match[1] in typed
    return samples


async def test_who_may_drain_and_scrape_and_what_the_metrics_say(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--node-id", "n-1", config=SCOPED_CONFIG, env=SCOPED_ENV)
    assert server.token is not None
    try:
        with trio.fail_after(40):
            async with open_ws(
                server.url, [(b"authorization", f"Bearer {server.token}".encode())]
            ) as ws:
                spawned = (await rpc(ws, 1, "pty.spawn", spawn_params("o")))["result"]
                assert re.fullmatch(r"pty_n-1_[0-9a-f]{8}", spawned["id"]), spawned["id"]
                await rpc(ws, 2, "pty.kill", {"id": spawned["id"], "owner": "o"})
                quick = await rpc(ws, 3, "pty.spawn", spawn_params("o", "sh", "-c", "printf abc"))
                assert quick["result"]["id"].startswith("pty_n-1_")
                denied = await rpc(ws, 4, "pty.spawn", spawn_params("o", "false"))
                assert error_of(denied)[1] == "permission_denied"
                info = (await rpc(ws, 5, "server.info"))["result"]
                assert info["node"] == "n-1"
                while True:  # the quick one has exited
                    listed = await rpc(ws, 6, "pty.list", {"owner": "o"})
                    if listed["result"]["sessions"][-1]["status"] == "exited":
                        break
                    await trio.sleep(0.02)
            for name in ("team", "view"):
                authorization = [(b"authorization", f"Bearer {TOKENS[name]}".encode())]
                async with open_ws(server.url, authorization) as ws:
                    reply = await rpc(ws, 1, "server.drain", {"deadline_s": 5})
                    assert error_of(reply) == (-32009, "permission_denied"), (name, reply)
            # Refusals the metrics count: a wrong token, a Host that is not ours.
            assert http_request(server.port, "/", host="evil.example")[0] == 403
            with pytest.raises(ConnectionFailed) as refused_token:
                async with connect(server.url, "wrong" * 8):
                    pass
            assert refused_token.value.status == 401

            path = "/metrics"
            assert http_request(server.port, path)[0] == 401
            assert http_request(server.port, f"{path}?token={server.token}")[0] == 401
            assert http_request(server.port, path, headers=bearer("nope" * 8))[0] == 401
            assert http_request(server.port, path, headers=bearer(TOKENS["team"]))[0] == 403
            assert http_request(server.port, path, headers=bearer(TOKENS["view"]))[0] == 200
            assert (
                http_request(server.port, path, method="POST", headers=bearer(server.token))[0]
                == 405
            )
            status, headers, body = http_request(server.port, path, headers=bearer(server.token))
            assert status == 200
            assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
            text = body.decode()
            metrics = parse_metrics(text)
            for token in (server.token, *TOKENS.values()):
                assert token not in text
            assert "owner" not in text and "pty_n-1" not in text  # no owners, ids, commands

            def value(name: str, **labels: str) -> float:
                return metrics[name, frozenset(labels.items())]

            from trio_pty import __version__

            assert value("trio_pty_build_info", version=__version__, node="n-1") == 1
            assert value("trio_pty_draining") == 0
            assert value("trio_pty_sessions", status="running") == 0
            assert value("trio_pty_sessions", status="killing") == 0
            assert value("trio_pty_sessions", status="killed") == 1
            assert value("trio_pty_sessions", status="exited") == 1
            assert value("trio_pty_spawns_total", outcome="started") == 2
            assert value("trio_pty_spawns_total", outcome="permission_denied") == 1
            assert value("trio_pty_teardown_seconds_count") == 1  # the kill, not the exit
            buckets = [
                v for (n, _), v in metrics.items() if n == "trio_pty_teardown_seconds_bucket"
            ]
            assert buckets == sorted(buckets) and buckets[-1] == 1
            assert 0 < value("trio_pty_teardown_seconds_sum") < 5
            assert value("trio_pty_output_bytes_total") >= 3  # abc
            # the WebSocket with a wrong token; /metrics bare, with ?token=, a wrong one, "team"
            assert value("trio_pty_connections_refused_total", reason="token") == 5
            assert value("trio_pty_connections_refused_total", reason="host") == 1
            assert value("trio_pty_connections_refused_total", reason="origin") == 0

            # A token for every owner may drain: then /metrics says so, and counts this one.
            async with open_ws(
                server.url, [(b"authorization", f"Bearer {TOKENS['ops']}".encode())]
            ) as ws:
                cat = (await rpc(ws, 1, "pty.spawn", spawn_params("o")))["result"]
                reply = await rpc(ws, 2, "server.drain", {"deadline_s": 20})
                assert reply["result"]["draining"] is True
                refused = await rpc(ws, 3, "pty.spawn", spawn_params("o"))
                assert error_of(refused)[1] == "draining"
                while True:  # the earlier connections' slots go when their closes are done
                    scraped = http_request(server.port, path, headers=bearer(TOKENS["view"]))
                    now = parse_metrics(scraped[2].decode())
                    if now["trio_pty_connections", frozenset()] == 1:
                        break
                    await trio.sleep(0.02)
                assert now["trio_pty_draining", frozenset()] == 1
                assert now["trio_pty_sessions", frozenset({("status", "running")})] == 1
                draining = now["trio_pty_spawns_total", frozenset({("outcome", "draining")})]
                assert draining == 1
                kill = {"jsonrpc": "2.0", "id": 4, "method": "pty.kill"}
                await ws.send_message(
                    json.dumps({**kill, "params": {"id": cat["id"], "owner": "o"}})
                )
                # The last session is gone: the server stops (and exits 0).
                assert await wait_exit(server, 15) == 0
    finally:
        server.stop()


@hypothesis.given(st.from_regex(validate.NODE_ID_PATTERN, fullmatch=True))
def test_a_node_id_is_a_dns_label_that_node_of_reads_back(node: str) -> None:
    assert validate.node_id(node) == node
    assert node_of(f"pty_{node}_1a2b3c4d") == node


def test_node_ids_that_are_no_dns_labels_are_refused() -> None:
    for bad in ("Node", "a_b", "-a", "a-", "a.b", "x" * 64, ""):
        with pytest.raises(InvalidInput) as caught:
            validate.node_id(bad)
        assert "DNS label" in caught.value.message
        with pytest.raises(ValueError):
            node_of(f"pty_{bad}_1a2b3c4d")
    assert validate.node_id("x" * 63) == "x" * 63


async def test_serve_refuses_a_bad_node_id_and_a_port_with_listen_fd() -> None:
    """What the command line says before it binds anything (both servers run at once)."""
    serve = [sys.executable, "-m", "trio_pty", "serve", "--no-ui", "--no-state-dir"]
    refusals: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(name: str, *args: str) -> None:
        refusals[name] = await trio.run_process(
            [*serve, *args], capture_stdout=True, capture_stderr=True, check=False
        )

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "node", "--port", "0", "--node-id=a_b")
            # Checked before the fd is looked at: fd 0 is no socket, and that is not the error.
            nursery.start_soon(run, "port", "--listen-fd", "0", "--port", "0")
    for name, done in refusals.items():
        assert done.returncode == 2, (name, done.stderr)
        assert not done.stdout, name  # no URL: nothing was served
    assert b"--node-id must be a DNS label" in refusals["node"].stderr
    assert b"--listen-fd serves on that socket: give no --host/--port" in refusals["port"].stderr


# --------------------------------------------------------------------------------------------
# Socket activation


def _start_activated(tmp_path: Path, fd: int) -> subprocess.Popen[bytes]:
    """`serve --listen-fd 3` with the socket at fd 3, as systemd passes it: the LISTEN_*
    variables set, LISTEN_PID being the server's own pid (bash moves the fd, then execs)."""
    config = tmp_path / "server.toml"
    config.write_text(TEST_CONFIG)
    move = "" if fd == 3 else f"exec 3<&{fd} {fd}<&-; "
    script = move + 'export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=rpc; exec "$@"'
    env = {k: v for k, v in os.environ.items() if k != "TRIO_PTY_TOKEN"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    command = [sys.executable, "-m", "trio_pty", "serve", "--listen-fd", "3", "--no-ui"]
    with open(tmp_path / "server.err", "ab") as err:
        return subprocess.Popen(
            ["bash", "-c", script, "bash", *command, "--config", str(config)],
            pass_fds=(fd,),
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )


def _inherited(pid: int) -> tuple[list[bytes], list[str]]:
    """The LISTEN_* variables process `pid` started with, and what its fds are."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    return [item for item in environ if item.startswith(b"LISTEN_")], links


def _close_on_exec(pid: int, fd: int) -> bool:
    fdinfo = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
    flags = re.search(r"flags:\s+(\d+)", fdinfo)
    assert flags is not None, fdinfo
    return bool(int(flags[1], 8) & os.O_CLOEXEC)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode


async def test_socket_activation_serves_on_the_held_socket_which_no_session_inherits(
    tmp_path: Path,
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        inode = os.fstat(listener.fileno()).st_ino
        proc = _start_activated(tmp_path, listener.fileno())
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + 15
            url = _read_line(proc.stdout, deadline)
            token_url = _read_line(proc.stdout, deadline)
            assert url == f"ws://127.0.0.1:{port}/rpc"  # the socket's own address
            with trio.fail_after(20):
                async with open_ws(token_url) as ws:
                    cat = (await rpc(ws, 1, "pty.spawn", spawn_params("o", "cat")))["result"]
                    variables, links = _inherited(cat["pid"])
                    assert variables == [] and f"socket:[{inode}]" not in links, links
                    # The server serves on the very socket it was given, made close-on-exec.
                    assert os.readlink(f"/proc/{proc.pid}/fd/3") == f"socket:[{inode}]"
                    assert _close_on_exec(proc.pid, 3)
            assert _stop(proc) == 0
            # Between two servers the port stays bound: a client waits in the backlog and
            # the next server answers it.
            waiting = socket.create_connection(("127.0.0.1", port), timeout=20)
            with waiting:
                waiting.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
                proc = _start_activated(tmp_path, listener.fileno())
                answer = waiting.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nok\n"), answer
        finally:
            _stop(proc)


def test_listening_socket_takes_only_a_listening_tcp_socket_it_was_given() -> None:
    def refusal(fd: int, environ: dict[str, str] | None = None) -> str:
        with pytest.raises(ValueError) as caught:
            activation.listening_socket(fd, environ or {})
        os.fstat(fd)  # a refused fd is left open, as it was (still the caller's)
        return str(caught.value)

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        fd = listener.fileno()
        assert fd != activation.FIRST_FD
        ours = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "1"}
        assert "not one of the 1 passed" in refusal(fd, ours)
        assert "LISTEN_FDS is not a number" in refusal(fd, {**ours, "LISTEN_FDS": "x"})
        # Variables meant for another process (our parent's, say) are no business of ours.
        os.set_inheritable(fd, True)
        taken = activation.listening_socket(fd, {**ours, "LISTEN_PID": "1"})
        try:
            assert taken.fileno() == fd and taken.getsockname() == listener.getsockname()
            assert not os.get_inheritable(fd)  # close-on-exec: no session inherits it
        finally:
            taken.detach()  # the listener closes it
        with socket.socket() as unbound:
            assert "not listening" in refusal(unbound.fileno())
        with socket.socket(type=socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            assert "not a TCP socket" in refusal(udp.fileno())
        with socket.socket(socket.AF_UNIX) as unix:
            assert "not a TCP socket" in refusal(unix.fileno())
    read, write = os.pipe()
    try:
        assert "not a socket" in refusal(read)
    finally:
        os.close(read)
        os.close(write)
    with pytest.raises(ValueError, match="not open"):
        activation.listening_socket(read, {})  # closed just now


# --------------------------------------------------------------------------------------------
# JSON logs


async def test_json_logs_have_the_events_and_none_of_the_secrets(tmp_path: Path) -> None:
    # Under command rules a spawn's env may set only what env_allow names.
    config = 'env_allow = ["MY_SETTING"]\n' + TEST_CONFIG
    server = start_server(tmp_path, "--log-format", "json", config=config)
    assert server.token_url is not None and server.token is not None
    secrets = {
        "argument": "ARG-MARKER-17",
        "environment": "ENV-VALUE-MARKER",
        "output": "OUT-MARKER-42",  # printed as $((6*7)): its text is in no argument
        "input": "IN-MARKER-typed",
        "token": server.token,
    }
    try:
        with trio.fail_after(30):
            async with open_ws(server.token_url) as ws:
                params = spawn_params(
                    "o", "sh", "-c", "echo OUT-MARKER-$((6*7)); cat", secrets["argument"]
                )
                params["env"] = {"MY_SETTING": secrets["environment"]}
                info = (await rpc(ws, 1, "pty.spawn", params))["result"]
                await rpc(
                    ws,
                    2,
                    "pty.write",
                    {"id": info["id"], "owner": "o", "data": secrets["input"] + "\n"},
                )
                await rpc(
                    ws,
                    3,
                    "pty.read",
                    {"id": info["id"], "owner": "o", "wait": {"idle_ms": 200}},
                )
                with pytest.raises(ConnectionFailed):
                    async with connect(server.url, "wrong" * 8):
                        pass
                await rpc(ws, 5, "server.drain", {"deadline_s": 10})
                refused = await rpc(ws, 6, "pty.spawn", spawn_params("o"))
                assert error_of(refused)[1] == "draining"
                # The kill ends the drain: the shutdown may close us before its answer.
                kill = {"jsonrpc": "2.0", "id": 4, "method": "pty.kill"}
                await ws.send_message(
                    json.dumps({**kill, "params": {"id": info["id"], "owner": "o"}})
                )
            assert await wait_exit(server, 15) == 0
    finally:
        server.stop()
    lines = [line for line in server.stderr().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    for record in records:
        assert {"ts", "level", "logger", "event", "msg"} <= set(record), record
        assert isinstance(record["ts"], float)
    by_event: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_event.setdefault(str(record["event"]), []).append(record)
    expected = {"listening", "page", "connect", "disconnect", "spawn", "kill", "exit"}
    expected |= {"refused", "drain", "spawn_refused", "shutdown"}
    assert expected <= set(by_event), sorted(by_event)
    [spawned] = by_event["spawn"]
    assert (spawned["id"], spawned["owner"], spawned["command"]) == (info["id"], "o", "sh")
    assert spawned["pid"] == info["pid"]
    [ended] = by_event["exit"]
    assert (ended["id"], ended["timed_out"], ended["reason"]) == (info["id"], False, None)
    assert ended["teardown_s"] is not None and 0 < ended["teardown_s"] < 5
    assert by_event["refused"][0]["reason"] == "token" and by_event["refused"][0]["status"] == 401
    assert by_event["spawn_refused"][0]["kind"] == "draining"
    assert by_event["drain"][0]["deadline_s"] == 10 and by_event["drain"][0]["running"] == 1
    assert by_event["shutdown"][0]["sessions"] == 0
    assert by_event["listening"][0]["url"] == server.url
    text = "\n".join(lines)
    for what, secret in secrets.items():
        assert secret not in text, f"the log holds the {what}"


# --------------------------------------------------------------------------------------------
# The router


def test_node_of_and_url_patterns() -> None:
    assert node_of("pty_trio-pty-1_1a2b3c4d") == "trio-pty-1"
    for bad in ("pty_1a2b3c4d", "pty__1a2b3c4d", "pty_A_1a2b3c4d", "job_n_1a2b3c4d", "pty_n_1a2b"):
        with pytest.raises(ValueError):
            node_of(bad)
    router = Router("t", pattern="ws://{node}.trio-pty.tools.svc:8765/rpc", nodes=["a"])
    url = router.url_for("pty_trio-pty-1_1a2b3c4d")
    assert url == "ws://trio-pty-1.trio-pty.tools.svc:8765/rpc"
    with pytest.raises(LookupError):
        Router("t", urls={"a": "ws://x/rpc"}).url_for("pty_b_1a2b3c4d")
    with pytest.raises(ValueError):
        Router("t", pattern="ws://host/rpc", nodes=["a"])
    with pytest.raises(ValueError):
        Router("t", pattern="ws://{node}/rpc")  # where would list go?
    assert Router("t", urls={"a": "ws://x/rpc", "b": "ws://y/rpc"}).nodes == ["a", "b"]


async def test_the_router_reaches_each_node_and_fans_out(tmp_path: Path) -> None:
    token = "router-token-" + "r" * 24
    servers = []
    for node in ("east", "west"):
        (tmp_path / node).mkdir()
        servers.append(
            start_server(
                tmp_path / node,
                "--no-ui",
                "--node-id",
                node,
                env={"TRIO_PTY_TOKEN": token},
                token_in_output=False,
            )
        )
    with socket.socket() as closed:  # a node that is down: nothing listens there
        closed.bind(("127.0.0.1", 0))
        dead = f"ws://127.0.0.1:{closed.getsockname()[1]}/rpc"
    urls = {"east": servers[0].url, "west": servers[1].url, "down": dead}
    router = Router(token, urls=urls, timeout=10)
    try:
        with trio.fail_after(40):
            ids = {}
            for node, server in zip(("east", "west"), servers, strict=True):
                async with connect(server.url, token) as client:
                    info = await client.request(
                        SpawnParams(command="cat", description="routed", owner="chat-1")
                    )
                    ids[node] = info.id
                    assert node_of(info.id) == node
            async with router.connect(ids["west"]) as client:
                info = await client.request(KillParams(id=ids["west"], owner="chat-1"))
                assert info.status == "killed"
                with pytest.raises(RpcError) as caught:  # the other node's session is not here
                    await client.request(KillParams(id=ids["east"], owner="chat-1"))
                assert caught.value.kind == "session_not_found"
            listing = await router.list(owner="chat-1")
            assert sorted(s.id for s in listing.sessions) == sorted(ids.values())
            assert list(listing.unreachable) == ["down"]
            deleted = await router.delete_owner("chat-1")
            assert deleted.removed == {"east": 1, "west": 1}
            assert list(deleted.unreachable) == ["down"]
            assert (await router.list(owner="chat-1")).sessions == []
    finally:
        for server in servers:
            assert server.stop() == 0


# --------------------------------------------------------------------------------------------
# The command line


async def test_the_cli_spawns_with_an_idle_timeout_and_drains(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--no-ui")
    assert server.token is not None
    env = {**os.environ, "TRIO_PTY_URL": server.url, "TRIO_PTY_TOKEN": server.token}

    async def cli(*args: str) -> str:
        done = await trio.run_process(
            [sys.executable, "-m", "trio_pty", *args],
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout.decode()

    try:
        with trio.fail_after(30):
            session_id = (await cli("spawn", "--idle-timeout", "0.3", "--", "cat")).strip()
            async with connect(server.url, server.token) as client:
                while True:
                    listing = await client.request(ListParams(all_owners=True))
                    [info] = [s for s in listing.sessions if s.id == session_id]
                    if info.status == "killed":
                        break
                    await trio.sleep(0.05)
            assert (info.reason, info.timed_out, info.idle_timeout) == ("idle_timeout", True, 0.3)
            result = json.loads(await cli("drain", "--deadline", "20"))
            assert (result["draining"], result["running"]) == (True, 0)
            assert 19.9 < result["drain_remaining_s"] <= 20
            # Nothing runs: the drain is over at once, and the server stops.
            assert await wait_exit(server, 15) == 0
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------
# The text format


def test_the_metrics_text_format() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 7.0):
        histogram.observe(value)
    text = render(
        [
            Family.of("a_total", "counter", "help with \\ and\nnewline", {(("k", 'v"\\\n'),): 2}),
            Family.of("b", "gauge", "plain", 0.25),
            Family.histogram("c_seconds", "h", histogram),
            Family("d", "gauge", "empty", (Sample(1, (("x", "y"),)),)),
        ]
    )
    assert text == (
        "# HELP a_total help with \\\\ and\\nnewline\n"
        "# TYPE a_total counter\n"
        'a_total{k="v\\"\\\\\\n"} 2\n'
        "# HELP b plain\n# TYPE b gauge\nb 0.25\n"
        "# HELP c_seconds h\n# TYPE c_seconds histogram\n"
        'c_seconds_bucket{le="0.1"} 2\nc_seconds_bucket{le="1"} 3\n'
        'c_seconds_bucket{le="+Inf"} 4\nc_seconds_sum 7.65\nc_seconds_count 4\n'
        '# HELP d empty\n# TYPE d gauge\nd{x="y"} 1\n'
    )
