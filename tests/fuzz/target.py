"""Running one batch against a server, and the guard: another client whose `cat` must keep
working whatever the fuzz does."""

from __future__ import annotations

import uuid
from collections import Counter
from contextlib import suppress
from typing import Any

import attrs
import trio
import trio.testing

from tests.fuzz.config import (
    FUZZ_OWNER,
    FUZZ_SESSION,
    FUZZ_SHELL,
    GUARD_TIMEOUT,
    MAX_MESSAGE,
    OPEN_TIMEOUT,
    OTHER_OWNERS,
    TOKEN,
)
from tests.fuzz.connection import FuzzConnection, ProtocolViolation, outcome_of
from tests.fuzz.frames import OP_BINARY, OP_CLOSE, OP_CONTINUATION, OP_TEXT
from tests.fuzz.messages import Batch, Frame
from tests.fuzz.oracle import CANCELLED, INVALID_REQUEST, Outcome, oracle
from tests.fuzz.strategies import VIOLATIONS
from tests.rpc_support import client_frame, raw_connect
from trio_pty.client.client import TrioPtyClient
from trio_pty.model import Wait
from trio_pty.wire import (
    KillParams,
    ListParams,
    OwnerDeleteParams,
    ReadParams,
    SpawnParams,
    SpawnShellParams,
    WriteParams,
)


