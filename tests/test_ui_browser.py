"""The monitor page in a real browser: Playwright for Python driving Debian's Chromium.

One scenario, start to end, against a real `trio-pty serve`: open the printed URL, see a
session another owner spawned, attach and see its output rendered, type and see the answer,
resize the window and see the child get SIGWINCH with the new size, drop the WebSocket and see
the view resume without a repeated or a missing line (including output produced while it was
away), kill the session and see its badge change while its output stays readable. Plus the
`?owner=` filter and the spawn form. No CSP violation may happen on the way.

Skipped when Playwright, Chromium (/usr/bin/chromium, or TRIO_PTY_CHROMIUM) or the local
xterm.js copy (`python3 trio_pty/ui/vendor.py fetch`; the CDN is not reachable from tests) is
missing, unless TRIO_PTY_REQUIRE_BROWSER=1 (CI), which turns each of those into a failure.
With TRIO_PTY_UI_SCREENSHOT=PATH it also saves the screenshot used in the docs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
import trio

from tests import leaks
from trio_pty.model import Wait
from trio_pty.rpc.client import connect
from trio_pty.rpc.serve import PAGE_LINE_PREFIX
from trio_pty.ui import vendor
from trio_pty.wire import ListParams, SpawnParams, WriteParams

from .rpc_support import ServerProcess, start_server, wait_no_server_processes

REQUIRED = os.environ.get("TRIO_PTY_REQUIRE_BROWSER") == "1"
CHROMIUM = os.environ.get("TRIO_PTY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STEP_TIMEOUT_MS = 8000  # any one wait in the page
TEST_BUDGET = 60.0  # seconds, the whole scenario (it takes about 10)

# The session the page drives: answers each line with the value of the expression, and
# reports every window size change it is told about.
CHILD = r"""
import os, signal, sys
def winch(*_):
    cols, rows = os.get_terminal_size(0)
    print(f"WINCH {rows}x{cols}", flush=True)
signal.signal(signal.SIGWINCH, winch)
print("READY", flush=True)
for line in sys.stdin:
    line = line.strip()
    if line:
        print(f"ANSWER {eval(line, {})}", flush=True)
"""


def _missing(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"TRIO_PTY_REQUIRE_BROWSER=1 but {why}")
    pytest.skip(why)


def _playwright() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright is not installed (pip install -e '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        vendor.check_dir(vendor.VENDOR_DIR)
    except vendor.VendorError as exc:
        _missing(f"no local xterm.js copy ({exc}); run python3 trio_pty/ui/vendor.py fetch")
    return sync_playwright


def _rpc(server: ServerProcess, work: Callable[[Any], Any]) -> Any:
    """Run `work(client)` with the project's client, from this synchronous test."""

    async def main() -> Any:
        assert server.token is not None
        with trio.fail_after(15):
            async with connect(server.url, server.token) as client:
                return await work(client)

    return trio.run(main)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    _playwright()  # skip (or fail) before starting anything
    process = start_server(tmp_path)
    try:
        yield process
        wait_no_server_processes(process)
    finally:
        process.stop()


def page_url(server: ServerProcess) -> str:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for line in server.stderr().splitlines():
            if line.startswith(PAGE_LINE_PREFIX):
                return line[len(PAGE_LINE_PREFIX) :]
        time.sleep(0.02)
    raise AssertionError(f"no page URL on stderr: {server.stderr()}")


def wait_browser_gone(before: set[int]) -> None:
    """Playwright's driver and Chromium are this process's children: wait until they are
    gone (and reaped), so the leak check after the test sees none of them."""
    deadline = time.monotonic() + 10
    while True:
        left = {pid: v for pid, v in leaks.descendants([os.getpid()]).items() if pid not in before}
        for pid in left:
            with suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"the browser left processes behind: {left}"


