"""One fuzz connection: raw frames out, responses collected by id and checked against what
was expected of them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import attrs
import trio
import trio.testing

from tests.fuzz.config import CLOSE_TIMEOUT, OPEN_TIMEOUT, SETTLE_TIMEOUT, TOKEN
from tests.fuzz.frames import OP_CLOSE, OP_PONG, OP_TEXT, message_bytes
from tests.fuzz.messages import Frame
from tests.fuzz.oracle import INTERNAL_ERROR, NOTIFICATIONS, Expect, Key, Outcome, key_of
from tests.rpc_support import RawSocket, client_frame, raw_connect


class ProtocolViolation(AssertionError):
    pass


@attrs.define(eq=False)
class Ledger:
    """Expected and received answers of the frames sent since the last settled batch."""

    definite: Counter[Key] = attrs.Factory(Counter)
    flexible: list[frozenset[Key]] = attrs.Factory(list)
    allowed: dict[Key, set[Outcome] | None] = attrs.Factory(dict)
    labels: dict[Key, list[str]] = attrs.Factory(dict)
    received: Counter[Key] = attrs.Factory(Counter)
    responses: list[tuple[Key, Outcome, dict[str, Any]]] = attrs.Factory(list)

    def expect(self, expect: Expect, label: str) -> None:
        if not expect.keys:
            return
        if len(expect.keys) == 1:
            [key] = expect.keys
            self.definite[key] += 1
        else:
            self.flexible.append(expect.keys)
        for key in expect.keys:
            self.labels.setdefault(key, []).append(label)
            if expect.outcomes is None or self.allowed.get(key, set()) is None:
                self.allowed[key] = None
            else:
                current = self.allowed.setdefault(key, set())
                assert current is not None
                current.update(expect.outcomes)

    def allow(self, key: Key, outcome: Outcome) -> None:
        current = self.allowed.get(key)
        if current is not None:
            current.add(outcome)

    @property
    def expected_total(self) -> int:
        return sum(self.definite.values()) + len(self.flexible)

    def settled(self) -> bool:
        """True once every expected response is in; raises when the answers cannot be
        those expected (an extra response, an id nobody sent, one frame answered twice)."""
        total = sum(self.received.values())
        if total < self.expected_total:
            return False
        if total > self.expected_total:
            raise ProtocolViolation(f"more responses than requests: {self.describe()}")
        for key, count in self.definite.items():
            if self.received[key] < count:
                raise ProtocolViolation(f"missing responses for {key}: {self.describe()}")
        spare: list[Key] = []
        for key, count in self.received.items():
            spare += [key] * (count - self.definite[key])
        if not _perfect_matching(spare, self.flexible):
            raise ProtocolViolation(f"responses carry the wrong ids: {self.describe()}")
        return True

    def describe(self) -> str:
        expected = Counter(self.definite)
        for keys in self.flexible:
            expected.update(keys)
        missing = {
            k: self.labels.get(k, [])[:3] for k in expected if self.received[k] < self.definite[k]
        }
        extra = {k: n for k, n in self.received.items() if n > expected[k]}
        return (
            f"expected {self.expected_total}, received {sum(self.received.values())}; "
            f"missing {dict(list(missing.items())[:5])}; unexpected or repeated ids {extra}"
        )

    def check_outcomes(self) -> None:
        for key, outcome, message in self.responses:
            assert outcome != INTERNAL_ERROR, f"internal error: {message}"
            allowed = self.allowed.get(key, set())
            if allowed is not None and outcome not in allowed:
                raise ProtocolViolation(
                    f"response {json.dumps(message)[:500]} has outcome {outcome}, expected one "
                    f"of {sorted(map(str, allowed))} for {self.labels.get(key, [])[:3]}"
                )


def _perfect_matching(units: list[Key], slots: list[frozenset[Key]]) -> bool:
    """Whether each response in `units` can be the answer of a distinct `slots` frame."""
    if len(units) != len(slots):
        return False
    owner: dict[int, int] = {}  # slot -> unit

    def augment(unit: int, seen: set[int]) -> bool:
        for slot, keys in enumerate(slots):
            if units[unit] in keys and slot not in seen:
                seen.add(slot)
                if slot not in owner or augment(owner[slot], seen):
                    owner[slot] = unit
                    return True
        return False

    return all(augment(unit, set()) for unit in range(len(units)))


def outcome_of(message: dict[str, Any]) -> Outcome:
    """Check a response's shape (JSON-RPC 2.0) and return "result" or its error code."""
    assert message.get("jsonrpc") == "2.0", message
    assert set(message) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}), message
    if "result" in message:
        return "result"
    error = message["error"]
    assert isinstance(error, dict) and set(error) <= {"code", "message", "data"}, message
    assert type(error["code"]) is int and isinstance(error["message"], str), message
    assert isinstance(error.get("data", {}), dict), message
    return int(error["code"])


