"""The HTTP front and the monitor page's server side, over raw sockets.

Against a real `trio-pty serve` subprocess on port 0 (the page with its defaults, and
`--no-ui`), plus an in-process server for what needs another set of assets (the CDN
fallback). The page loads without a token, the RPC needs one; the page's own origin may use
`/rpc`, no other; every response carries the security headers; unknown paths are 404, HEAD
and malformed requests a clean 4xx, and the server keeps serving afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from trio_pty import Limits
from trio_pty.client.client import RpcError, connect
from trio_pty.server.serve import PAGE_LINE_PREFIX
from trio_pty.ui import ASSETS_DIR, AssetsError, load_page, vendor
from trio_pty.wire import KillParams, SpawnParams

from .rpc_support import (
    TEST_CONFIG,
    ServerProcess,
    client_frame,
    live,
    raw_status,
    serving,
    start_server,
)

__all__ = ["live"]  # fixtures used by name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The module's server, which waits 5 s for a request's first byte (the test config's
    1 s answered a loaded test client's `GET /nope` with 408 before it had sent it);
    http_head_timeout stays 1 s, which test_a_slow_request_head_is_bounded measures."""
    config = TEST_CONFIG.replace("io_timeout = 1.0", "io_timeout = 5.0")
    assert config != TEST_CONFIG
    process = start_server(tmp_path_factory.mktemp("server"), config=config)
    try:
        yield process
    finally:
        process.stop()


HAS_VENDOR_COPY = True
try:
    vendor.check_dir(vendor.VENDOR_DIR)
except vendor.VendorError:
    HAS_VENDOR_COPY = False


@attrs.frozen
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    raw_head: bytes


async def send_raw(port: int, data: bytes, *, host: str = "127.0.0.1") -> Response:
    """Send `data` as is and read the response until the server closes (bounded)."""
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream(host, port)
        async with stream:
            await stream.send_all(data)
            received = b""
            while chunk := await stream.receive_some(65536):
                received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1]) if lines[0] else 0
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        assert name.lower() not in headers, f"duplicate header {name}"
        headers[name.lower()] = value.strip()
    return Response(status, headers, body, head)


async def get(
    port: int,
    target: str,
    *,
    method: str = "GET",
    host: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return await send_raw(port, ("\r\n".join(lines) + "\r\n\r\n").encode())


def csp_directives(value: str) -> dict[str, list[str]]:
    directives: dict[str, list[str]] = {}
    for part in value.split(";"):
        words = part.split()
        if words:
            assert words[0] not in directives, f"directive {words[0]} twice"
            directives[words[0]] = words[1:]
    return directives


def stderr_line(server: ServerProcess, prefix: str, timeout: float = 5.0) -> str | None:
    deadline = time.monotonic() + timeout
    while True:
        for line in server.stderr().splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :]
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)


SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
    "connection": "close",
}