def test_monitor_in_a_real_browser(server: ServerProcess, tmp_path: Path) -> None:
    sync_playwright = _playwright()
    started = time.monotonic()
    owner, other = "agent-1", "agent-2"

    async def spawn_sessions(client: Any) -> Any:
        await client.request(
            SpawnParams(
                command="sh",
                args=["-c", "echo build ok; exit 0"],
                owner=other,
                description="build",
                title="make",
            )
        )
        await client.request(
            SpawnParams(
                command="sh",
                args=["-c", "echo 'error: tests failed' >&2; exit 2"],
                owner=other,
                description="tests",
                title="pytest",
            )
        )
        return await client.request(
            SpawnParams(
                command="python3",
                args=["-u", "-c", CHILD],
                owner=owner,
                description="a calculator",
                title="calc",
                ready=Wait(pattern="READY", timeout_ms=5000),
            )
        )

    info = _rpc(server, spawn_sessions)
    console: list[str] = []
    before = set(leaks.descendants([os.getpid()]))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                timeout=20_000,
            )
            try:
                context = browser.new_context(viewport={"width": 1200, "height": 760})
                page = context.new_page()
                page.set_default_timeout(STEP_TIMEOUT_MS)
                page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
                page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
                _scenario(page, server, info, owner, other, tmp_path)
            finally:
                browser.close()
    finally:
        wait_browser_gone(before)
    errors = [line for line in console if line.startswith(("error", "pageerror"))]
    assert not errors, errors
    elapsed = time.monotonic() - started
    assert elapsed < TEST_BUDGET, elapsed
    print(f"browser scenario: {elapsed:.1f} s")


def poll(page: Any, expression: str, timeout: float = STEP_TIMEOUT_MS / 1000) -> None:
    """Wait until `expression` is true in the page. (Playwright's wait_for_function compiles
    its predicate with eval inside the page, which the page's CSP rightly refuses.)"""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression}")
        page.wait_for_timeout(25)