@attrs.define(eq=False)
class FuzzConnection:
    """A raw WebSocket client: frames out as built, every server frame read by one task."""

    raw: RawSocket
    ledger: Ledger = attrs.Factory(Ledger)
    notifications: Counter[str] = attrs.Factory(Counter)
    pings: list[bytes] = attrs.Factory(list)
    pongs: list[bytes] = attrs.Factory(list)
    problems: list[str] = attrs.Factory(list)
    closed: bool = False
    close_code: int | None = None
    changed: trio.Event = attrs.Factory(trio.Event)
    done: trio.Event = attrs.Factory(trio.Event)

    def _wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def read_loop(self) -> None:
        try:
            while True:
                try:
                    opcode, payload = await self.raw.read_frame()
                except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
                    self.closed, self.close_code = True, None
                    return
                if opcode == OP_CLOSE:
                    self.closed = True
                    self.close_code = int.from_bytes(payload[:2], "big") if payload else 1005
                    return
                if opcode == OP_PONG:
                    self.pongs.append(payload)
                elif opcode == OP_TEXT:
                    self._record(payload)
                else:
                    self.problems.append(f"unexpected server frame: opcode {opcode:#x}")
                self._wake()
        finally:
            self.done.set()
            self._wake()

    def _record(self, payload: bytes) -> None:
        try:
            message = json.loads(payload.decode("utf-8"), parse_constant=_reject)
            if isinstance(message, dict) and "method" in message:
                assert "id" not in message, message
                assert message["method"] in NOTIFICATIONS, message
                assert isinstance(message.get("params"), dict), message
                self.notifications[message["method"]] += 1
                return
            assert isinstance(message, dict), message
            outcome = outcome_of(message)
        except (AssertionError, ValueError, KeyError) as exc:
            self.problems.append(f"malformed server frame {payload[:300]!r}: {exc!r}")
            return
        key = key_of(message["id"])
        self.ledger.received[key] += 1
        self.ledger.responses.append((key, outcome, message))

    async def send(self, frame: Frame) -> None:
        if frame.ping is not None:
            self.pings.append(frame.ping)
        await self.raw.stream.send_all(
            message_bytes(frame.opcode, frame.data, frame.cuts, frame.ping)
        )

    async def send_raw(self, data: bytes) -> None:
        await self.raw.stream.send_all(data)

    async def settle(self, context: str) -> list[dict[str, Any]]:
        """Wait (bounded) until every expected response and pong is in, then check them."""
        try:
            with trio.fail_after(SETTLE_TIMEOUT):
                while not (self.ledger.settled() and len(self.pongs) >= len(self.pings)):
                    self._check_problems()
                    if self.closed:
                        raise ProtocolViolation(
                            f"connection closed ({self.close_code}) before the batch was "
                            f"answered: {self.ledger.describe()}"
                        )
                    await self.changed.wait()
        except trio.TooSlowError:
            raise ProtocolViolation(
                f"{context}: responses missing after {SETTLE_TIMEOUT} s: {self.ledger.describe()}"
            ) from None
        self._check_problems()
        self.ledger.check_outcomes()
        assert sorted(self.pongs) == sorted(self.pings), "every ping gets its pong"
        responses = [message for _, _, message in self.ledger.responses]
        self.ledger = Ledger()
        self.pings.clear()
        self.pongs.clear()
        return responses

    async def wait_closed(self) -> int | None:
        with trio.fail_after(CLOSE_TIMEOUT):
            await self.done.wait()
        return self.close_code

    def _check_problems(self) -> None:
        if self.problems:
            raise ProtocolViolation("; ".join(self.problems))

    async def close(self) -> None:
        """The closing handshake, bounded; then drop the socket."""
        try:
            with trio.move_on_after(CLOSE_TIMEOUT):
                if not self.closed:
                    with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await self.send_raw(client_frame(OP_CLOSE, (1000).to_bytes(2, "big")))
                    await self.done.wait()
        finally:
            await trio.aclose_forcefully(self.raw.stream)


def _reject(name: str) -> Any:
    raise ValueError(f"{name} in server output")


@asynccontextmanager
async def fuzz_connection(port: int, nursery: trio.Nursery) -> AsyncIterator[FuzzConnection]:
    with trio.fail_after(OPEN_TIMEOUT):
        raw = await raw_connect(port, headers=[("Authorization", f"Bearer {TOKEN}")])
    if raw.status != 101:
        await raw.stream.aclose()
        raise AssertionError(f"handshake refused: {raw.head!r}")
    conn = FuzzConnection(raw)
    nursery.start_soon(conn.read_loop)
    try:
        yield conn
    finally:
        await conn.close()