def assert_security_headers(response: Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (name, response.raw_head)
    csp = csp_directives(response.headers["content-security-policy"])
    assert csp["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in response.headers["content-security-policy"]
    assert "'unsafe-eval'" not in response.headers["content-security-policy"]


# --------------------------------------------------------------------------------------------
# Over a real `trio-pty serve`


async def test_serve_prints_the_page_url_with_the_generated_token(live: ServerProcess) -> None:
    assert live.token is not None
    page_url = stderr_line(live, PAGE_LINE_PREFIX)
    assert page_url == f"http://127.0.0.1:{live.port}/?token={live.token}"
    # stdout keeps its contract: the two URL lines were read, nothing else came.
    assert live.url == f"ws://127.0.0.1:{live.port}/rpc"


async def test_the_page_loads_without_a_token_but_the_rpc_needs_one(live: ServerProcess) -> None:
    page = await get(live.port, "/")
    assert page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert int(page.headers["content-length"]) == len(page.body)
    assert page.body == (ASSETS_DIR / "index.html").read_bytes()
    assert live.token is not None and live.token.encode() not in page.body
    # The token in the page's URL changes nothing about what is served.
    with_token = await get(live.port, f"/?token={live.token}&owner=a")
    assert with_token.status == 200 and with_token.body == page.body
    for path, content_type in [
        ("/monitor.js", "text/javascript; charset=utf-8"),
        ("/monitor.css", "text/css; charset=utf-8"),
        ("/favicon.svg", "image/svg+xml"),
    ]:
        response = await get(live.port, path)
        assert response.status == 200, path
        assert response.headers["content-type"] == content_type
        assert response.body == (ASSETS_DIR / path.lstrip("/")).read_bytes()
        assert_security_headers(response)
    # The RPC: no token, a wrong one, then the right one.
    assert await raw_status(live.port) == 401
    assert await raw_status(live.port, target="/rpc?token=nope") == 401
    assert await raw_status(live.port, target=f"/rpc?token={live.token}") == 101


async def test_html_has_a_strict_csp_and_security_headers(live: ServerProcess) -> None:
    for host in (f"127.0.0.1:{live.port}", f"localhost:{live.port}"):
        page = await get(live.port, "/", host=host)
        assert page.status == 200
        assert_security_headers(page)
        csp = csp_directives(page.headers["content-security-policy"])
        assert csp["default-src"] == ["'none'"]
        if HAS_VENDOR_COPY:  # xterm.js is served from here: nothing from elsewhere
            assert csp["script-src"] == ["'self'"]
            assert csp["style-src"] == ["'self'"]
        assert csp["connect-src"] == ["'self'", f"ws://{host}", f"wss://{host}"]
        assert csp["base-uri"] == ["'none'"] and csp["form-action"] == ["'none'"]
        assert csp["img-src"] == ["'self'"]
    # The page uses no inline script or style at all.
    html = (ASSETS_DIR / "index.html").read_text()
    assert "<script>" not in html and "style=" not in html and "<style" not in html
    scripts = re.findall(r"<script[^>]*>", html)
    assert scripts and all(re.search(r' src="/[^"]+"', tag) for tag in scripts), scripts


async def test_only_the_pages_own_origin_may_use_the_rpc(live: ServerProcess) -> None:
    port, token = live.port, live.token
    bearer = ("Authorization", f"Bearer {token}")
    with trio.fail_after(10):
        own = ("Origin", f"http://127.0.0.1:{port}")
        assert await raw_status(port, headers=[bearer, own]) == 101
        # The page's origin from the other alias: the same server either way.
        assert (
            await raw_status(
                port,
                host=f"localhost:{port}",
                headers=[bearer, ("Origin", f"http://127.0.0.1:{port}")],
            )
            == 101
        )
        for origin in (
            "http://evil.example",
            f"http://evil.example:{port}",
            f"http://127.0.0.1:{port + 1}",
            f"https://127.0.0.1:{port}",
            f"http://127.0.0.1:{port}/",
            f"http://127.0.0.1.evil.example:{port}",
            "null",
            # Listening on 127.0.0.1 only: [::1]:PORT, where a browser tries localhost first,
            # may be another program's (see test_security_http.py).
            f"http://[::1]:{port}",
            f"http://localhost:{port}",
        ):
            assert await raw_status(port, headers=[bearer, ("Origin", origin)]) == 403, origin
        # The page's origin gets no way around the token.
        page_origin = ("Origin", f"http://127.0.0.1:{port}")
        assert await raw_status(port, headers=[page_origin]) == 401
        # A rebound name is refused on the page too (Host), as it is on /rpc.
        evil = await get(port, "/", host=f"evil.example:{port}")
        assert evil.status == 403 and b"<html" not in evil.body
        assert_security_headers(evil)


async def test_unknown_paths_are_404(live: ServerProcess) -> None:
    for target in (
        "/nope",
        "/index.html",
        "/monitor.js/",
        "/vendor/",
        "/vendor/xterm.js.map",
        "/vendor/other.js",
        "/vendor/xterm.LICENSE",
        "/../etc/passwd",
        "/%2e%2e/etc/passwd",
        "//monitor.js",
        "/assets/monitor.js",
        "/favicon.ico",
    ):
        response = await get(live.port, target)
        assert response.status == 404, target
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        assert response.body == b"404 not found\n"
        assert_security_headers(response)
    # The WebSocket path without an upgrade says what it is.
    plain = await get(live.port, "/rpc")
    assert plain.status == 426 and plain.headers["upgrade"] == "websocket"


async def test_head_and_malformed_requests_get_a_clean_4xx(live: ServerProcess) -> None:
    port = live.port
    head = await get(port, "/", method="HEAD")
    assert head.status == 405 and head.headers["allow"] == "GET" and head.body == b""
    for method in ("POST", "PUT", "DELETE", "OPTIONS", "get"):
        response = await get(port, "/", method=method)
        assert response.status == 405, method
        assert response.headers["allow"] == "GET"
    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    cases = [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /\r\n\r\n", 400),  # HTTP/0.9
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET / HTTP/1.1\r\n" + host + host + b"\r\n", 400),  # two Host headers
        (b"GET / HTTP/1.1\r\n" + host + b"Bad Header\r\n\r\n", 400),
        (b"GET http://127.0.0.1/ HTTP/1.1\r\n" + host + b"\r\n", 400),  # absolute form
        (b"OPTIONS * HTTP/1.1\r\n" + host + b"\r\n", 400),
        (b"GET / HTTP/2.0\r\n" + host + b"\r\n", 400),
        (b"GET / HTTP/1.1\r\n" + host + b"X: " + b"a" * 20_000 + b"\r\n\r\n", 431),
    ]
    for data, status in cases:
        response = await send_raw(port, data)
        assert response.status == status, (data[:40], response.raw_head)
        assert response.headers["connection"] == "close"
        assert response.body.startswith(str(status).encode())
    # None of it disturbed the server.
    assert (await get(port, "/")).status == 200


async def test_a_slow_request_head_is_bounded(live: ServerProcess) -> None:
    """http_head_timeout (1 s in the test config) from the head's first byte, then 408 and
    close."""
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream("127.0.0.1", live.port)
        async with stream:
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            started = trio.current_time()
            received = b""
            while chunk := await stream.receive_some(65536):
                received += chunk
            elapsed = trio.current_time() - started
    assert received.startswith(b"HTTP/1.1 408 ")
    assert 0.8 < elapsed < 3


async def test_an_upgrade_head_arriving_in_pieces_is_replayed_whole(
    live: ServerProcess,
) -> None:
    """The front reads the head (here in three pieces) before it knows where it goes; the
    RPC server must then see exactly those bytes, and the connection work as usual."""
    key = base64.b64encode(os.urandom(16)).decode()
    head = (
        f"GET /rpc?token={live.token} HTTP/1.1\r\nHost: 127.0.0.1:{live.port}\r\n"
        f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        f"Sec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1:{live.port}\r\n\r\n"
    ).encode()
    accept = base64.b64encode(
        hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
    )
    request = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "server.info"}).encode()
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", live.port)
        async with stream:
            for piece in (head[:5], head[5:60], head[60:]):
                await stream.send_all(piece)
                await trio.sleep(0.05)
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = await stream.receive_some(65536)
                assert chunk, received
                received += chunk
            assert received.startswith(b"HTTP/1.1 101 ")
            assert b"Sec-WebSocket-Accept: " + accept in received
            await stream.send_all(client_frame(0x1, request))
            while b'"id":7' not in received:
                chunk = await stream.receive_some(65536)
                assert chunk, received
                received += chunk
    assert b'"version"' in received


