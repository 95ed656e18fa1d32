"""The monitor page in a real browser: Playwright for Python driving Debian's Chromium.

One browser and one real `trio-pty serve` for the module; each test opens its own pages and
uses its own owners (deleted after it). The first test is one scenario, start to end: open
the printed URL, see a session another owner spawned, attach and see its output rendered,
type and see the answer, resize the window and see the child get SIGWINCH with the new size,
drop the WebSocket and see the view resume without a repeated or a missing line (including
output produced while it was away), kill the session and see its badge change while its
output stays readable; the `?owner=` filter, the spawn form and a wrong token. The others
check the page's layout and tools at 1280 and 420 px wide: the spawn form neither cut off
nor over the rows, the sticky header opaque, newest sessions first, sorting, the filter box,
the terminal title, the resizable split, CJK and emoji (their cells and their glyphs), tabs
and the grid, and scrollback search; a read-only token watches a live session without
driving it. No CSP violation and no page error may happen.

Skipped when Playwright, Chromium (/usr/bin/chromium, or TRIO_PTY_CHROMIUM) or the local
xterm.js copy (`python3 trio_pty/ui/vendor.py fetch`; the CDN is not reachable from tests) is
missing, unless TRIO_PTY_REQUIRE_BROWSER=1 (CI), which turns each of those into a failure.
With TRIO_PTY_UI_SCREENSHOTS=DIR the tests also save the screenshots used in docs/monitor.md.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
import trio
from PIL import Image

from tests import leaks
from trio_pty.client.client import RpcError, connect
from trio_pty.model import SessionInfo, Wait
from trio_pty.server.serve import PAGE_LINE_PREFIX
from trio_pty.ui import vendor
from trio_pty.wire import ListParams, OwnerDeleteParams, SpawnParams, WriteParams

from .rpc_support import TEST_CONFIG, ServerProcess, start_server, wait_no_server_processes

# A read-only token of the config's [[tokens]] (a dashboard's): it may watch, not drive.
WATCHER_TOKEN = "watcher-" + "5" * 40
WATCHER_CONFIG = """
[[tokens]]
name = "watcher"
env = "TRIO_PTY_TEST_WATCHER_TOKEN"
owners = ["*"]
read_only = true
"""

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
    # One renderer process for every page: Chromium would otherwise start one per page and
    # keep spare ones, which the leak check after each test would see come and go.
    "--renderer-process-limit=1",
]
STEP_TIMEOUT_MS = 8000  # any one wait in the page
TEST_BUDGET = 60.0  # seconds, the whole first scenario (it takes about 6)
WIDTHS = (1280, 420)
HEIGHT = 800
SHOTS = os.environ.get("TRIO_PTY_UI_SCREENSHOTS")
MONITOR = "window.trioPtyMonitor"

# The session the first scenario drives: answers each line with the value of the
# expression, and reports every window size change it is told about.
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


def page_url(server: ServerProcess) -> str:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for line in server.stderr().splitlines():
            if line.startswith(PAGE_LINE_PREFIX):
                return line[len(PAGE_LINE_PREFIX) :]
        time.sleep(0.02)
    raise AssertionError(f"no page URL on stderr: {server.stderr()}")


def wait_browser_gone(before: set[int]) -> None:
    """Playwright's driver and Chromium are this process's children: wait until those that
    were not there `before` are gone (and reaped), so the leak check after the test sees
    none of them."""
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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    _playwright()  # skip (or fail) before starting anything
    config = TEST_CONFIG.replace("max_sessions_per_owner = 3", "max_sessions_per_owner = 16")
    config += WATCHER_CONFIG
    process = start_server(
        tmp_path_factory.mktemp("browser"),
        config=config,
        env={"TRIO_PTY_TEST_WATCHER_TOKEN": WATCHER_TOKEN},
        # Shells start in / so that a prompt naming the checkout's path (long in a fresh
        # clone) does not wrap the typed commands at 420 px: a wrapped echo of a typed
        # bash command is recorded garbled (a known limitation, see test_shell_sessions.py).
        cwd="/",
    )
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def context(server: ServerProcess) -> Iterator[Any]:
    """One Chromium for the module, with one browsing context. A page that stays open (on
    the monitor, without a token) keeps the browser's helper processes and its renderer
    alive from before the first test to after the last."""
    sync_playwright = _playwright()
    before = set(leaks.descendants([os.getpid()]))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, timeout=20_000
            )
            try:
                context = browser.new_context()
                keeper = context.new_page()
                keeper.goto(page_url(server).partition("?")[0])
                keeper.locator("#auth").wait_for()
                yield context
            finally:
                browser.close()
    finally:
        wait_browser_gone(before)


class Monitor:
    """A test's pages and sessions: it opens monitor pages (each checked for page errors and
    CSP violations when the test ends) and spawns sessions under owners of its own, which
    are deleted (and their processes awaited) when the test ends."""

    _names = itertools.count()

    def __init__(self, context: Any, server: ServerProcess, shots: Path | None) -> None:
        self.context = context
        self.server = server
        self.url = page_url(server)
        self.pages: list[Any] = []
        self.errors: list[str] = []
        self.owners: set[str] = set()
        self.shots = shots
        self.before = set(leaks.descendants([os.getpid()]))

    def owner(self, stem: str) -> str:
        name = f"{stem}-{next(self._names)}"
        self.owners.add(name)
        return name

    def open(
        self, width: int, query: str = "", *, listen: bool = True, url: str | None = None
    ) -> Any:
        page = self.context.new_page()
        page.set_viewport_size({"width": width, "height": HEIGHT})
        page.set_default_timeout(STEP_TIMEOUT_MS)
        if listen:
            page.on(
                "console",
                lambda m: self.errors.append(m.text) if m.type == "error" else None,
            )
            page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.pages.append(page)
        page.goto((url or self.url) + query)
        return page

    def spawn(self, *specs: SpawnParams) -> list[SessionInfo]:
        """Spawn in this order (so the later is the newer), each under one of our owners."""
        assert all(spec.owner in self.owners for spec in specs)

        async def work(client: Any) -> list[SessionInfo]:
            return [await client.request(spec) for spec in specs]

        infos: list[SessionInfo] = _rpc(self.server, work)
        return infos

    def write(self, info: SessionInfo, data: str, pattern: str) -> None:
        async def work(client: Any) -> None:
            wait = Wait(pattern=pattern, timeout_ms=5000)
            await client.request(WriteParams(id=info.id, data=data, owner=info.owner, wait=wait))

        _rpc(self.server, work)

    def session(self, info: SessionInfo) -> SessionInfo:
        async def work(client: Any) -> SessionInfo:
            listed = await client.request(ListParams(owner=info.owner))
            [now] = [s for s in listed.sessions if s.id == info.id]
            return now  # type: ignore[no-any-return]

        result: SessionInfo = _rpc(self.server, work)
        return result

    def shot(self, page: Any, name: str, clip: dict[str, float] | None = None) -> None:
        """Save a docs screenshot (only with TRIO_PTY_UI_SCREENSHOTS)."""
        if self.shots is not None:
            page.screenshot(path=str(self.shots / name), clip=clip)

    def close(self) -> None:
        violations = []
        for page in self.pages:
            with suppress(Exception):
                violations += page.evaluate(f"{MONITOR}.status()")["violations"]
            page.close()

        async def work(client: Any) -> None:
            for owner in self.owners:
                await client.request(OwnerDeleteParams(owner=owner))

        _rpc(self.server, work)
        wait_no_server_processes(self.server)
        # Chromium may have started a helper for these pages, or not reaped one yet.
        wait_browser_gone(self.before)
        assert violations == [], violations
        assert self.errors == [], self.errors


@pytest.fixture
def monitor(context: Any, server: ServerProcess) -> Iterator[Monitor]:
    shots = Path(SHOTS) if SHOTS else None
    opened = Monitor(context, server, shots)
    try:
        yield opened
    finally:
        opened.close()


def poll(page: Any, expression: str, timeout: float = STEP_TIMEOUT_MS / 1000) -> None:
    """Wait until `expression` is true in the page. (Playwright's wait_for_function compiles
    its predicate with eval inside the page, which the page's CSP rightly refuses.)"""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression}")
        page.wait_for_timeout(25)


def status(page: Any) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(f"{MONITOR}.status()")
    return result


def connected(page: Any) -> None:
    poll(page, f"{MONITOR}.status().connected")


def rendered(page: Any, text: str, view: str = ".view.active") -> None:
    """`text` is on a terminal's screen as the browser drew it (DOM rows)."""
    page.locator(f"#terminals {view} .xterm-rows").get_by_text(text, exact=False).first.wait_for()


def box(page: Any, selector: str) -> dict[str, float]:
    result: dict[str, float] = page.locator(selector).first.bounding_box()
    return result


def sh(owner: str, script: str, description: str, **extra: Any) -> SpawnParams:
    return SpawnParams(
        command="sh", args=["-c", script], owner=owner, description=description, **extra
    )


# --------------------------------------------------------------------------------------------
# The scenario


def test_monitor_in_a_real_browser(monitor: Monitor, server: ServerProcess) -> None:
    started = time.monotonic()
    owner, other = monitor.owner("agent"), monitor.owner("agent")
    _, _, info = monitor.spawn(
        sh(other, "echo build ok; exit 0", "build", title="make"),
        sh(other, "echo 'error: tests failed' >&2; exit 2", "tests", title="pytest"),
        SpawnParams(
            command="python3",
            args=["-u", "-c", CHILD],
            owner=owner,
            description="a calculator",
            title="calc",
            ready=Wait(pattern="READY", timeout_ms=5000),
        ),
    )
    # Open the printed URL: the token leaves the address bar, the page connects.
    url = monitor.url
    assert "?token=" in url
    page = monitor.open(1200)
    page.set_viewport_size({"width": 1200, "height": 760})
    connected(page)
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
    rendered(page, "READY")
    page.locator(".view.active .term").click()
    page.keyboard.type("6*7")
    page.keyboard.press("Enter")
    rendered(page, "ANSWER 42")

    # Resize the window: the terminal refits, the session is resized, the child is told.
    first = status(page)
    page.set_viewport_size({"width": 900, "height": 560})
    poll(
        page,
        f"(s => s.rows !== {first['rows']} && s.cols !== {first['cols']})({MONITOR}.status())",
    )
    resized = status(page)
    expected = f"WINCH {resized['rows']}x{resized['cols']}"
    rendered(page, expected)

    # Drop the WebSocket; meanwhile the session produces output; the page comes back and
    # resumes exactly where it was.
    assert page.evaluate(f"{MONITOR}.drop(1500)")
    poll(page, f"!{MONITOR}.status().connected")
    monitor.write(info, "2+3\n", "ANSWER 5")
    poll(page, f"(s => s.connected && s.reconnects === 1)({MONITOR}.status())")
    rendered(page, "ANSWER 5")
    page.locator(".view.active .term").click()
    page.keyboard.type("1+1")
    page.keyboard.press("Enter")
    rendered(page, "ANSWER 2")
    screen: list[str] = page.evaluate(f"{MONITOR}.lines()")
    for line in ("READY", "ANSWER 42", expected, "ANSWER 5", "ANSWER 2"):
        assert screen.count(line) == 1, (line, screen)
    poll(page, f"{MONITOR}.status().nextOffset === {monitor.session(info).byte_count}")
    if monitor.shots is not None:
        page.set_viewport_size({"width": 1200, "height": 700})
        rendered(page, "ANSWER 2")
        page.wait_for_timeout(300)  # let the refit settle
        monitor.shot(page, "monitor.png")

    # Kill: the badge changes, the exit shows, the output stays readable.
    page.locator("#kill").click()
    row.locator(".badge.killed").wait_for()
    page.locator("#term-status.killed").wait_for()
    assert row.locator("td.exit").inner_text() == "SIGHUP"
    assert page.locator("#kill").is_disabled()
    rendered(page, "ANSWER 42")
    assert page.evaluate(f"{MONITOR}.lines()")[: len(screen)] == screen

    # ?owner= shows only those owners' sessions; the spawn form spawns as the first of them.
    filtered = monitor.open(1200, f"&owner={other}")
    connected(filtered)
    poll(filtered, f"{MONITOR}.status().sessions.length === 2")
    assert info.id not in status(filtered)["sessions"]
    filtered.locator("#spawn-toggle").click()
    form = filtered.locator("#spawn-form")
    form.locator("input[name=command]").fill("sh")
    form.locator("input[name=args]").fill("-c 'echo \"spawned from the page\"; sleep 30'")
    form.locator("input[name=description]").fill("from the browser")
    form.locator("button[type=submit]").click()
    poll(filtered, f"{MONITOR}.status().sessions.length === 3")
    rendered(filtered, "spawned from the page")
    assert form.is_hidden()
    spawned = status(filtered)["selected"]
    assert status(filtered)["sessions"][0] == spawned  # the newest comes first

    async def owner_of(client: Any) -> str:
        listed = await client.call("pty.list", {"owner": other})
        [session] = [s for s in listed["sessions"] if s["id"] == spawned]
        return str(session["owner"])

    assert _rpc(server, owner_of) == other
    # Kill and clean up from the page: the session is gone from the server and the list.
    filtered.locator("#cleanup").click()
    poll(filtered, f"{MONITOR}.status().sessions.length === 2")

    # A wrong token: the page asks for one (and the right one, typed in, connects). No
    # console listener: the refused socket logs an error.
    wrong = monitor.open(1200, listen=False)
    wrong.goto(url.replace(server.token, "wrong"))
    wrong.locator("#auth").wait_for()
    assert "token is wrong" in wrong.locator("#auth-message").inner_text()
    assert "token" not in wrong.url
    wrong.locator("#auth-form input[name=token]").fill(server.token)
    wrong.locator("#auth-form button").click()
    connected(wrong)
    assert wrong.locator("#auth").is_hidden()
    elapsed = time.monotonic() - started
    assert elapsed < TEST_BUDGET, elapsed
    print(f"browser scenario: {elapsed:.1f} s")


# --------------------------------------------------------------------------------------------
# The session list: the form, the sticky header, the order, the filter, the terminal title

# Which form controls are not fully inside the list's scroll box, or covered by something
# else at their centre.
FORM_HIDDEN = """(() => {
  const box = document.getElementById('list-scroll').getBoundingClientRect();
  const hidden = [];
  for (const el of document.querySelectorAll('#spawn-form input, #spawn-form button')) {
    if (!el.getClientRects().length) continue; // not offered (hidden)
    const r = el.getBoundingClientRect();
    const inside = r.top >= box.top && r.bottom <= box.bottom
      && r.left >= box.left && r.right <= box.right;
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    if (!inside || !(hit === el || el.contains(hit))) hidden.push(el.name || el.textContent);
  }
  return hidden;
})()"""

# The rows fully inside the scroll box, and which of them something else covers.
ROWS_SEEN = """(() => {
  const box = document.getElementById('list-scroll').getBoundingClientRect();
  const head = document.querySelector('#sessions thead').getBoundingClientRect();
  const seen = [], covered = [];
  for (const row of document.querySelectorAll('#sessions tbody tr')) {
    const r = row.getBoundingClientRect();
    if (r.top < head.bottom || r.bottom > box.bottom) continue;
    seen.push(row.dataset.id);
    const cell = row.cells[0].getBoundingClientRect();
    const hit = document.elementFromPoint(cell.left + 4, r.top + r.height / 2);
    if (!hit || hit.closest('tr') !== row) covered.push(row.dataset.id);
  }
  return {seen, covered};
})()"""

# What is drawn at points spread over the table's (sticky) header cells: all of it header.
HEADER_HITS = """(() => {
  const cells = [...document.querySelectorAll('#sessions thead th')]
    .map((th) => th.getBoundingClientRect());
  const box = document.getElementById('list-scroll').getBoundingClientRect();
  const top = cells[0].top, bottom = cells[0].bottom;
  const right = Math.min(cells[cells.length - 1].right, box.right) - 2;
  const hits = [];
  for (const y of [top + 1, (top + bottom) / 2, bottom - 1.5]) {
    for (let x = cells[0].left + 2; x < right; x += 37) {
      const hit = document.elementFromPoint(x, y);
      hits.push(hit ? (hit.closest('thead') ? 'thead' : hit.tagName + '.' + hit.className) : null);
    }
  }
  return hits;
})()"""


# How much of the best of a PNG's last two pixel rows has the header's border colour (where
# the 1 px border lands depends on rounding). The PNG is decoded in the page:
# createImageBitmap loads no URL, so the CSP allows it.
BORDER_SHARE = """async (png) => {
  const bytes = Uint8Array.from(atob(png), (c) => c.charCodeAt(0));
  const bitmap = await createImageBitmap(new Blob([bytes], { type: 'image/png' }));
  const canvas = document.createElement('canvas');
  canvas.width = bitmap.width;
  canvas.height = bitmap.height;
  const g = canvas.getContext('2d');
  g.drawImage(bitmap, 0, 0);
  const th = document.querySelector('#sessions th');
  const border = getComputedStyle(th).borderBottomColor.match(/\\d+/g).map(Number);
  let best = 0;
  for (const y of [bitmap.height - 2, bitmap.height - 1]) {
    const row = g.getImageData(0, y, bitmap.width, 1).data;
    let same = 0;
    for (let i = 0; i < row.length; i += 4) {
      if (border.every((v, k) => Math.abs(row[i + k] - v) <= 2)) same++;
    }
    best = Math.max(best, same / bitmap.width);
  }
  return best;
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_list_form_header_order_filter_and_titles(monitor: Monitor, width: int) -> None:
    owners = [monitor.owner("list") for _ in range(3)]
    specs = []
    for n in range(12):
        owner = owners[n % 3]
        if n == 4:
            specs.append(sh(owner, "echo failing; exit 3", f"job {n}"))
        elif n == 7:
            # The program sets its window title (OSC 2; a non-ASCII one).
            specs.append(sh(owner, r"printf '\033]2;vim — notes.txt\007'; echo titled", f"job {n}"))
        else:
            specs.append(sh(owner, f"echo job {n}", f"job {n}", title=f"t{n}"))
    infos = monitor.spawn(*specs)
    page = monitor.open(width, f"&owner={','.join(owners)}")
    connected(page)
    poll(page, f"{MONITOR}.status().sessions.length === 12")

    # Newest first by default.
    newest_first = [info.id for info in reversed(infos)]
    assert status(page)["sessions"] == newest_first
    assert page.locator("th[data-key=age]").get_attribute("aria-sort") == "ascending"

    # The terminal title (OSC 2) is in the list.
    titled = page.locator(f"#sessions tbody tr[data-id='{infos[7].id}'] td.term")
    poll(
        page, f"document.querySelector(\"tr[data-id='{infos[7].id}'] td.term\").textContent !== ''"
    )
    assert titled.inner_text() == "vim — notes.txt"

    # The form: open, each control fully visible and uncovered, over no row.
    page.mouse.move(5, 5)
    page.locator("#spawn-toggle").click()
    assert page.locator("#spawn-toggle").get_attribute("aria-expanded") == "true"
    # A shell session is offered when the server has them (pty.spawn_shell, pty.commands).
    offered = page.locator("#spawn-form input[name=shell]").is_visible()
    assert offered == has_shell_sessions(monitor.server)
    assert page.evaluate(FORM_HIDDEN) == []
    rows = page.evaluate(ROWS_SEEN)
    assert len(rows["seen"]) >= 1 and rows["covered"] == [], rows
    form_bottom = box(page, "#spawn-form")["y"] + box(page, "#spawn-form")["height"]
    assert form_bottom <= box(page, "#sessions thead")["y"]
    monitor.shot(page, f"monitor-form-{width}.png", _clip_pane(page))
    page.locator("#spawn-cancel").click()
    assert page.locator("#spawn-form").is_hidden()

    # The sticky header: the rows scroll under it and nothing of them shows through: the
    # header, its bottom border included, looks the same, pixel for pixel, at any scroll
    # position.
    page.evaluate("document.getElementById('list-scroll').scrollTop = 0")
    head = _clip_header(page)
    before = page.screenshot(clip=head)
    row_height = box(page, "#sessions tbody tr")["height"]
    for offset in (0, row_height * 0.5, row_height * 1.5, row_height * 2.3):
        page.evaluate(f"document.getElementById('list-scroll').scrollTop = {offset}")
        poll(page, f"document.getElementById('list-scroll').scrollTop > {offset - 1}")
        shot = page.screenshot(clip=head)
        assert shot == before, f"rows show through the header at {offset}"
        border = page.evaluate(BORDER_SHARE, base64.b64encode(shot).decode())
        assert border > 0.95, f"the header lost its border at {offset} ({border:.0%} of it)"
        hits = page.evaluate(HEADER_HITS)
        assert hits and set(hits) == {"thead"}, hits
    if width == WIDTHS[-1]:
        monitor.shot(page, f"monitor-sticky-{width}.png", _clip_pane(page))
    page.evaluate("document.getElementById('list-scroll').scrollTop = 0")

    # Sorting: the age header turns it to oldest first, and back.
    page.locator("th[data-key=age] button").click()
    assert status(page)["sessions"] == newest_first[::-1]
    assert page.locator("th[data-key=age]").get_attribute("aria-sort") == "descending"
    page.locator("th[data-key=age] button").click()
    assert status(page)["sessions"] == newest_first
    page.evaluate("document.getElementById('list-scroll').scrollLeft = 0")  # the click's focus

    # The filter box: owner, status and words, combined.
    search = page.locator("#filter")
    search.fill(f"owner:{owners[1]}")
    assert status(page)["sessions"] == [i.id for i in reversed(infos) if i.owner == owners[1]]
    assert page.locator("#count").inner_text().startswith("4 of 12 shown")
    monitor.shot(page, f"monitor-filter-{width}.png", _clip_pane(page))
    search.fill("status:failed")
    poll(page, f"{MONITOR}.status().sessions.length === 1")
    assert status(page)["sessions"] == [infos[4].id]
    search.fill("NOTES.TXT")  # words match the terminal title too, in any case
    assert status(page)["sessions"] == [infos[7].id]
    search.fill(f"owner:{owners[0]} owner:{owners[2]} job")
    expected = [i.id for i in reversed(infos) if i.owner != owners[1]]
    assert status(page)["sessions"] == expected
    search.fill("no-such-session")
    assert status(page)["sessions"] == []
    assert page.locator("#empty").inner_text() == "No session matches the filter."
    search.fill("")
    assert status(page)["sessions"] == newest_first


def _clip_header(page: Any) -> dict[str, float]:
    """The header's box in whole pixels, down to where its 1 px bottom border is drawn."""
    head = box(page, "#sessions thead")
    scroller = box(page, "#list-scroll")
    right = min(head["x"] + head["width"], scroller["x"] + scroller["width"])
    top, bottom = math.floor(head["y"]), round(head["y"] + head["height"])
    return {"x": head["x"], "y": top, "width": right - head["x"], "height": bottom - top}


def _clip_pane(page: Any) -> dict[str, float]:
    pane = box(page, "#sessions-pane")
    return {"x": 0, "y": 0, "width": pane["width"], "height": pane["y"] + pane["height"]}


# --------------------------------------------------------------------------------------------
# Terminals: the split, CJK and emoji, search, tabs and the grid

# The left edge of each character of the first rendered row that contains `text`, in
# cells from the row's start (the row is exactly `cols` cells wide).
CELLS = """([text, cols]) => {
  const view = document.querySelector('#terminals .view.active');
  const row = [...view.querySelectorAll('.xterm-rows > div')]
    .find((r) => r.textContent.includes(text));
  if (!row) return null;
  const rowBox = row.getBoundingClientRect();
  const cell = rowBox.width / cols;
  const lefts = [];
  const walker = document.createTreeWalker(row, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.data.length; ) {
      const size = node.data.codePointAt(i) > 0xffff ? 2 : 1;
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + size);
      lefts.push((range.getBoundingClientRect().left - rowBox.left) / cell);
      i += size;
    }
  }
  return lefts;
}"""

# How a character is drawn: with the terminal's font stack, with Noto's CJK font alone, and
# a character no font has (the "tofu" box); and whether a glyph has colour (an emoji's).
GLYPHS = """([chars]) => {
  const row = document.querySelector('#terminals .view.active .xterm-rows');
  const stack = getComputedStyle(row).fontFamily;
  const canvas = document.createElement('canvas');
  canvas.width = 48;
  canvas.height = 48;
  const g = canvas.getContext('2d', { willReadFrequently: true });
  const draw = (ch, font) => {
    g.clearRect(0, 0, 48, 48);
    g.font = `32px ${font}`;
    g.textBaseline = 'alphabetic'; // the same line for every font (not so 'top')
    g.fillStyle = '#fff';
    g.fillText(ch, 4, 36);
    return g.getImageData(0, 0, 48, 48).data;
  };
  const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
  const colourful = (data) => {
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      const [red, green, blue, alpha] = data.slice(i, i + 4);
      if (alpha > 128 && Math.max(red, green, blue) - Math.min(red, green, blue) > 80) n++;
    }
    return n;
  };
  const tofu = draw('\\u{10FFFD}', stack);
  const result = { stack };
  for (const ch of chars) {
    const mine = draw(ch, stack);
    result[ch] = {
      box: same(mine, tofu),
      blank: mine.every((v, i) => i % 4 !== 3 || v === 0),
      noto_cjk: same(mine, draw(ch, '"Noto Sans Mono CJK SC"')),
      coloured_pixels: colourful(mine),
    };
  }
  return result;
}"""

SPLIT_DRAG = 120  # px


@pytest.mark.parametrize("width", WIDTHS)
def test_terminals_split_cjk_search_tabs_and_grid(monitor: Monitor, width: int) -> None:
    owner = monitor.owner("term")
    # A prints a marker, 400 numbered rows (the marker is far up in the scrollback), a CJK
    # line and an emoji line, then echoes what it is sent; B echoes what it is sent.
    script = (
        "echo MARKER-42; seq -f 'row %g' 1 400; echo 'ab中文字符cd'; echo 'xy😀🎉zw';"
        " echo '日本語 한국어 🚀✅ ok'; echo DONE; exec cat"
    )
    ready = Wait(pattern="DONE", timeout_ms=5000)
    a, b = monitor.spawn(
        sh(owner, script, "cjk, emoji and scrollback", title="output", ready=ready),
        sh(owner, "echo B-READY; exec cat", "an echo", title="echo"),
    )
    page = monitor.open(width, f"&owner={owner}")
    connected(page)
    page.locator(f"#sessions tbody tr[data-id='{a.id}']").click()
    rendered(page, "DONE")
    poll(page, f"{MONITOR}.status().nextOffset === {monitor.session(a).byte_count}")

    # The split: drag the bar down, the list grows by as much and the terminal refits (the
    # session is resized to it); arrow keys move it; a double click puts it back.
    pane = box(page, "#sessions-pane")["height"]
    rows = status(page)["rows"]
    bar = box(page, "#splitter")
    x, y = bar["x"] + bar["width"] / 2, bar["y"] + bar["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x, y + SPLIT_DRAG / 2)
    page.mouse.move(x, y + SPLIT_DRAG)
    page.mouse.up()
    assert abs(box(page, "#sessions-pane")["height"] - (pane + SPLIT_DRAG)) <= 2
    poll(page, f"{MONITOR}.status().rows < {rows}")
    smaller = status(page)
    assert smaller["rows"] <= rows - SPLIT_DRAG // 20  # a row is under 20 px high
    deadline = time.monotonic() + 5
    while (monitor.session(a).rows, monitor.session(a).cols) != (smaller["rows"], smaller["cols"]):
        assert time.monotonic() < deadline, "the session was not resized to the terminal"
        time.sleep(0.05)
    term = box(page, ".view.active .term")
    assert term["y"] + term["height"] <= HEIGHT
    if width == WIDTHS[-1]:
        monitor.shot(page, f"monitor-split-{width}.png")
    page.locator("#splitter").focus()
    page.keyboard.press("ArrowUp")
    assert box(page, "#sessions-pane")["height"] < pane + SPLIT_DRAG - 10
    page.locator("#splitter").dblclick()
    assert abs(box(page, "#sessions-pane")["height"] - pane) <= 2
    rendered(page, "DONE")

    # CJK and emoji: each takes two cells where the browser draws it, and is drawn with
    # a real glyph (Noto Sans Mono CJK, Noto Color Emoji), not a box.
    cols = status(page)["cols"]
    cjk = page.evaluate(CELLS, ["ab中文字符cd", cols])
    assert cjk is not None
    assert [round(left, 1) for left in cjk] == [0, 1, 2, 4, 6, 8, 10, 11], cjk
    emoji = page.evaluate(CELLS, ["xy", cols])
    assert [round(left, 1) for left in emoji] == [0, 1, 2, 4, 6, 7], emoji
    glyphs = page.evaluate(GLYPHS, [["中", "字", "😀"]])
    assert "Noto Sans Mono CJK SC" in glyphs["stack"] and "Noto Color Emoji" in glyphs["stack"]
    for ch in ("中", "字"):
        assert glyphs[ch]["noto_cjk"] and not glyphs[ch]["box"] and not glyphs[ch]["blank"], glyphs
    assert not glyphs["😀"]["box"] and glyphs["😀"]["coloured_pixels"] > 50, glyphs
    if width == WIDTHS[0]:
        monitor.shot(page, f"monitor-cjk-{width}.png", _clip_rows(page, "ab中文字符cd", "DONE"))

    # Search the scrollback: the marker far up is found, scrolled to and counted.
    query = page.locator("#search input[name=query]")
    assert "MARKER-42" not in page.locator(".view.active .xterm-rows").inner_text()
    query.fill("MARKER-42")
    rendered(page, "MARKER-42")
    assert page.locator("#search-count").inner_text() == "1/1"
    query.fill("row 1")  # row 1, 10-19, 100-199: 111 matches
    poll(page, "document.getElementById('search-count').textContent.endsWith('/111')")
    first = page.locator("#search-count").inner_text()
    page.locator("#search-next").click()
    poll(page, f"document.getElementById('search-count').textContent !== '{first}'")
    page.locator("#search-prev").click()
    poll(page, f"document.getElementById('search-count').textContent === '{first}'")
    query.fill("no such text")
    poll(page, "document.getElementById('search-count').textContent === 'no match'")
    query.fill("row 399")
    rendered(page, "row 399")
    if width == WIDTHS[0]:
        monitor.shot(page, f"monitor-search-{width}.png", _clip_terminals(page))
    query.press("Escape")
    assert page.locator("#search-count").inner_text() == ""
    focused = "document.activeElement === document.querySelector('#search input[name=query]')"
    assert not page.evaluate(focused)  # back in the terminal
    page.keyboard.press("Control+Shift+F")
    assert page.evaluate(focused)

    # Tabs: B opens beside A; typing goes to the visible one only.
    page.locator(f"#sessions tbody tr[data-id='{b.id}']").click()
    rendered(page, "B-READY")
    assert status(page)["open"] == [a.id, b.id] and status(page)["selected"] == b.id
    assert page.locator("#tabs .tab").count() == 2
    assert page.locator(f".view[data-id='{a.id}']").is_hidden()
    page.keyboard.type("hello b")
    page.keyboard.press("Enter")
    poll(page, f"{MONITOR}.lines('{b.id}').filter((l) => l === 'hello b').length === 2")
    assert "hello b" not in page.evaluate(f"{MONITOR}.lines('{a.id}')")

    # The grid: both at once, side by side (or one above the other when narrow), both live.
    page.locator("#layout").click()
    assert status(page)["layout"] == "grid"
    boxes = [box(page, f".view[data-id='{i.id}'] .term") for i in (a, b)]
    for one in boxes:
        assert one["width"] > 100 and one["height"] > 100, boxes
    first_box, second_box = boxes
    apart = (
        first_box["x"] + first_box["width"] <= second_box["x"]
        or first_box["y"] + first_box["height"] <= second_box["y"]
    )
    assert apart, boxes
    if width == WIDTHS[0]:
        assert first_box["y"] == second_box["y"]  # side by side
    monitor.write(a, "to a\n", "to a")
    rendered(page, "to a", f".view[data-id='{a.id}']")
    monitor.write(b, "to b\n", "to b")
    rendered(page, "to b", f".view[data-id='{b.id}']")
    monitor.shot(page, f"monitor-grid-{width}.png", _clip_terminals(page))
    # Closing a terminal detaches it; the other stays.
    page.locator(f"#tabs .tab[data-id='{b.id}'] .close").click()
    assert status(page)["open"] == [a.id] and status(page)["selected"] == a.id


def _clip_terminals(page: Any) -> dict[str, float]:
    pane = box(page, "#terminal-pane")
    return {"x": 0, "y": pane["y"], "width": pane["width"], "height": pane["height"]}


def _clip_rows(page: Any, first: str, end: str) -> dict[str, float]:
    """The terminal's rows from the one showing `first` to the one before `end`."""
    rows = page.locator(".view.active .xterm-rows > div")
    top = rows.filter(has_text=first).first.bounding_box()
    bottom = rows.filter(has_text=end).first.bounding_box()
    return {
        "x": top["x"] - 8,
        "y": top["y"] - 6,
        "width": 300,
        "height": bottom["y"] - top["y"] + 12,
    }


# --------------------------------------------------------------------------------------------
# A shell session: each command with its exit code beside the terminal (pty.commands)


def has_shell_sessions(server: ServerProcess) -> bool:
    """Whether the server has pty.spawn_shell and pty.commands (an unknown method is -32601;
    an unknown session, any other error)."""

    async def work(client: Any) -> bool:
        try:
            await client.call("pty.commands", {"id": "pty_00000000"})
        except RpcError as exc:
            return exc.code != -32601
        return True

    result: bool = _rpc(server, work)
    return result


@pytest.mark.parametrize("width", WIDTHS)
def test_shell_session_lists_each_command_with_its_exit_code(monitor: Monitor, width: int) -> None:
    assert has_shell_sessions(monitor.server), "the server has no shell sessions over RPC"
    owner = monitor.owner("shell")
    page = monitor.open(width, f"&owner={owner}")
    connected(page)
    # Spawn a shell from the page (pty.spawn_shell): it opens with its command list.
    page.locator("#spawn-toggle").click()
    form = page.locator("#spawn-form")
    form.locator("input[name=shell]").check()
    assert form.locator("input[name=args]").is_disabled()
    form.locator("input[name=command]").fill("bash")
    form.locator("input[name=description]").fill("a shell from the page")
    form.locator("button[type=submit]").click()
    poll(page, f"{MONITOR}.status().open.length === 1")
    [shell] = status(page)["open"]
    panel = page.locator(f".view[data-id='{shell}'] .commands")
    panel.wait_for()
    page.locator(".view.active .term").click()
    for line in ("true", "false", "sh -c 'exit 7'", "echo done"):
        page.keyboard.type(line)
        page.keyboard.press("Enter")
    codes = f"[...document.querySelectorAll(\".view[data-id='{shell}'] .command\")]"
    poll(page, f"{codes}.map((c) => c.querySelector('.code').textContent).join() === '0,1,7,0'")
    texts = page.evaluate(f"{codes}.map((c) => c.querySelector('.text').textContent)")
    assert texts == ["true", "false", "sh -c 'exit 7'", "echo done"]
    classes = page.evaluate(f"{codes}.map((c) => c.className)")
    assert classes == [
        "command exited ok",
        "command exited failed",
        "command exited failed",
        "command exited ok",
    ]
    assert panel.locator(".commands-head").inner_text().split() == ["Commands", "4,", "2", "failed"]

    # The page shows what the server records.
    async def recorded(client: Any) -> list[tuple[str, int | None]]:
        listed = await client.call("pty.commands", {"id": shell, "owner": owner})
        return [(c["command"], c["exit_code"]) for c in listed["commands"]]

    assert _rpc(monitor.server, recorded) == [
        ("true", 0),
        ("false", 1),
        ("sh -c 'exit 7'", 7),
        ("echo done", 0),
    ]
    # The list is on screen beside (or, narrow, below) the terminal, every item in it.
    term, listing = box(page, ".view.active .term"), box(page, ".view.active .commands")
    if width == WIDTHS[0]:
        assert listing["x"] >= term["x"] + term["width"]
    else:
        assert listing["y"] >= term["y"] + term["height"]
    assert listing["y"] + listing["height"] <= HEIGHT
    # A command still running says so, then gets its code (130: Ctrl-C).
    page.keyboard.type("sleep 30")
    page.keyboard.press("Enter")
    poll(page, f"{codes}.length === 5 && {codes}[4].classList.contains('running')")
    assert page.evaluate(f"{codes}[4].querySelector('.took').textContent") == "running"
    monitor.shot(page, f"monitor-commands-{width}.png", _clip_terminals(page))
    page.keyboard.press("Control+c")
    poll(page, f"{codes}[4].querySelector('.code').textContent === '130'")


# --------------------------------------------------------------------------------------------
# A read-only token


def test_a_read_only_token_watches_a_live_session(monitor: Monitor) -> None:
    """A read-only token may attach only without `driver`: the page watches a running
    session (its output so far, then live), sends no keys and no sizes, and offers no kill
    or spawn. Before, it attached as a driver, was refused, and showed nothing."""
    owner = monitor.owner("watched")
    script = 'echo WATCH-ME; while read line; do echo "GOT $line"; done'
    # Larger than the view's box: shown at its own size (clipped), never resized to the box.
    watched = sh(owner, script, "watched", ready=Wait(pattern="WATCH-ME"), rows=40, cols=150)
    (info,) = monitor.spawn(watched)
    page = monitor.open(1200, "?token=" + WATCHER_TOKEN, url=monitor.url.partition("?")[0])
    connected(page)
    poll(page, f"{MONITOR}.status().readOnly")
    page.locator(f"#sessions tbody tr[data-id='{info.id}']").click()
    rendered(page, "WATCH-ME")
    monitor.write(info, "from elsewhere\n", "GOT from elsewhere")
    rendered(page, "GOT from elsewhere")
    # Keys typed into the view and a new size reach nothing.
    before = monitor.session(info)
    page.locator(".view.active .term").click()
    page.keyboard.type("typed")
    page.keyboard.press("Enter")
    assert (status(page)["rows"], status(page)["cols"]) == (40, 150)
    assert page.locator("#term-size").inner_text() == "150\u00d740 (clipped)"  # marked
    page.set_viewport_size({"width": 700, "height": 560})
    page.wait_for_timeout(300)  # a refit, were there one, would have happened
    assert (status(page)["rows"], status(page)["cols"]) == (40, 150)
    after = monitor.session(info)
    assert (after.byte_count, after.rows, after.cols) == (
        before.byte_count,
        before.rows,
        before.cols,
    )
    assert "GOT typed" not in page.evaluate(f"{MONITOR}.lines()")
    assert page.locator("#kill").is_disabled() and page.locator("#cleanup").is_disabled()
    assert page.locator("#spawn-toggle").is_hidden()
    assert "read-only" in page.locator("#term-note").inner_text()


def test_the_selected_session_downloads_as_an_asciicast(monitor: Monitor) -> None:
    """The "Download recording" button saves what `pty.record` gives (a read-only token may): an
    asciicast v3 file named after the session, whose output is the session's."""
    owner = monitor.owner("recorded")
    script = "echo RECORD-ME; read line"
    (info,) = monitor.spawn(sh(owner, script, "recorded", ready=Wait(pattern="RECORD-ME")))
    page = monitor.open(1200, "?token=" + WATCHER_TOKEN, url=monitor.url.partition("?")[0])
    connected(page)
    assert page.locator("#record").is_disabled()  # nothing selected
    page.locator(f"#sessions tbody tr[data-id='{info.id}']").click()
    rendered(page, "RECORD-ME")
    with page.expect_download() as caught:
        page.locator("#record").click()
    download = caught.value
    assert download.suggested_filename == f"{info.id}.cast"
    header, *lines = Path(download.path()).read_text().splitlines()
    assert json.loads(header)["version"] == 3
    events = [json.loads(line) for line in lines]
    assert "".join(data for _, code, data in events if code == "o") == "RECORD-ME\r\n"


def test_watching_in_the_grid_resizes_nothing(monitor: Monitor) -> None:
    """Opening sessions, in tabs or in the grid, and closing the page leaves every session
    the size it had: only a view the person typed into resizes its session."""
    owner = monitor.owner("grid")
    sizes = [(24, 80), (40, 150), (10, 40)]
    infos = monitor.spawn(
        *(
            sh(owner, f"echo GRID-{n}; exec cat", f"grid {n}", rows=rows, cols=cols)
            for n, (rows, cols) in enumerate(sizes)
        )
    )
    page = monitor.open(1200, f"&owner={owner}")
    connected(page)
    for n, info in enumerate(infos):
        page.locator(f"#sessions tbody tr[data-id='{info.id}']").click()
        rendered(page, f"GRID-{n}")
        assert (status(page)["rows"], status(page)["cols"]) == sizes[n]  # the session's
    page.locator("#layout").click()
    assert status(page)["layout"] == "grid"
    for n, info in enumerate(infos):
        rendered(page, f"GRID-{n}", f".view[data-id='{info.id}']")
    page.set_viewport_size({"width": 500, "height": 400})  # a phone's
    page.wait_for_timeout(300)
    page.close()
    assert [(monitor.session(i).rows, monitor.session(i).cols) for i in infos] == sizes

    # Typing into the focused view of the tabs layout makes it the driver: it resizes.
    page = monitor.open(1200, f"&owner={owner}")
    connected(page)
    page.locator(f"#sessions tbody tr[data-id='{infos[0].id}']").click()
    rendered(page, "GRID-0")
    page.locator(".view.active .term").click()
    page.keyboard.type("typed")
    page.keyboard.press("Enter")
    poll(page, f"{MONITOR}.status().cols !== 80")
    view = status(page)
    deadline = time.monotonic() + 5
    while (monitor.session(infos[0]).rows, monitor.session(infos[0]).cols) != (
        view["rows"],
        view["cols"],
    ):
        assert time.monotonic() < deadline, "the driven session was not resized"
        time.sleep(0.05)
    page.close()


# --------------------------------------------------------------------------------------------
# Glyphs


def _lit_pixels(png: bytes) -> int:
    """How many pixels of a screenshot are lit (the terminal's background is black, its
    text light grey)."""
    with Image.open(io.BytesIO(png)) as image:
        return sum(image.convert("L").histogram()[97:])


@pytest.mark.parametrize("scale", [1, 2])
def test_underscores_and_descenders_are_drawn(monitor: Monitor, scale: int) -> None:
    """`trio_pty` reads `trio_pty`, not `trio pty`: the underscore's cell has lit pixels, at
    1x and 2x pixel density. At 14 px with xterm.js's default line height the row was 16 px
    and the underscore, drawn below the descenders, was clipped away at 1x (issue 29)."""
    owner = monitor.owner("glyphs")
    ready = Wait(pattern="GLYPHS", timeout_ms=5000)
    (info,) = monitor.spawn(
        sh(owner, "echo trio_pty; echo GLYPHS; exec cat", "glyphs", ready=ready)
    )
    context = monitor.context.browser.new_context(device_scale_factor=scale)
    try:
        page = context.new_page()
        page.set_viewport_size({"width": 900, "height": 600})
        page.set_default_timeout(STEP_TIMEOUT_MS)
        page.goto(monitor.url + f"&owner={owner}")
        connected(page)
        page.locator(f"#sessions tbody tr[data-id='{info.id}']").click()
        rendered(page, "GLYPHS")
        row = page.locator(".view.active .xterm-rows > div").first
        assert row.inner_text().startswith("trio_pty")
        cols = status(page)["cols"]
        bounds = row.bounding_box()
        cell = bounds["width"] / cols

        def shot(column: int) -> bytes:
            clip = {
                "x": bounds["x"] + column * cell,
                "y": bounds["y"],
                "width": cell,
                "height": bounds["height"],
            }
            png: bytes = page.screenshot(clip=clip)
            return png

        assert _lit_pixels(shot(4)) >= 3 * scale, "the underscore of trio_pty is not drawn"
        assert _lit_pixels(shot(8)) == 0  # a blank cell: the measure sees no stray pixels
        assert _lit_pixels(shot(6)) > 0  # the y of trio_pty: a descender
    finally:
        context.close()