def oversized(how: str) -> bytes:
    """A message just over max_message_bytes, as (possibly several) frames."""
    if how == "ascii":
        return client_frame(OP_TEXT, b"x" * (MAX_MESSAGE + 1))
    if how == "wide":  # fewer characters than the bound, more UTF-8 bytes
        return client_frame(OP_TEXT, ("€" * (MAX_MESSAGE // 3 + 1)).encode())
    if how == "binary":
        return client_frame(OP_BINARY, b"[" * (MAX_MESSAGE + 1))
    half = b" " * (MAX_MESSAGE // 2 + 1)
    return client_frame(OP_TEXT, half, fin=False) + client_frame(OP_CONTINUATION, half)


def bind(frame: Frame, owner: str, session_id: str, shell_id: str) -> Frame:
    """The frame with the batch's owner and sessions in place of the placeholders."""
    places = ((FUZZ_OWNER, owner), (FUZZ_SESSION, session_id), (FUZZ_SHELL, shell_id))
    if isinstance(frame.payload, str):
        text = frame.payload
        for placeholder, value in places:
            text = text.replace(placeholder, value)
        return attrs.evolve(frame, payload=text)
    data = frame.payload
    for placeholder, value in places:
        data = data.replace(placeholder.encode(), value.encode())
    return attrs.evolve(frame, payload=data)


@attrs.define(eq=False)
class FuzzTarget:
    """A server under fuzz, its guard session, and the current fuzz connection."""

    port: int
    nursery: trio.Nursery
    guard: Guard
    admin: TrioPtyClient  # starts and removes each batch's owner and `cat`
    conn: FuzzConnection | None = None
    examples: int = 0
    closes: Counter[str] = attrs.Factory(Counter)
    outcomes: Counter[Outcome] = attrs.Factory(Counter)
    frames_sent: int = 0

    async def connection(self) -> FuzzConnection:
        if self.conn is None or self.conn.closed:
            if self.conn is not None:
                await self.conn.close()
            with trio.fail_after(OPEN_TIMEOUT):
                raw = await raw_connect(self.port, headers=[("Authorization", f"Bearer {TOKEN}")])
            assert raw.status == 101, raw.head
            self.conn = FuzzConnection(raw)
            self.nursery.start_soon(self.conn.read_loop)
        return self.conn

    async def drop(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def run(self, batch: Batch) -> None:
        conn = await self.connection()
        canonical: Counter[tuple[str, Any]] = Counter()
        expectations = []
        for frame in batch.frames:
            expect = frame.expect if frame.expect is not None else oracle(frame.payload)
            expectations.append(expect)
            conn.ledger.expect(expect, frame.describe())
            if expect.canonical is not None:
                canonical[expect.canonical] += 1
        # Documented reactions to other frames of the batch: an id already in flight is
        # refused (-32600), and a $/cancelRequest may cancel a request (-32800).
        cancels = any(expect.cancels for expect in expectations)
        for expect in expectations:
            for key in expect.keys:
                if expect.canonical is not None and canonical[expect.canonical] > 1:
                    conn.ledger.allow(key, INVALID_REQUEST)
                if cancels:
                    conn.ledger.allow(key, CANCELLED)
        mode, detail = batch.tail
        try:
            for frame in batch.frames:
                await conn.send(frame)
                self.frames_sent += 1
            if mode == "abandon":
                if detail == "partial frame":
                    await conn.send_raw(client_frame(OP_TEXT, b'{"jsonrpc":"2.0"' * 50)[:300])
                elif detail == "mid message":
                    await conn.send_raw(client_frame(OP_TEXT, b'{"jsonrpc":', fin=False))
                await self.drop()
                self.closes["abandoned"] += 1
                return
            for response in await conn.settle(f"batch of {len(batch.frames)}"):
                self.outcomes[outcome_of(response)] += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ProtocolViolation(
                f"the server dropped the connection (close code {conn.close_code}): {exc!r}"
            ) from None
        if mode == "stay":
            return
        if mode == "client close":
            await conn.send_raw(client_frame(OP_CLOSE, int(detail).to_bytes(2, "big") + b"bye"))
            code = await conn.wait_closed()
            assert code == detail, f"the server answered close {detail} with {code}"
            self.closes["client close"] += 1
            await self.drop()
            return
        # A frame that must end the connection, and only with its documented code.
        # (The server may drop the connection before it has read all of the frame.)
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            if mode == "utf8":
                await conn.send_raw(client_frame(OP_TEXT, detail))
            elif mode == "violation":
                await conn.send_raw(VIOLATIONS[detail])
            else:
                await conn.send_raw(oversized(detail))
        code = await conn.wait_closed()
        allowed = {"utf8": {1007, None}, "violation": {1002, 1007, None}}.get(mode, {1009})
        assert code in allowed, f"{mode} {detail!r}: close code {code}, expected one of {allowed}"
        assert conn.ledger.responses == [], "a closing frame was answered"
        self.closes[f"{mode}: {code}"] += 1
        await self.drop()

    async def example(self, batch: Batch) -> None:
        """One batch, with its own owner, `cat` and shell (removed after it), then the
        guard's round trip."""
        with trio.fail_after(60):
            self.examples += 1
            owner = f"batch-{self.examples}"
            info = await self.admin.request(
                SpawnParams(command="cat", owner=owner, description="fuzz target")
            )
            try:
                shell = await self.admin.request(
                    SpawnShellParams(owner=owner, description="fuzz shell", shell="bash")
                )
                frames = tuple(bind(frame, owner, info.id, shell.id) for frame in batch.frames)
                await self.run(attrs.evolve(batch, frames=frames))
            finally:
                await self.admin.request(OwnerDeleteParams(owner=owner))
                for other in OTHER_OWNERS:
                    for session in (await self.admin.request(ListParams(owner=other))).sessions:
                        await self.admin.request(
                            KillParams(id=session.id, owner=other, cleanup=True)
                        )
            await self.guard.round_trip()


# --------------------------------------------------------------------------------------------
# The guard: another client whose `cat` must keep working whatever the fuzz does.


@attrs.define(eq=False)
class Guard:
    client: TrioPtyClient
    owner: str
    session_id: str
    trips: int = 0

    @classmethod
    async def start(cls, client: TrioPtyClient) -> Guard:
        owner = f"guard-{uuid.uuid4().hex}"
        info = await client.request(SpawnParams(command="cat", owner=owner, description="guard"))
        guard = cls(client, owner, info.id)
        await guard.round_trip()
        return guard

    async def round_trip(self) -> None:
        """Write a fresh line; `cat` must echo it back (tty echo plus cat's copy: 2 lines)."""
        self.trips += 1
        word = f"ping-{self.trips}-{uuid.uuid4().hex[:8]}"
        with trio.fail_after(GUARD_TIMEOUT):
            [before] = (await self.client.request(ListParams(owner=self.owner))).sessions
            assert (before.id, before.status) == (self.session_id, "running")
            start = max(0, before.line_count - 1)
            written = await self.client.request(
                WriteParams(id=self.session_id, data=word + "\n", owner=self.owner)
            )
            assert written.bytes_written == len(word) + 1
            while True:
                page = await self.client.request(
                    ReadParams(
                        id=self.session_id,
                        owner=self.owner,
                        offset=start,
                        pattern=f"^{word}$",
                        wait=Wait(pattern=f"^{word}$", timeout_ms=200),
                    )
                )
                if len(page.lines) >= 2:
                    break
                await trio.sleep(0.01)