async def test_monitor_lists_every_owner(live: ServerProcess) -> None:
    """pty.list {all_owners: true}: every owner's sessions, oldest first (the token grants
    every owner anyway); combined with `owner` it is -32602."""
    assert live.token is not None
    with trio.fail_after(15):
        async with connect(live.url, live.token) as client:
            a = await client.request(
                SpawnParams(command="sleep", args=["30"], owner="ui-a", description="a")
            )
            b = await client.request(
                SpawnParams(command="sleep", args=["30"], owner="ui-b", description="b")
            )
            try:
                listed = await client.call("pty.list", {"all_owners": True})
                ids = [s["id"] for s in listed["sessions"]]
                assert ids.index(a.id) < ids.index(b.id)
                owners = {s["id"]: s["owner"] for s in listed["sessions"]}
                assert owners[a.id] == "ui-a" and owners[b.id] == "ui-b"
                only_a = await client.call("pty.list", {"owner": "ui-a"})
                assert [s["id"] for s in only_a["sessions"]] == [a.id]
                default = await client.call("pty.list", {})
                assert a.id not in [s["id"] for s in default["sessions"]]
                with pytest.raises(RpcError) as both:
                    await client.call("pty.list", {"owner": "ui-a", "all_owners": True})
                assert both.value.code == -32602
                assert both.value.data["errors"][0]["path"] == "all_owners"
                with pytest.raises(RpcError) as wrong:
                    await client.call("pty.list", {"all_owners": "yes"})
                assert wrong.value.code == -32602
            finally:
                await client.request(KillParams(id=a.id, owner="ui-a", cleanup=True))
                await client.request(KillParams(id=b.id, owner="ui-b", cleanup=True))


