"""Recordings of real sessions (`Manager.recording`, `pty.record`): what a player shows is the
session's output (PyPI's asciinema 2.4 `cat` as the oracle), split UTF-8, resizes, binary
bytes, a shell's commands as markers and the exit last; every v3 line as the spec has it."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_pty
from trio_pty import Limits, Wait
from trio_pty.client.client import RpcError, connect
from trio_pty.client.local import LocalClient
from trio_pty.manager import Manager
from trio_pty.output.buffer import OutputBuffer
from trio_pty.rpc.scope import TokenScope
from trio_pty.wire import KillParams, ReadParams, RecordParams, SpawnParams

from .helpers import poll_until
from .rpc_support import ServerProcess, live, owner_for, server

__all__ = ["live", "server"]  # fixtures used by name

ASCIINEMA = Path(sys.executable).parent / "asciinema"
needs_asciinema = pytest.mark.skipif(
    shutil.which("asciinema", path=str(ASCIINEMA.parent)) is None,
    reason="asciinema is not installed (pip install -e '.[test]')",
)

# Writes each piece, then waits for a line on stdin before the next (echo off, so the
# output is the pieces alone, each "\n" made "\r\n" by the terminal).
PIECES_SCRIPT = r"""
import sys, termios
attributes = termios.tcgetattr(0)
attributes[3] &= ~termios.ECHO
termios.tcsetattr(0, termios.TCSANOW, attributes)
pieces = [bytes.fromhex(piece) for piece in sys.argv[1:]]
for i, piece in enumerate(pieces):
    sys.stdout.buffer.write(piece)
    sys.stdout.buffer.flush()
    if i < len(pieces) - 1:
        sys.stdin.readline()
"""

FAST = Limits(terminate_grace=0.1)


def on_screen(piece: bytes) -> bytes:
    return piece.replace(b"\n", b"\r\n")


async def play_pieces(manager: Manager, pieces: list[bytes], *, resize_after: int = -1) -> str:
    """A session that writes `pieces` one read apart (each seen whole before the next is
    asked for), resized after piece `resize_after`; returns its id once it has ended."""
    info = await manager.spawn(
        sys.executable,
        args=["-c", PIECES_SCRIPT, *(piece.hex() for piece in pieces)],
        description="pieces",
    )
    written = 0
    for i, piece in enumerate(pieces):
        written += len(on_screen(piece))
        await poll_until(lambda: manager.get(info.id).byte_count >= written)  # noqa: B023
        if i == resize_after:
            await manager.resize(info.id, rows=30, cols=100)
        if i < len(pieces) - 1:
            await manager.write(info.id, "\n")
    await manager.wait_exit(info.id)
    return info.id


def asciinema_cat(tmp_path: Path, cast: str) -> bytes:
    path = tmp_path / "session.cast"
    path.write_text(cast)
    played = subprocess.run(
        [str(ASCIINEMA), "cat", str(path)], capture_output=True, timeout=30, check=True
    )
    return played.stdout


def check_v3(cast: str) -> tuple[dict[str, Any], list[list[Any]]]:
    """Every line of a v3 file as the spec has it: the header, then events with intervals
    that are never negative, known codes, well-formed data, the exit (if any) last."""
    assert cast.endswith("\n")
    header, *lines = cast[:-1].split("\n")
    meta = json.loads(header)
    assert meta["version"] == 3
    assert isinstance(meta["term"]["cols"], int) and isinstance(meta["term"]["rows"], int)
    assert meta["term"]["type"] == "xterm-256color" and isinstance(meta["timestamp"], int)
    assert set(meta.get("env", {})) <= {"SHELL"}
    events = [json.loads(line) for line in lines]
    for i, (interval, code, data) in enumerate(events):
        assert isinstance(interval, float) and interval >= 0
        assert code in {"o", "i", "r", "m", "x"} and isinstance(data, str)
        if code == "r":
            assert re.fullmatch(r"\d+x\d+", data)
        if code == "x":
            assert i == len(events) - 1 and re.fullmatch(r"\d+", data)
    return meta, events


def output_of(events: list[list[Any]]) -> str:
    return "".join(data for _, code, data in events if code == "o")


@needs_asciinema
async def test_a_player_shows_the_output_byte_for_byte(tmp_path: Path) -> None:
    """UTF-8 cut inside characters across reads, and a resize inside a character too: the
    v2 file played back is the session's output, exactly (sha256)."""
    pieces = ["h\xc3".encode("latin-1"), b"\xa9llo \xe2\x9c", b"\x85 done\n"]
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST) as manager:
            session = await play_pieces(manager, pieces, resize_after=1)
            raw = (await manager.read_raw(session)).data
            assert raw == b"".join(on_screen(piece) for piece in pieces)
            v2 = await manager.recording(session, format=2)
            v3 = await manager.recording(session)
    played = asciinema_cat(tmp_path, v2)
    assert hashlib.sha256(played).hexdigest() == hashlib.sha256(raw).hexdigest()

    meta, events = check_v3(v3)
    assert (meta["term"]["cols"], meta["term"]["rows"]) == (80, 24)
    assert meta["command"].startswith(sys.executable) and "env" not in meta
    codes = [code for _, code, _ in events]
    assert codes.count("r") == 1 and codes[-1] == "x" and events[-1][2] == "0"
    resize = codes.index("r")
    assert events[resize][2] == "100x30"
    # The resize sits between the bytes before and after it; the character it cut is
    # written whole, after it.
    assert output_of(events[:resize]) == "héllo "
    assert output_of(events[resize:]) == "✅ done\r\n"
    assert all(data for _, code, data in events if code == "o")


