"""The sans-io `RpcConnection`: id, cancellation and notification-order rules as properties.

A hypothesis state machine plays the client (frames with ids from a small pool, as requests
and as notifications, cancels), the handlers (each started call succeeds, fails or is
cancelled, in any order), the streams (output chunks, the end of a stream), the sessions
(exits) and detaching, and carries out every action the connection returns in order, as the
trio driver does. After every step the frames sent so far must obey the protocol's rules.
"""

from __future__ import annotations

import ast
import json
import pathlib
from typing import Any

import attrs
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from trio_pty import errors
from trio_pty.model import ExitEvent, OutputChunk, ReadPage, SessionInfo
from trio_pty.rpc import connection
from trio_pty.rpc.connection import (
    Action,
    Call,
    Cancel,
    EndStream,
    RpcConnection,
    Send,
    Start,
    StartStream,
    Unwatch,
    Watch,
    error_for,
)
from trio_pty.wire import (
    ATTACH,
    READ,
    SPAWN,
    SPAWN_SHELL,
    ErrorObject,
    InvalidParams,
    SessionOutput,
    error_for_exception,
)

IDS = st.sampled_from([1, 2, 3, "a", None])


def _info(session_id: str) -> SessionInfo:
    return SessionInfo(
        id=session_id,
        owner="default",
        command="cat",
        args=[],
        workdir="/",
        title=None,
        description="d",
        status="running",
        pid=1,
        exit_code=None,
        exit_signal=None,
        timed_out=False,
        created_at=0.0,
        line_count=0,
        byte_count=0,
        rows=24,
        cols=80,
        notify_on_exit=False,
        timeout=None,
    )


def _event(session_id: str) -> ExitEvent:
    return ExitEvent(
        id=session_id,
        owner="default",
        description="d",
        exit_code=0,
        exit_signal=None,
        timeout_seconds=None,
        timed_out=False,
        output_lines=0,
        last_line="",
    )


def _frame(method: str, params: dict[str, Any], id: Any, *, notification: bool) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if not notification:
        message["id"] = id
    return json.dumps(message)


@attrs.define
class Sent:
    """One frame the connection had sent, decoded, with its place in the log."""

    index: int
    message: dict[str, Any]

    @property
    def method(self) -> str | None:
        return self.message.get("method")

    @property
    def session(self) -> str | None:
        params = self.message.get("params") or {}
        return params.get("id") if self.method else None