async def test_vendor_files_are_served_verified(live: ServerProcess) -> None:
    if not HAS_VENDOR_COPY:
        pytest.skip("no local xterm.js copy (python3 trio_pty/ui/vendor.py fetch)")
    for package, file in vendor.vendor_files():
        response = await get(live.port, f"/vendor/{file.name}")
        assert response.status == 200, file.name
        assert response.headers["content-type"] == file.content_type
        digest = base64.b64encode(hashlib.sha384(response.body).digest()).decode()
        assert digest == file.sha384, package.spec


# --------------------------------------------------------------------------------------------
# --no-ui and --ui-assets


async def test_no_ui_turns_the_page_off_and_leaves_the_rpc(tmp_path: Path) -> None:
    process = start_server(tmp_path, "--no-ui")
    try:
        assert process.token is not None
        port = process.port
        for target in ("/", f"/?token={process.token}", "/monitor.js", "/vendor/xterm.js"):
            response = await get(port, target)
            assert response.status == 404, target
            assert_security_headers(response)
        assert (await get(port, "/", method="HEAD")).status == 405
        assert await raw_status(port, target=f"/rpc?token={process.token}") == 101
        assert await raw_status(port) == 401
        # Without a page, its origin is just another origin.
        page_origin = ("Origin", f"http://127.0.0.1:{port}")
        assert (
            await raw_status(port, target=f"/rpc?token={process.token}", headers=[page_origin])
            == 403
        )
        assert stderr_line(process, PAGE_LINE_PREFIX, timeout=0.2) is None
    finally:
        assert process.stop() == 0


async def test_a_chosen_token_is_not_printed_in_the_page_url(tmp_path: Path) -> None:
    process = start_server(tmp_path, "--token", "my-own-token", token_in_output=False)
    try:
        page_url = stderr_line(process, PAGE_LINE_PREFIX)
        assert page_url == f"http://127.0.0.1:{process.port}/"
        assert "my-own-token" not in process.stderr()
    finally:
        process.stop()


def test_ui_assets_must_be_a_valid_copy(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AssetsError, match="cannot read"):
        load_page(empty)
    if not HAS_VENDOR_COPY:
        pytest.skip("no local xterm.js copy to copy")
    good = tmp_path / "good"
    shutil.copytree(vendor.VENDOR_DIR, good)
    page = load_page(good)
    assert page.xterm == "local" and page.xterm_dir == good.resolve()
    (good / "xterm.js").write_bytes(b"alert(1)")
    with pytest.raises(AssetsError, match="is not @xterm/xterm@"):
        load_page(good)


async def test_serve_refuses_a_bad_ui_assets_dir(tmp_path: Path) -> None:
    with pytest.raises(EOFError):  # exits before printing its URL
        start_server(tmp_path, "--ui-assets", str(tmp_path))
    assert "--ui-assets" in (tmp_path / "server.err").read_text()