def _scenario(
    page: Any, server: ServerProcess, info: Any, owner: str, other: str, tmp_path: Path
) -> None:
    monitor = "window.trioPtyMonitor"

    def status() -> dict[str, Any]:
        result: dict[str, Any] = page.evaluate(f"{monitor}.status()")
        return result

    def lines() -> list[str]:
        result: list[str] = page.evaluate(f"{monitor}.lines()")
        return result

    def wait_rendered(text: str) -> None:
        """`text` is on the terminal's screen as the browser drew it (DOM rows)."""
        page.locator("#terminal .xterm-rows").get_by_text(text, exact=False).first.wait_for()

    def wait_until(expression: str, on: Any = None) -> None:
        poll(on or page, expression)

    # Open the printed URL: the token leaves the address bar, the page connects.
    url = page_url(server)
    assert "?token=" in url
    page.goto(url)
    wait_until(f"{monitor}.status().connected")
    assert "token" not in page.url, page.url
    assert server.token is not None and server.token not in page.url

    # The session (another owner's than the page's default) is listed, live.
    row = page.locator(f"#sessions tbody tr[data-id='{info.id}']")
    row.wait_for()
    assert row.locator("td.owner").inner_text() == owner
    assert row.locator("td.title").inner_text() == "calc"
    assert row.locator(".badge").inner_text() == "running"
    assert page.locator("#sessions tbody tr").count() == 3

    # Attach: the retained output is rendered, then live output.
    row.click()
    wait_rendered("READY")
    page.locator("#terminal").click()
    page.keyboard.type("6*7")
    page.keyboard.press("Enter")
    wait_rendered("ANSWER 42")

    # Resize the window: the terminal refits, the session is resized, the child is told.
    first = status()
    page.set_viewport_size({"width": 900, "height": 560})
    wait_until(
        f"(s => s.rows !== {first['rows']} && s.cols !== {first['cols']})({monitor}.status())"
    )
    resized = status()
    expected = f"WINCH {resized['rows']}x{resized['cols']}"
    wait_rendered(expected)

    # Drop the WebSocket; meanwhile the session produces output; the page comes back and
    # resumes exactly where it was.
    assert page.evaluate(f"{monitor}.drop(1500)")
    wait_until(f"!{monitor}.status().connected")

    async def type_while_away(client: Any) -> None:
        await client.request(
            WriteParams(
                id=info.id,
                data="2+3\n",
                owner=owner,
                wait=Wait(pattern="ANSWER 5", timeout_ms=5000),
            )
        )

    _rpc(server, type_while_away)
    wait_until(f"(s => s.connected && s.reconnects === 1)({monitor}.status())")
    wait_rendered("ANSWER 5")
    page.locator("#terminal").click()
    page.keyboard.type("1+1")
    page.keyboard.press("Enter")
    wait_rendered("ANSWER 2")
    screen = lines()
    for line in ("READY", "ANSWER 42", expected, "ANSWER 5", "ANSWER 2"):
        assert screen.count(line) == 1, (line, screen)

    async def byte_count(client: Any) -> int:
        [session] = [
            s for s in (await client.request(ListParams(owner=owner))).sessions if s.id == info.id
        ]
        return int(session.byte_count)

    wait_until(f"{monitor}.status().nextOffset === {_rpc(server, byte_count)}")

    screenshot = os.environ.get("TRIO_PTY_UI_SCREENSHOT")
    page.screenshot(path=str(tmp_path / "monitor.png"))
    if screenshot:
        page.set_viewport_size({"width": 1200, "height": 700})
        wait_rendered("ANSWER 2")
        page.wait_for_timeout(300)  # let the refit settle
        page.screenshot(path=screenshot)

    # Kill: the badge changes, the exit shows, the output stays readable.
    page.locator("#kill").click()
    row.locator(".badge.killed").wait_for()
    page.locator("#term-status.killed").wait_for()
    assert row.locator("td.exit").inner_text() == "SIGHUP"
    assert page.locator("#kill").is_disabled()
    wait_rendered("ANSWER 42")
    assert lines()[: len(screen)] == screen

    # ?owner= shows only those owners' sessions; the spawn form spawns as the first of them.
    filtered = page.context.new_page()
    filtered.set_default_timeout(STEP_TIMEOUT_MS)
    filtered.goto(f"{url}&owner={other}")
    wait_until(f"{monitor}.status().connected", filtered)
    wait_until(f"{monitor}.status().sessions.length === 2", filtered)
    assert info.id not in filtered.evaluate(f"{monitor}.status()")["sessions"]
    filtered.locator("#spawn summary").click()
    form = filtered.locator("#spawn-form")
    form.locator("input[name=command]").fill("sh")
    form.locator("input[name=args]").fill("-c 'echo \"spawned from the page\"; sleep 30'")
    form.locator("input[name=description]").fill("from the browser")
    form.locator("button[type=submit]").click()
    wait_until(f"{monitor}.status().sessions.length === 3", filtered)
    filtered.locator("#terminal .xterm-rows").get_by_text("spawned from the page").wait_for()
    spawned = filtered.evaluate(f"{monitor}.status()")["selected"]

    async def owner_of(client: Any) -> str:
        listed = await client.call("pty.list", {"owner": other})
        [session] = [s for s in listed["sessions"] if s["id"] == spawned]
        return str(session["owner"])

    assert _rpc(server, owner_of) == other
    # Kill and clean up from the page: the session is gone from the server and the list.
    filtered.locator("#cleanup").click()
    wait_until(f"{monitor}.status().sessions.length === 2", filtered)
    # A wrong token: the page asks for one (and the right one, typed in, connects).
    wrong = page.context.new_page()  # no console listener: the refused socket logs an error
    wrong.set_default_timeout(STEP_TIMEOUT_MS)
    wrong.goto(url.replace(server.token, "wrong"))
    wrong.locator("#auth").wait_for()
    assert "token is wrong" in wrong.locator("#auth-message").inner_text()
    assert "token" not in wrong.url
    wrong.locator("#auth-form input[name=token]").fill(server.token)
    wrong.locator("#auth-form button").click()
    wait_until(f"{monitor}.status().connected", wrong)
    assert wrong.locator("#auth").is_hidden()
    for view in (page, filtered, wrong):
        violations = view.evaluate(f"{monitor}.status()")["violations"]
        assert violations == [], violations