class ConnectionRules(RuleBasedStateMachine):
    calls = Bundle("calls")

    @initialize()
    def setup(self) -> None:
        self.conn = RpcConnection()
        self.log: list[Sent] = []
        self.in_flight: dict[Any, Call] = {}  # ids the client has waiting (tracked calls)
        self.running: list[Call] = []  # started, not finished
        self.cancel_asked: set[int] = set()  # id() of calls a Cancel was issued for
        self.cancels: list[Call] = []  # the Cancel actions of the last step
        self.live: dict[str, Call] = {}  # session -> the stream the driver runs for it
        self.dead_streams: list[Call] = []
        self.watches: list[Watch] = []
        self.sessions: list[str] = []
        self.exited: set[str] = set()
        self.removed: set[str] = set()  # gone before its exit was seen: no pty.exited
        self.spawn_response_at: dict[str, int] = {}
        self.renewed: dict[str, bool] = {}  # interest renewed since its last pty.exited
        self.exited_since_stream: dict[str, bool] = {}
        self.answered_at: dict[int, int] = {}  # id() of a call -> where its response is
        self.serial = 0

    # -- carrying out actions, as the driver does

    def carry_out(self, actions: list[Action]) -> list[Sent]:
        sent = []
        for action in actions:
            if isinstance(action, Send):
                item = Sent(len(self.log), json.loads(action.frame))
                session_id = item.session
                if item.method == "pty.exited" and session_id is not None:
                    assert action.expendable
                    # Exit order: nothing of the session streams any more ...
                    assert session_id not in self.live, "pty.exited before the stream ended"
                    # ... and it goes once per interest (a spawn or an attach).
                    assert self.renewed.get(session_id), f"a second pty.exited: {session_id}"
                    self.renewed[session_id] = False
                    self.exited_since_stream[session_id] = True
                if item.method == "pty.output" and session_id is not None:
                    assert not self.exited_since_stream.get(session_id), "output after exit"
                self.log.append(item)
                sent.append(item)
            elif isinstance(action, Start):
                self.running.append(action.call)
            elif isinstance(action, Cancel):
                assert action.call in self.running
                self.cancel_asked.add(id(action.call))
                self.cancels.append(action.call)
            elif isinstance(action, Watch):
                self.watches.append(action)
            elif isinstance(action, Unwatch):
                self.watches.remove(action.watch)
            elif isinstance(action, StartStream):
                self.live[action.call.params.id] = action.call
                self.exited_since_stream[action.call.params.id] = False
            elif isinstance(action, EndStream):
                session_id = action.call.params.id
                if self.live.get(session_id) is action.call:
                    del self.live[session_id]
                self.dead_streams.append(action.call)
        return sent

    def responses(self, sent: list[Sent]) -> list[Sent]:
        return [s for s in sent if "method" not in s.message]

    # -- the client

    @rule(target=calls, rid=IDS, notification=st.booleans(), kind=st.sampled_from("sar"))
    def request(self, rid: Any, notification: bool, kind: str) -> Any:
        if kind == "s":
            method, params = SPAWN.name, {"command": "cat", "description": "d"}
        elif kind == "a" and self.sessions:
            method, params = ATTACH.name, {"id": self.sessions[self.serial % len(self.sessions)]}
        else:
            method, params = READ.name, {"id": "pty_x"}
        self.serial += 1
        duplicate = not notification and rid is not None and rid in self.in_flight
        before = list(self.running)
        frame = _frame(method, params, rid, notification=notification)
        sent = self.carry_out(self.conn.receive(frame))
        new = [call for call in self.running if all(call is not old for old in before)]
        if duplicate:
            # Id rule: refused with -32600 naming the id, nothing started.
            [reply] = self.responses(sent)
            assert reply.message["id"] == rid and reply.message["error"]["code"] == -32600
            assert not new
            return None
        assert not self.responses(sent)
        [call] = new
        assert (call.id, call.respond) == (None if notification else rid, not notification)
        if call.tracked:
            self.in_flight[rid] = call
        return call

    @rule(rid=IDS, notification=st.booleans())
    def cancel(self, rid: Any, notification: bool) -> None:
        frame = _frame("$/cancelRequest", {"id": rid}, 99, notification=notification)
        self.cancels = []
        sent = self.carry_out(self.conn.receive(frame))
        target = self.in_flight.get(rid) if rid is not None else None
        # Routing: exactly the call in flight with that id is cancelled.
        assert self.cancels == ([] if target is None else [target])
        replies = self.responses(sent)
        if notification:
            assert not replies
        elif rid is None:
            [reply] = replies
            assert reply.message["error"]["code"] == -32602
        else:
            [reply] = replies
            assert reply.message["result"] == {"cancelled": target is not None}

    # -- the handlers

    @rule(call=consumes(calls), outcome=st.sampled_from(["ok", "error", "cancelled"]))
    def finish(self, call: Call | None, outcome: str) -> None:
        if call is None:
            return
        self.running.remove(call)
        if outcome == "cancelled" or id(call) in self.cancel_asked:
            sent = self.carry_out(self.conn.cancelled(call))
            expected_code: int | None = -32800
        elif outcome == "error":
            error = error_for(errors.SessionNotFound("pty_x"))
            assert error == error_for_exception(errors.SessionNotFound("pty_x"))
            sent = self.carry_out(self.conn.failed(call, error))
            expected_code = -32001
        else:
            result = self._result(call)
            if call.spec in (SPAWN, ATTACH):
                self.renewed[result.id] = True
            sent = self.carry_out(self.conn.succeeded(call, result))
            expected_code = None
        if call.tracked:
            assert self.in_flight.pop(call.id) is call  # the id is free again
        replies = self.responses(sent)
        if not call.respond:
            assert not replies  # a notification is never answered
            return
        [reply] = replies  # exactly one response, carrying the id
        assert reply.message["id"] == call.id
        self.answered_at[id(call)] = reply.index
        if expected_code is None:
            assert "result" in reply.message
            if call.spec is SPAWN:
                self.spawn_response_at[reply.message["result"]["id"]] = reply.index
        else:
            assert reply.message["error"]["code"] == expected_code

    def _result(self, call: Call) -> Any:
        if call.spec is SPAWN:
            session_id = f"pty_{len(self.sessions)}"
            self.sessions.append(session_id)
            return _info(session_id)
        if call.spec is ATTACH:
            return SessionOutput(id=call.params.id, offset=0, data=b"", next_offset=0)
        return ReadPage(lines=[], total_lines=0, first_line=0, has_more=False, next_offset=0)

    # -- the streams, the sessions, detaching

    @precondition(lambda self: self.live or self.dead_streams)
    @rule(data=st.data(), size=st.integers(0, 3))
    def output(self, data: Any, size: int) -> None:
        call: Call = data.draw(st.sampled_from([*self.live.values(), *self.dead_streams]))
        sent = self.carry_out(self.conn.output(call, OutputChunk(offset=0, data=b"x" * size)))
        if self.live.get(call.params.id) is not call:
            assert not sent  # a detached, replaced or finished stream sends nothing
            return
        [frame] = sent
        assert frame.method == "pty.output" and frame.session == call.params.id
        if call.respond:
            # Attach order: the stream's response went out before its first output.
            response = self.log[self.answered_at[id(call)]]
            assert response.index < frame.index and "result" in response.message

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def stream_ends(self, data: Any) -> None:
        session_id = data.draw(st.sampled_from(sorted(self.live)))
        call = self.live.pop(session_id)
        self.dead_streams.append(call)
        self.carry_out(self.conn.stream_ended(call))

    @precondition(lambda self: self.sessions)
    @rule(data=st.data())
    def session_exits(self, data: Any) -> None:
        session_id = data.draw(st.sampled_from(self.sessions))
        self.exited.add(session_id)
        for watch in [w for w in self.watches if w.session_id == session_id]:
            self.watches.remove(watch)
            self.carry_out(self.conn.session_exited(watch, _event(session_id)))

    @precondition(lambda self: self.watches)
    @rule(data=st.data())
    def session_removed(self, data: Any) -> None:
        watch = data.draw(st.sampled_from(self.watches))
        self.watches.remove(watch)
        self.removed.add(watch.session_id)
        assert self.carry_out(self.conn.watch_failed(watch)) == []

    @precondition(lambda self: self.sessions)
    @rule(data=st.data())
    def detach(self, data: Any) -> None:
        session_id = data.draw(st.sampled_from(self.sessions))
        was_live = session_id in self.live
        detached, actions = self.conn.detach(session_id)
        self.carry_out(actions)
        assert detached == was_live
        assert session_id not in self.live

    # -- what must always hold

    @invariant()
    def ids_in_flight_are_the_clients(self) -> None:
        if hasattr(self, "conn"):
            assert self.conn.ids_in_flight == frozenset(self.in_flight)

    def teardown(self) -> None:
        """Liveness: once every stream has ended and every watched session has exited, a
        session spawned here (and not removed) has had its pty.exited after the spawn
        response."""
        if not hasattr(self, "conn"):
            return
        for call in list(self.live.values()):
            self.live.pop(call.params.id)
            self.carry_out(self.conn.stream_ended(call))
        for watch in list(self.watches):
            self.watches.remove(watch)
            self.carry_out(self.conn.session_exited(watch, _event(watch.session_id)))
        for session_id, at in self.spawn_response_at.items():
            if session_id in self.removed:
                continue
            exits = [s for s in self.log[at:] if s.method == "pty.exited"]
            assert any(s.session == session_id for s in exits), session_id