def test_index_html_pins_the_same_files_as_the_fetcher() -> None:
    html = (ASSETS_DIR / "index.html").read_text()
    tags = re.findall(r"<(?:script|link)\b[^>]*>", html)
    pinned = {}
    for tag in tags:
        source = re.search(r'(?:src|href)="([^"]+)"', tag)
        integrity = re.search(r'integrity="([^"]+)"', tag)
        if source and source.group(1).startswith("/vendor/"):
            assert integrity is not None, tag
            assert 'crossorigin="anonymous"' in tag, tag
            pinned[source.group(1)] = integrity.group(1)
    expected = {
        f"/vendor/{file.name}": f"sha384-{file.sha384}" for _, file in vendor.vendor_files()
    }
    assert pinned == expected


def test_vendor_check_and_fetch_refuse_what_does_not_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _, file in vendor.vendor_files():
        (tmp_path / file.name).write_bytes(b"not it")
    with pytest.raises(vendor.VendorError, match="is not"):
        vendor.check_dir(tmp_path)
    assert vendor.main(["check", str(tmp_path)]) == 1
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(vendor.VendorError, match="npm is not installed"):
        vendor.fetch(tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


# --------------------------------------------------------------------------------------------
# In process: the CDN fallback, and the front's own bounds

TOKEN = "ui-test-token"
LIMITS = Limits(io_timeout=1.0, max_connections=2, max_pending_per_peer=2, terminate_grace=0.2)


async def test_without_a_local_copy_xterm_comes_from_the_cdn_with_sri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trio_pty.ui as ui

    monkeypatch.setattr(ui, "VENDOR_DIR", tmp_path / "missing")
    page = load_page()
    assert page.xterm == "cdn"
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN, page=page.site) as server:
            html = await get(server.port, "/")
            csp = csp_directives(html.headers["content-security-policy"])
            for package, file in vendor.vendor_files():
                url = f"https://cdn.jsdelivr.net/npm/{package.spec}/{file.member}"
                response = await get(server.port, f"/vendor/{file.name}")
                assert response.status == 302 and response.headers["location"] == url
                assert response.body == b""
                # The CSP names exactly the pinned files (and only as script or style).
                directive = "style-src" if file.name.endswith(".css") else "script-src"
                assert url in csp[directive]
            files = [file.name for _, file in vendor.vendor_files()]
            scripts = len([name for name in files if name.endswith(".js")])
            assert csp["script-src"][0] == "'self'" and len(csp["script-src"]) == 1 + scripts
            assert csp["style-src"][0] == "'self'" and len(csp["style-src"]) == 2
            assert page.site.redirects  # and no local file under /vendor/
            assert not [p for p in page.site.files if p.startswith("/vendor/")]


async def test_an_embedded_server_serves_no_page_unless_given_one() -> None:
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN, page=None) as server:
            assert server.page_url is None
            assert (await get(server.port, "/")).status == 404
            assert await raw_status(server.port, target=f"/rpc?token={TOKEN}") == 101


async def test_connections_that_send_nothing_are_bounded_and_dropped_on_stop() -> None:
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN, page=load_page().site) as server:
            idle = [await trio.open_tcp_stream("127.0.0.1", server.port) for _ in range(2)]
            try:
                await trio.testing.wait_all_tasks_blocked()
                while server.front.pending < 2:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                # Past max_pending_per_peer waiting heads, the peer's next connection makes
                # room: its oldest head that sent nothing is dropped, and the page served
                # (a 503 there locked every client of the address out: issue 30).
                served = await get(server.port, "/")
                assert served.status == 200
                with suppress(trio.BrokenResourceError):
                    assert await idle[0].receive_some(65536) == b""
                # stop() drops the others at once (no waiting for io_timeout).
                started = trio.current_time()
                server.stop()
                with suppress(trio.BrokenResourceError):  # a reset is a drop too
                    assert await idle[1].receive_some(65536) == b""
                assert trio.current_time() - started < 0.5
                while server.front.pending:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            finally:
                for stream in idle:
                    await stream.aclose()