@needs_asciinema
async def test_bytes_that_are_not_utf8_become_replacement_characters(tmp_path: Path) -> None:
    pieces = [b"bin \xff\xfe end\n", b"\x80 tail \xf0\x9f"]  # ends inside a character
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST) as manager:
            session = await play_pieces(manager, pieces)
            raw = (await manager.read_raw(session)).data
            v2 = await manager.recording(session, format=2)
            v3 = await manager.recording(session, format=3)
    assert raw == b"".join(on_screen(piece) for piece in pieces)
    shown = raw.decode("utf-8", errors="replace")
    assert asciinema_cat(tmp_path, v2) == shown.encode()
    _, events = check_v3(v3)
    assert output_of(events) == shown == "bin \ufffd\ufffd end\r\n\ufffd tail \ufffd"


async def test_a_shell_session_marks_each_command_and_ends_with_its_exit(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    commands = ["echo one", "printf 'two\\n'", "false"]
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST, environ={"HOME": str(home)}) as manager:
            info = await manager.spawn_shell(description="sh", shell="bash", rc=False)
            for command in commands:
                await manager.run(info.id, command)
            meta, events = check_v3(await manager.recording(info.id))
            assert [data for _, code, data in events if code == "m"] == commands
            assert "x" not in [code for _, code, _ in events]  # it runs
            assert meta["env"] == {"SHELL": info.command}
            await manager.kill(info.id)
            ended = manager.get(info.id)
            _, events = check_v3(await manager.recording(info.id))
    assert [data for _, code, data in events if code == "m"] == commands
    status = ended.exit_code if ended.exit_code is not None else 128 + (ended.exit_signal or 0)
    assert events[-1][1:] == ["x", str(status)]
    # Each marker sits where its command's output starts.
    for command, expected in zip(commands, ["one", "two", ""], strict=True):
        at = next(i for i, event in enumerate(events) if event[1:] == ["m", command])
        after = output_of(events[at:])
        assert after.startswith(expected)


async def test_the_wire_method_and_who_may_call_it(live: ServerProcess, request: Any) -> None:
    owner = owner_for(request)
    with trio.fail_after(30):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnParams(owner=owner, command="printf", args=["rec\\n"], description="r", rows=9)
            )
            await client.request(ReadParams(id=info.id, owner=owner, wait=Wait(exit=True)))
            recording = await client.request(RecordParams(id=info.id, owner=owner, format=2))
            assert (recording.id, recording.format) == (info.id, 2)
            header = json.loads(recording.cast.splitlines()[0])
            assert (header["version"], header["height"]) == (2, 9)
            assert [json.loads(line)[1:] for line in recording.cast.splitlines()[1:]] == [
                ["o", "rec\r\n"]
            ]
            with pytest.raises(RpcError) as refused:
                await client.request(RecordParams(id=info.id, owner=owner, format=1))
            assert (refused.value.kind, refused.value.data["field"]) == ("invalid_input", "format")
            await client.request(KillParams(id=info.id, owner=owner, cleanup=True))


async def test_read_only_tokens_record_their_owners_sessions_only() -> None:
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("true", owner="a", description="t")
            await manager.wait_exit(info.id, owner="a")
            watcher = LocalClient(
                manager, scope=TokenScope(name="ro", owners=("a",), read_only=True)
            )
            _, events = check_v3((await watcher.request(RecordParams(id=info.id, owner="a"))).cast)
            assert events == [[0.0, "x", "0"]]
            # Another owner's session does not exist (whichever owner the call names).
            other = LocalClient(manager, scope=TokenScope(name="b", owners=("b",), read_only=True))
            for owner in ("a", "b"):
                with pytest.raises(RpcError) as refused:
                    await other.request(RecordParams(id=info.id, owner=owner))
                assert refused.value.kind == "session_not_found"


def test_the_index_is_forgotten_with_the_bytes_it_times() -> None:
    """Each pass's time is kept beside the ring and dropped once the ring drops what it
    timed; a resize keeps the time it was given."""
    output = OutputBuffer(100, max_line_length=200, max_escape_length=64, block_size=16)
    output.note_size(24, 80)
    for i in range(40):
        output.append(b"x" * 10)
        output.arrived(i * 1.0)  # a new stretch each pass
    output.note_size(30, 100, at=40.5)
    assert output.start_offset == 300
    assert output.timing.count <= 12  # the retained ten, and what was not compacted yet
    stretches = list(output.timing.stretches(output.start_offset))
    assert [(first, end, when) for first, end, when in stretches] == [
        (300 + 10 * i, 310 + 10 * i, 30.0 + i) for i in range(10)
    ]
    assert output.sizes[-1].at == 40.5
    # A recording is written from a copy: later output and forgetting leave it as it was.
    taken = output.timing.copy()
    for i in range(40, 60):
        output.append(b"y" * 10)
        output.arrived(i * 1.0)
    assert list(taken.stretches(300)) == stretches


async def test_after_the_ring_rotated_the_recording_starts_at_its_first_byte() -> None:
    limits = Limits(terminate_grace=0.1, buffer_size=4096)
    with trio.fail_after(30):
        async with trio_pty.open_manager(limits) as manager:
            info = await manager.spawn(
                "sh", args=["-c", "seq 1 3000"], description="rotates", rows=10, cols=40
            )
            await manager.wait_exit(info.id)
            chunk = await manager.read_raw(info.id)
            meta, events = check_v3(await manager.recording(info.id))
    assert chunk.gap and chunk.offset > 0  # the ring rotated: bytes from 0 are gone
    assert output_of(events) == chunk.data.decode()
    assert output_of(events).endswith("2999\r\n3000\r\n")
    assert (meta["term"]["cols"], meta["term"]["rows"]) == (40, 10)
    assert events[-1][1:] == ["x", "0"]
