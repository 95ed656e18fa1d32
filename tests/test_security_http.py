"""Issue 17, findings 5 and 6, at the HTTP front: slow request heads (slowloris), upgrade
requests held to the rules of every request, and the page's own origin only for addresses
this server really listens on. Issue 30, findings 1 and 3: slow heads from the clients' own
address, upgraded connections that never time out, one token taking every slot.

Slow peers come from their own loopback addresses (127.0.0.2 and up: Linux routes all of
127/8 to lo), so that the legitimate client, on 127.0.0.1, is another peer, as it would be on
a network; and from 127.0.0.1 itself, as a program in a session on the default loopback
deployment would.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import attrs
import h11
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from trio_pty import Limits
from trio_pty.client.client import connect
from trio_pty.rpc.handshake import Rejection, own_origins
from trio_pty.rpc.scope import TokenScope
from trio_pty.rpc.tokens import ScopedToken
from trio_pty.server.http import HttpFront, PendingHeads, Upgrade, peer_key
from trio_pty.server.liveness import FrameTracker
from trio_pty.ui import load_page
from trio_pty.wire import ServerInfoParams

from .rpc_support import (
    client_frame,
    open_ws,
    raw_connect,
    raw_status,
    rpc,
    serving,
    start_server,
)

TOKEN = "http-security-token"
TOKEN_ENV = {"TRIO_PTY_TOKEN": TOKEN}
BEARER = ("Authorization", f"Bearer {TOKEN}")
# The server's other bounds as in production; only the teardown is quick.
LIMITS = Limits(terminate_grace=0.2)


# --------------------------------------------------------------------------------------------
# Finding 5: slow heads


async def _legitimate_connects(url: str, times: int) -> list[float]:
    """Connect, authenticate and get an answer, `times` times; how long each took."""
    took = []
    for _ in range(times):
        started = trio.current_time()
        with trio.fail_after(5):
            async with connect(url, TOKEN) as client:
                await client.request(ServerInfoParams())
        took.append(trio.current_time() - started)
        await trio.sleep(0.1)
    return took


async def _pending(url: str) -> int:
    with trio.fail_after(5):
        async with connect(url, TOKEN) as client:
            info = await client.request(ServerInfoParams())
    return info.counts.pending_connections


@asynccontextmanager
async def _slow_peers(port: int, peers: list[str]) -> AsyncIterator[None]:
    """`tests/slow_peers.py` against `port` (`KIND:SOURCE:COUNT` each) for the block. They
    run niced: the tests judge the server's admission rule, and on a loaded 2-core machine
    an attacker process at the client's priority also delays every step of the client's
    connect in the scheduler (measured: 1.06 s against a 1 s bound with load average 15),
    which no admission rule can help."""
    process = await trio.lowlevel.open_process(
        ["nice", "-n", "5", sys.executable, "-m", "tests.slow_peers", str(port), *peers],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parent.parent,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        assert (await process.stdout.receive_some(64)).startswith(b"started")
        yield
    finally:
        await process.stdin.aclose()  # they stop at the end of their stdin
        with trio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.stdout.aclose()


async def _connects_under_pressure(
    tmp_path: Path, peers: list[str], *, enough: int, config: str = ""
) -> tuple[list[float], list[float], int]:
    """Against a real `trio-pty serve` with its default bounds (plus `config`): connect 15
    times unloaded (the baseline), then start the slow `peers` (`KIND:SOURCE:COUNT`, see
    tests/slow_peers.py), wait until `enough` heads are pending, and connect 15 times.
    The baseline's and the loaded connects' times, and the heads pending at the end."""
    server = start_server(
        tmp_path,
        "--no-ui",
        config=f"[limits]\nterminate_grace = 0.3\n{config}",
        env=TOKEN_ENV,
        token_in_output=False,
    )
    try:
        with trio.fail_after(60):
            baseline = await _legitimate_connects(server.url, 15)
            async with _slow_peers(server.port, peers):
                with trio.move_on_after(15):
                    while await _pending(server.url) < enough:  # noqa: ASYNC110
                        await trio.sleep(0.1)
                took = await _legitimate_connects(server.url, 15)
                pending = await _pending(server.url)
    finally:
        server.stop()
    print(
        f"unloaded connects took {min(baseline):.3f}..{max(baseline):.3f} s, loaded "
        f"{min(took):.3f}..{max(took):.3f} s, {pending} heads pending"
    )
    return baseline, took, pending


def _bound(baseline: list[float]) -> float:
    """How long a connect may take under attack: within max(1 s, 5x the slowest unloaded
    connect measured in the same test, of as many), so that the test measures the server's
    rule, not how loaded the machine is (a fixed 1 s failed on a shared machine)."""
    return max(1.0, 5 * max(baseline))


def _check_connects(took: list[float], baseline: list[float]) -> None:
    """Every connect but one within the bound, and that one within three times it: a
    lockout refuses them all (0 of 15 connected in 8 s before the fix); one connect the
    scheduler of a loaded machine holds back for a second is not one (seen: 1.04 s once
    among 0.07-0.18 s in a full run beside other work)."""
    bound = _bound(baseline)
    assert sorted(took)[-2] < bound and max(took) < 3 * bound, (bound, took)


@pytest.mark.parametrize(
    "sources",
    [
        pytest.param({f"127.0.0.{2 + i}": 4 for i in range(64)}, id="64-peers"),
        pytest.param({"127.0.0.2": 256}, id="one-peer"),
    ],
)
async def test_a_client_connects_promptly_while_256_slow_heads_are_held(
    sources: dict[str, int], tmp_path: Path
) -> None:
    """The red team's slowloris, four times over, on a real `trio-pty serve` with its
    default bounds (but a 1 s head deadline, so that the slow peers are cut off and come
    back in waves, all together, during the test): before the fix 64 trickling sockets held
    every slot (the pending heads shared `max_connections`) and every connect was refused
    with 503."""
    # The slow peers hold what they can: every pending slot from 64 peers, the per-peer
    # bound from one (less a few: each probe, like any new connection, may make room).
    held = min(sum(sources.values()), len(sources) * LIMITS.max_pending_per_peer)
    enough = held - max(1, held // 8)
    baseline, took, pending = await _connects_under_pressure(
        tmp_path,
        [f"trickle:{source}:{count}" for source, count in sources.items()],
        enough=enough,
        config="http_head_timeout = 1.0\n",
    )
    assert pending >= enough  # the pressure was on throughout
    _check_connects(took, baseline)


async def test_clients_connect_while_their_own_address_holds_328_slow_heads(
    tmp_path: Path,
) -> None:
    """Issue 30, finding 1: on the default loopback deployment every client is the peer
    127.0.0.1, so a program in any session holding `max_pending_per_peer` trickling heads
    from there had every client refused with 503 (0 of 15 connects). Here 128 trickling and
    200 silent sockets from 127.0.0.1 itself, reconnecting whenever dropped: each new
    connection from the peer makes room by dropping one of its slow heads instead."""
    attackers = ["trickle:127.0.0.1:128", "silent:127.0.0.1:200"]
    per_peer = LIMITS.max_pending_per_peer
    baseline, took, pending = await _connects_under_pressure(
        tmp_path, attackers, enough=per_peer - per_peer // 8
    )
    assert pending >= per_peer - per_peer // 8  # the peer held its whole share throughout
    _check_connects(took, baseline)


async def _silent_connection(port: int, source: str) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port, local_address=source)


async def _answer(stream: trio.SocketStream) -> bytes:
    answer = b""
    while chunk := await stream.receive_some(4096):
        answer += chunk
    return answer


async def test_a_peer_over_its_bound_drops_its_own_oldest_silent_head() -> None:
    """Past `max_pending_per_peer` the peer's own oldest slow head makes room for the new
    connection (it was refused with 503, which locked out every client sharing the
    peer's address), at once when it sent nothing; other peers are untouched."""
    limits = Limits(terminate_grace=0.2, max_pending_per_peer=2)
    with trio.fail_after(10):
        async with serving(limits, TOKEN) as server:
            other = await _silent_connection(server.port, "127.0.0.3")
            idle = [await _silent_connection(server.port, "127.0.0.2") for _ in range(2)]
            try:
                while server.front.pending < 3:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                assert await raw_status(server.port, headers=[BEARER]) == 101  # 127.0.0.1
                idle.append(await _silent_connection(server.port, "127.0.0.2"))
                assert await _answer(idle[0]) == b""  # dropped, without an answer
                while server.front.pending < 3:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                assert server.front.pending == 3  # idle[1], idle[2] and the other peer's
                with trio.move_on_after(0.2):
                    await other.receive_some(1)
                    pytest.fail("the other peer's connection was answered or dropped")
            finally:
                for stream in [other, *idle]:
                    await stream.aclose()


async def test_past_the_pending_bound_the_oldest_head_is_dropped() -> None:
    limits = Limits(terminate_grace=0.2, max_pending_connections=3)
    with trio.fail_after(10):
        async with serving(limits, TOKEN) as server:
            idle = []
            try:
                for number in range(3):
                    idle.append(await _silent_connection(server.port, f"127.0.0.{2 + number}"))
                    while server.front.pending <= number:  # noqa: ASYNC110
                        await trio.sleep(0.01)
                # Silent ones become droppable 0.5 s after they arrived (or once read).
                await trio.sleep(0.6)
                assert await raw_status(server.port, headers=[BEARER]) == 101
                # The first (oldest) was dropped for it, the others are still being read.
                assert await idle[0].receive_some(4096) == b""
                assert server.front.pending == 2
            finally:
                for stream in idle:
                    await stream.aclose()


async def test_pending_heads_bookkeeping() -> None:
    pending = PendingHeads(total=3, per_peer=2, droppable_after=0.5)
    a1, a2 = pending.enter("a", 0.0), pending.enter("a", 0.1)
    assert a1 is not None and a2 is not None
    assert pending.enter("a", 0.2) is None  # the peer's bound
    b1 = pending.enter("b", 0.2)
    assert b1 is not None and len(pending) == 3
    # Full, none read yet and all younger than 0.5 s (a burst): the new one is refused.
    assert pending.enter("c", 0.3) is None
    # Once read, b1 may make room although a1 and a2 are older (they are not read yet).
    pending.heard(b1)
    c1 = pending.enter("c", 0.3)
    assert c1 is not None and b1.cancel_called and not a1.cancel_called
    # 0.5 s after arriving, an unread one may make room too: the oldest first.
    d1 = pending.enter(None, 0.55)
    assert d1 is not None and a1.cancel_called and not a2.cancel_called
    assert pending.enter("a", 0.6) is not None  # a1 no longer counts for "a"
    assert a2.cancel_called and len(pending) == 3
    pending.leave(a1)  # idempotent
    assert len(pending) == 3


async def test_a_peer_at_its_bound_makes_room_from_its_own_heads_only() -> None:
    """The per-peer bound follows the total's rule, within the peer: its heads that sent
    bytes first, then its unread ones that sent nothing, then its unread ones once
    `droppable_after` old, oldest first each; another peer's heads are never dropped for
    it, however droppable."""
    pending = PendingHeads(total=10, per_peer=3, droppable_after=0.5)
    other = pending.enter("b", 0.0)
    assert other is not None
    pending.heard(other)
    a1, a2, a3 = pending.enter("a", 0.0), pending.enter("a", 0.1), pending.enter("a", 0.2)
    assert a1 is not None and a2 is not None and a3 is not None
    assert pending.enter("a", 0.3) is None  # a burst of the peer's own: nothing to drop
    pending.heard(a2)
    assert pending.enter("a", 0.3) is not None
    assert a2.cancel_called and not a1.cancel_called and not other.cancel_called
    assert pending.enter("a", 0.6) is not None  # a1 is 0.5 s old now
    assert a1.cancel_called and not a3.cancel_called and not other.cancel_called
    assert len(pending) == 4


async def test_a_head_that_sent_nothing_makes_room_before_an_unread_one_that_did() -> None:
    """A burst of silent connections, all younger than `droppable_after`, held every slot
    of their peer (a new one, a real client, was refused): those that sent nothing at all
    are droppable at once, those with bytes waiting unread are not."""
    pending = PendingHeads(total=10, per_peer=3, droppable_after=0.5)
    waiting = {"client": False, "s1": True, "s2": True}
    client = pending.enter("a", 0.0, lambda: waiting["client"])
    s1 = pending.enter("a", 0.1, lambda: waiting["s1"])
    s2 = pending.enter("a", 0.2, lambda: waiting["s2"])
    assert client is not None and s1 is not None and s2 is not None
    assert pending.enter("a", 0.3) is not None
    assert s1.cancel_called and not client.cancel_called and not s2.cancel_called
    waiting["s2"] = False  # its bytes came: no longer silent
    assert pending.enter("a", 0.3) is None
    assert not client.cancel_called and not s2.cancel_called


async def test_slow_heads_that_sent_bytes_are_dropped_before_an_unread_client() -> None:
    """A loaded server has not read a client yet, for longer than `droppable_after`, while
    slow heads that came after it have sent bytes: one of those makes room, not the
    client. (Under load, the oldest droppable connection went: a client connecting amid
    waves of slow heads was closed during its handshake.)"""
    pending = PendingHeads(total=3, per_peer=4, droppable_after=0.5)
    client = pending.enter("c", 0.0)
    slow_1, slow_2 = pending.enter("s", 0.1), pending.enter("s", 0.2)
    assert client is not None and slow_1 is not None and slow_2 is not None
    pending.heard(slow_1)
    pending.heard(slow_2)
    assert pending.enter("s", 0.7) is not None
    assert slow_1.cancel_called and not client.cancel_called and not slow_2.cancel_called


def test_peers_are_counted_by_address_and_ipv6_by_64() -> None:
    assert peer_key("10.0.0.1") == "10.0.0.1"
    assert peer_key("::ffff:10.0.0.1") == "10.0.0.1"
    assert peer_key("2001:db8:1:2:aaaa::1") == peer_key("2001:db8:1:2:ffff::9")
    assert peer_key("2001:db8:1:2::1") != peer_key("2001:db8:1:3::1")


class _NoEndpoint:
    def hosts(self, local_host: str | None) -> frozenset[str]:
        return frozenset({"h"})

    def admit(
        self, request: h11.Request, *, local_host: str | None, peer: str | None
    ) -> Rejection | Upgrade:
        return Rejection(401, "no")

    ready = True

    def scrape(self, request: h11.Request) -> Rejection | str:
        return "metrics 1\n"


async def _head_answer(
    front: HttpFront, pieces: list[tuple[float, bytes]]
) -> tuple[bytes, float, float]:
    """Send `pieces` (delay, bytes) to the front over a memory stream; its answer, when the
    first byte was sent and when the answer came (trio time)."""
    client, server = trio.testing.memory_stream_pair()
    answer = b""
    first_byte = 0.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(front.handle_stream, server)

        async def send() -> None:
            nonlocal first_byte
            for delay, data in pieces:
                await trio.sleep(delay)
                if data and not first_byte:
                    first_byte = trio.current_time()
                try:
                    await client.send_all(data)
                except trio.BrokenResourceError:
                    return

        nursery.start_soon(send)
        while chunk := await client.receive_some(4096):
            answer += chunk
        answered = trio.current_time()
        nursery.cancel_scope.cancel()
    await client.aclose()
    return answer, first_byte, answered


def _front(limits: Limits) -> HttpFront:
    return HttpFront(endpoint=_NoEndpoint(), limits=limits, site=None, rpc_path="/rpc")


async def test_the_head_deadline_counts_from_its_first_byte(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A connection may idle io_timeout before its first byte (a browser's preconnect);
    from that byte on the whole head has http_head_timeout, however often bytes come."""
    limits = Limits(io_timeout=5.0, http_head_timeout=2.0)
    head = b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n"
    # Idle 4 s, then the whole head at once: answered (404: no page here).
    answer, _, _ = await _head_answer(_front(limits), [(4.0, head)])
    assert answer.startswith(b"HTTP/1.1 404 ")
    # A byte every 0.5 s keeps arriving, yet the head is cut off 2 s after its first byte.
    trickle = [(0.5, bytes([byte])) for byte in head[:-2]]
    answer, first, answered = await _head_answer(_front(limits), [(1.0, b""), *trickle])
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert answered - first == pytest.approx(2.0, abs=0.01)
    # Nothing at all: io_timeout.
    answer, _, answered = await _head_answer(_front(limits), [(10.0, b"")])
    assert answer.startswith(b"HTTP/1.1 408 ")


@pytest.mark.parametrize("path", ["/healthz", "/metrics"])
async def test_the_operators_paths_are_under_the_same_head_bounds(
    autojump_clock: trio.testing.MockClock, path: str
) -> None:
    """/healthz and /metrics (issue 19) are read by the same front: answered once the head
    is in, cut off 2 s after its first byte when it trickles (the per-peer and total caps
    on pending heads apply before any path is known: tests/test_ops.py checks them live)."""
    limits = Limits(io_timeout=5.0, http_head_timeout=2.0)
    head = f"GET {path} HTTP/1.1\r\nHost: h\r\n\r\n".encode()
    answer, _, _ = await _head_answer(_front(limits), [(1.0, head)])
    assert answer.startswith(b"HTTP/1.1 200 ")
    trickle = [(0.5, bytes([byte])) for byte in head[:-2]]
    answer, first, answered = await _head_answer(_front(limits), [*trickle])
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert answered - first == pytest.approx(2.0, abs=0.01)


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


# --------------------------------------------------------------------------------------------
# Issue 30, finding 3: upgraded connections that never time out, one token taking every slot

QUICK_LIVENESS = Limits(
    terminate_grace=0.2, websocket_idle_timeout=1.5, websocket_message_timeout=1.0
)
VIEW_TOKEN = "http-security-view-token"
VIEWER = ScopedToken(VIEW_TOKEN, TokenScope(name="view", read_only=True))


async def _closed_within(raw_stream: trio.SocketStream, seconds: float) -> bool:
    """Whether the server closes the connection within `seconds` (reading what it sends)."""
    with trio.move_on_after(seconds):
        with suppress(trio.BrokenResourceError):
            while await raw_stream.receive_some(65536):
                pass
        return True
    return False


async def test_an_upgraded_connection_that_sends_nothing_is_closed() -> None:
    """A read-only token held a connection slot forever by sending nothing after the
    handshake (still open after 45 s): now it is closed after `websocket_idle_timeout`
    without a byte (the server's pings go unanswered)."""
    with trio.fail_after(20):
        async with serving(QUICK_LIVENESS, TOKEN, scoped_tokens=(VIEWER,)) as server:
            # Before the connect: the server's idle clock starts after its 101, which a
            # loaded machine may take a while to hand to us.
            started = trio.current_time()
            raw = await raw_connect(
                server.port, headers=[("Authorization", f"Bearer {VIEW_TOKEN}")]
            )
            async with raw.stream:
                assert raw.status == 101
                assert await _closed_within(raw.stream, 10)
                assert trio.current_time() - started >= QUICK_LIVENESS.websocket_idle_timeout
            while server.open_slots:  # noqa: ASYNC110
                await trio.sleep(0.01)


async def test_a_frame_trickled_a_byte_at_a_time_is_closed() -> None:
    """A frame sent a byte every 0.2 s (each byte resets any idle clock) is cut off
    `websocket_message_timeout` of waiting after its first byte; it held its slot forever."""
    with trio.fail_after(20):
        async with serving(QUICK_LIVENESS, TOKEN, scoped_tokens=(VIEWER,)) as server:
            raw = await raw_connect(
                server.port, headers=[("Authorization", f"Bearer {VIEW_TOKEN}")]
            )
            frame = client_frame(0x1, b'{"jsonrpc": "2.0", "id": 1, "method": "server.info"}')
            async with raw.stream:
                assert raw.status == 101
                started = trio.current_time()
                with suppress(trio.BrokenResourceError):
                    for byte in frame:
                        await raw.stream.send_all(bytes([byte]))
                        if await _closed_within(raw.stream, 0.2):
                            break
                took = trio.current_time() - started
                assert took < 5, "the trickled frame was never cut off"
                assert took >= 0.9
            while server.open_slots:  # noqa: ASYNC110
                await trio.sleep(0.01)


async def test_a_quiet_live_client_stays_connected_past_the_idle_timeout() -> None:
    """The bound is on clients that do not answer: a client that sends nothing for two and
    a half idle timeouts answers the server's pings by itself and keeps its connection. (A
    2 s idle timeout: a pong then has 1.3 s to come back, ample on a loaded machine.)"""
    limits = attrs.evolve(QUICK_LIVENESS, websocket_idle_timeout=2.0)
    with trio.fail_after(20):
        async with (
            serving(limits, TOKEN) as server,
            open_ws(server.url, headers=[(b"Authorization", f"Bearer {TOKEN}".encode())]) as ws,
        ):
            await trio.sleep(2.5 * limits.websocket_idle_timeout)
            answer = await rpc(ws, 1, "server.info")
            assert "result" in answer, answer


async def test_one_token_cannot_take_every_connection_slot() -> None:
    """A read-only token opened every one of `max_connections`, so no other client (the
    server's own token included) could connect: now a token holds at most
    `max_connections_per_token`."""
    limits = Limits(terminate_grace=0.2, max_connections=6, max_connections_per_token=4)
    viewer = [("Authorization", f"Bearer {VIEW_TOKEN}")]
    with trio.fail_after(20):
        async with serving(limits, TOKEN, scoped_tokens=(VIEWER,)) as server:
            held = [await raw_connect(server.port, headers=viewer) for _ in range(5)]
            try:
                assert [raw.status for raw in held] == [101] * 4 + [503]
                assert await raw_status(server.port, headers=[BEARER]) == 101
            finally:
                for raw in held:
                    await raw.stream.aclose()


def _frame(opcode: int, payload: bytes, fin: bool) -> bytes:
    return client_frame(opcode, payload, fin=fin)


_FRAMES = st.lists(
    st.one_of(
        # a whole data message, possibly fragmented, with control frames between pieces
        st.tuples(
            st.sampled_from([0x1, 0x2]),
            st.lists(st.binary(max_size=300), min_size=1, max_size=3),
            st.booleans(),
        ),
    ),
    max_size=5,
)


@given(
    messages=_FRAMES,
    head=st.binary(max_size=40),
    cuts=st.lists(st.integers(min_value=1, max_value=70_000), max_size=20),
)
def test_the_frame_tracker_is_busy_exactly_inside_messages(
    messages: list[tuple[int, list[bytes], bool]], head: bytes, cuts: list[int]
) -> None:
    """Fed a stream cut anywhere, the tracker is idle exactly at message boundaries (a ping
    between two fragments does not end the message; payloads up to 64 KiB use the 16-bit
    length, and the 64-bit one is exercised by 70,000-byte pieces below)."""
    stream = bytearray(head)
    boundaries = set(range(len(stream) + 1))  # the skipped head is no frame
    for opcode, pieces, ping_between in messages:
        for index, piece in enumerate(pieces):
            last = index == len(pieces) - 1
            stream += _frame(opcode if index == 0 else 0x0, piece, last)
            if ping_between and not last:
                stream += _frame(0x9, b"ping", True)
        boundaries.add(len(stream))
    tracker = FrameTracker(skip=len(head))
    points = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    for start, end in itertools.pairwise(points):
        tracker.feed(bytes(stream[start:end]))
        assert tracker.busy == (end not in boundaries), (start, end)


def test_the_frame_tracker_reads_64_bit_lengths() -> None:
    tracker = FrameTracker()
    frame = _frame(0x2, bytes(70_000), True)
    tracker.feed(frame[:-1])
    assert tracker.busy
    tracker.feed(frame[-1:])
    assert not tracker.busy


# --------------------------------------------------------------------------------------------
# Finding 6: upgrades held to the rules of every request


def _upgrade_head(target: str, port: int, *, version: str = "1.1", method: str = "GET") -> bytes:
    lines = [
        f"{method} {target} HTTP/{version}",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        f"Authorization: Bearer {TOKEN}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _status_of(port: int, head: bytes) -> int:
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(head)
        received = b""
        while b"\r\n" not in received:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            received += chunk
    return int(received.split(b" ", 2)[1]) if received else 0


async def test_an_upgrade_over_http_1_0_is_refused() -> None:
    """RFC 6455 needs HTTP/1.1; the server once switched an HTTP/1.0 client (101)."""
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN) as server:
            assert await _status_of(server.port, _upgrade_head("/rpc", server.port)) == 101
            head = _upgrade_head("/rpc", server.port, version="1.0")
            assert await _status_of(server.port, head) == 400
            assert server.open_slots == 0


async def test_an_absolute_form_target_is_refused_on_an_upgrade_as_on_a_plain_request() -> None:
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN, page=load_page().site) as server:
            absolute = f"http://127.0.0.1:{server.port}/rpc"
            plain = f"GET {absolute} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n"
            assert await _status_of(server.port, plain.encode()) == 400
            assert await _status_of(server.port, _upgrade_head(absolute, server.port)) == 400
            post = _upgrade_head("/rpc", server.port, method="POST")
            assert await _status_of(server.port, post) == 405
            assert server.open_slots == 0


# --------------------------------------------------------------------------------------------
# Finding 6: the page's own origin, for addresses actually bound


async def test_the_own_origin_exception_covers_only_bound_addresses() -> None:
    """Listening on 127.0.0.1 only, a page at http://[::1]:PORT (or http://localhost:PORT,
    which a browser tries on ::1 first) may be anyone's: another program can listen there.
    It was accepted as the page's own origin."""
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN, page=load_page().site, host="127.0.0.1") as server:
            port = server.port

            async def status(origin: str) -> int:
                return await raw_status(port, headers=[BEARER, ("Origin", origin)])

            assert await status(f"http://127.0.0.1:{port}") == 101
            assert await status(f"http://[::1]:{port}") == 403
            assert await status(f"http://localhost:{port}") == 403


def test_own_origins_are_those_of_addresses_held() -> None:
    def origins(*listening: str, local: str | None = None, bound: str = "127.0.0.1") -> set[str]:
        found = own_origins(
            listening=listening, local_host=local, port=8765, bound_host=bound, allowed=()
        )
        return set(found)

    assert origins("127.0.0.1") == {"http://127.0.0.1:8765"}
    assert origins("::1") == {"http://[::1]:8765"}
    both = {"http://127.0.0.1:8765", "http://[::1]:8765", "http://localhost:8765"}
    assert origins("127.0.0.1", "::1") == both
    # A wildcard holds its family's loopback, and the address a connection arrived on.
    assert origins("0.0.0.0", "::", local="10.1.2.3") == {
        "http://10.1.2.3:8765",
        "http://localhost:8765",
    }
    assert origins("0.0.0.0", local="127.0.0.1") == {"http://127.0.0.1:8765"}
    # A name the operator bound is theirs, as an allowed host is; "localhost" is not a name
    # of that kind (it is decided by the loopbacks held).
    assert "http://devbox.lan:8765" in origins("10.1.2.3", bound="devbox.lan")
    assert origins("127.0.0.1", bound="localhost") == {"http://127.0.0.1:8765"}
    with_allowed = own_origins(
        listening=["127.0.0.1"], local_host=None, port=80, bound_host="127.0.0.1", allowed=["Box"]
    )
    assert with_allowed == {
        "http://127.0.0.1:80",
        "http://127.0.0.1",
        "http://box",
        "http://box:80",
    }


# --------------------------------------------------------------------------------------------
# Issue 30, finding 6: the client's --token


async def _client_info(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    child_env = {k: v for k, v in os.environ.items() if k != "TRIO_PTY_TOKEN"} | env
    return await trio.run_process(
        [sys.executable, "-m", "trio_pty", "--url", url, *args, "info"],
        env=child_env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )


async def test_the_client_warns_that_a_token_in_argv_is_world_readable() -> None:
    """`trio-pty --token T ...` put the token in /proc/PID/cmdline, readable by every local
    user, without a word (serve warned about its own --token): now it says so on stderr,
    and TRIO_PTY_TOKEN, the way it points to, draws no warning."""
    with trio.fail_after(60):
        async with serving(LIMITS, TOKEN) as server:
            given = await _client_info(server.url, "--token", TOKEN)
            from_env = await _client_info(server.url, TRIO_PTY_TOKEN=TOKEN)
    assert given.returncode == 0, given.stderr
    warning = given.stderr.decode()
    assert "every local user" in warning and "TRIO_PTY_TOKEN" in warning
    assert TOKEN not in warning
    assert from_env.returncode == 0, from_env.stderr
    assert b"every local user" not in from_env.stderr