test_connection_rules = ConnectionRules.TestCase


# --------------------------------------------------------------------------------------------
# Single rules, spelled out


def _start(conn: RpcConnection, method: str, params: dict[str, Any], id: Any = 1) -> Call:
    [action] = conn.receive(_frame(method, params, id, notification=False))
    assert isinstance(action, Start)
    return action.call


@pytest.mark.parametrize(
    ("method", "params"),
    [
        (SPAWN.name, {"command": "cat", "description": "d"}),
        (SPAWN_SHELL.name, {"description": "d"}),
    ],
)
def test_a_spawn_is_watched_only_after_its_response(method: str, params: dict[str, Any]) -> None:
    conn = RpcConnection()
    call = _start(conn, method, params)
    send, watch = conn.succeeded(call, _info("pty_1"))
    assert isinstance(send, Send) and json.loads(send.frame)["id"] == 1
    assert isinstance(watch, Watch) and watch.session_id == "pty_1"


def test_an_attach_ends_its_predecessor_before_its_response_and_streams_after_it() -> None:
    conn = RpcConnection()
    first = _start(conn, ATTACH.name, {"id": "pty_1"}, 1)
    conn.succeeded(first, SessionOutput(id="pty_1", offset=0, data=b"", next_offset=0))
    second = _start(conn, ATTACH.name, {"id": "pty_1"}, 2)
    actions = conn.succeeded(second, SessionOutput(id="pty_1", offset=0, data=b"", next_offset=0))
    kinds = [type(action) for action in actions]
    assert kinds[:3] == [EndStream, Send, StartStream]
    assert actions[0] == EndStream(first)
    assert conn.output(first, OutputChunk(offset=0, data=b"x")) == []
    assert conn.output(second, OutputChunk(offset=0, data=b"x")) != []


