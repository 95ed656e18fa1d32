"""`pty.attach` with `redraw` over a real server: the first chunk draws the state (no old
byte, no old terminal query), live output continues from exactly its offset, and the
terminal fed the drawing and then the stream shows what `pty.screen` shows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio

from trio_pty.client.client import RpcError, connect
from trio_pty.model import Wait
from trio_pty.output.buffer import OutputBuffer
from trio_pty.output.screen import LiveScreen
from trio_pty.wire import (
    AttachParams,
    KillParams,
    ReadRawParams,
    ScreenParams,
    SpawnParams,
    WriteParams,
)

from .rpc_support import TEST_CONFIG, ServerProcess, live, owner_for, start_server

__all__ = ["live"]  # fixtures used by name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(tmp_path_factory.mktemp("server"), config=TEST_CONFIG)
    try:
        yield process
    finally:
        process.stop()


def screen_of(data: bytes, rows: int, cols: int) -> list[str]:
    buffer = OutputBuffer(1 << 20, max_line_length=4000, max_escape_length=4096)
    buffer.note_size(rows, cols)
    buffer.append(data)
    return LiveScreen.from_oldest(buffer).image("x", None).lines


async def test_a_redraw_draws_the_state_then_streams_from_its_offset(
    live: ServerProcess, request: Any
) -> None:
    owner = owner_for(request)
    script = (
        "printf 'first\\r\\n\\033[6n\\033[>c\\033]2;a title\\007\\033[?2004h'; "
        "i=0; while [ $i -lt 40 ]; do echo line $i; i=$((i+1)); done; read x; echo got:$x"
    )
    with trio.fail_after(30):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnParams(
                    command="sh",
                    args=["-c", script],
                    owner=owner,
                    description="drawn",
                    ready=Wait(pattern="^line 39$"),
                )
            )
            raw = (await client.request(ReadRawParams(id=info.id, owner=owner))).data
            assert b"\x1b[6n" in raw
            first = await client.request(AttachParams(id=info.id, owner=owner, redraw=True))
            assert first.drawn and (first.rows, first.cols) == (24, 80)
            assert first.offset == first.next_offset == len(raw)
            assert b"\x1b[6n" not in first.data and b"\x1b[>c" not in first.data
            assert b"first\r\n" in first.data  # history, as a line
            assert first.data.endswith(b"\x1b[?2004h\x1b]2;a title\x07")
            await client.request(AttachParams(id=info.id, owner=owner, offset=0))  # raw still
            with pytest.raises(RpcError) as refused:
                await client.request(AttachParams(id=info.id, owner=owner, offset=0, redraw=True))
            assert refused.value.kind == "invalid_input"

        async with connect(live.url, live.token) as client:
            async with client.attach(
                AttachParams(id=info.id, owner=owner, redraw=True, driver=True)
            ) as attachment:
                drawing = attachment.first.data
                assert attachment.cursor == len(raw)
                await client.request(WriteParams(id=info.id, owner=owner, data="typed\r"))
                live_bytes = b""
                async for chunk in attachment:
                    if chunk is attachment.first:
                        continue  # the drawing comes first, as the response's chunk
                    assert chunk.offset == len(raw) + len(live_bytes)  # nothing lost or twice
                    live_bytes += chunk.data
            screen = await client.request(ScreenParams(id=info.id, owner=owner))
            assert screen_of(drawing + live_bytes, 24, 80) == screen.lines
            assert b"got:" in live_bytes and live_bytes.endswith(b"typed\r\n")
            await client.request(KillParams(id=info.id, owner=owner, cleanup=True))