def test_an_exit_waits_for_the_stream_and_then_goes_once() -> None:
    conn = RpcConnection()
    spawn = _start(conn, SPAWN.name, {"command": "cat", "description": "d"}, 1)
    [_, watch] = conn.succeeded(spawn, _info("pty_1"))
    attach = _start(conn, ATTACH.name, {"id": "pty_1"}, 2)
    conn.succeeded(attach, SessionOutput(id="pty_1", offset=0, data=b"", next_offset=0))
    assert isinstance(watch, Watch)
    assert conn.session_exited(watch, _event("pty_1")) == []  # held: the stream still runs
    [output] = conn.output(attach, OutputChunk(offset=0, data=b"x"))
    assert isinstance(output, Send) and json.loads(output.frame)["method"] == "pty.output"
    [exited] = conn.stream_ended(attach)
    assert isinstance(exited, Send) and json.loads(exited.frame)["method"] == "pty.exited"
    assert conn.stream_ended(attach) == []


def test_an_unexpected_exception_is_an_internal_error() -> None:
    assert error_for(RuntimeError("x")) is None
    group = ExceptionGroup("g", [errors.SessionNotFound("pty_1")])
    assert error_for(group) == error_for_exception(errors.SessionNotFound("pty_1"))
    invalid = InvalidParams("bad", [])
    assert error_for(invalid) == invalid.to_error()
    assert isinstance(error_for(invalid), ErrorObject)


@pytest.mark.parametrize("frame", ['{"jsonrpc":"2.0","id":1,"method":"pty.nope"}', "[]", "{"])
def test_frames_that_start_nothing_are_answered_at_once(frame: str) -> None:
    [action] = RpcConnection().receive(frame)
    assert isinstance(action, Send)


def test_the_connection_rules_import_no_trio() -> None:
    source = pathlib.Path(connection.__file__).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            assert not any(name == "trio" or name.startswith("trio.") for name in names)
