"""The MCP stdio transport on trio: one JSON-RPC message per line on stdin and stdout.

Why not the SDK's `stdio_server`: it reads stdin in a worker thread, and under trio a thread
cannot be cancelled. A SIGTERM while the client still holds stdin open would then wait for
the client's next line (or forever) before anything could be torn down. Here stdin and
stdout are non-blocking descriptors that trio tasks read and write, so stopping is a
cancel, and the SDK's server loop gets the same message streams it gets from its own
transport.

While serving, fd 0 reads /dev/null and fd 1 writes to stderr (as the SDK's transport does
too): a stray `print` or a library writing to stdout cannot corrupt the protocol. Both are
restored on the way out, with their blocking mode.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import anyio
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCNotification, jsonrpc_message_adapter

__all__ = ["serve_stdio"]

log = logging.getLogger("trio_pty.mcp")

_CHUNK: Final = 65_536
#: How long the answers already produced may take to reach the client once it has closed
#: stdin (it then waits ~2 s before SIGTERM, so this must be well below that).
_FLUSH_SECONDS: Final = 0.5


class _Descriptor:
    """Reads or writes on one of our descriptors: through trio's epoll for pipes, sockets
    and terminals; plainly for regular files and /dev/null, which never block (and which
    epoll refuses)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)
        self._flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        self._stream = trio.lowlevel.FdStream(os.dup(fd)) if pollable else None

    async def receive_some(self) -> bytes:
        if self._stream is not None:
            return await self._stream.receive_some(_CHUNK)
        await trio.lowlevel.checkpoint()
        return os.read(self.fd, _CHUNK)

    async def send_all(self, data: bytes) -> None:
        if self._stream is not None:
            await self._stream.send_all(data)
            return
        await trio.lowlevel.checkpoint()
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    async def aclose(self) -> None:
        # FdStream made the open file description non-blocking; it is shared with whoever
        # started us (a shell's terminal, say): give it back as it was.
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.fd, fcntl.F_SETFL, self._flags)
        if self._stream is not None:
            await self._stream.aclose()


@contextlib.contextmanager
def _wire() -> Iterator[tuple[int, int]]:
    """Take fds 0 and 1 for the protocol: yield private copies of them, with 0 reading
    /dev/null and 1 writing to stderr meanwhile; put them back afterwards."""
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        os.dup2(2, 1)
        try:
            yield wire_in, wire_out
        finally:
            os.dup2(wire_in, 0)
            os.dup2(wire_out, 1)
    finally:
        os.close(wire_in)
        os.close(wire_out)


def _message(line: bytes) -> SessionMessage | Exception:
    """One line as the server loop takes it: a message, or the reason it is not one (the
    loop logs it and goes on, as with the SDK's transport)."""
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except Exception as exc:
        return exc


async def _read_messages(
    stdin: _Descriptor,
    send: MemoryObjectSendStream[SessionMessage | Exception],
    max_line_bytes: int,
) -> None:
    """Lines from stdin to the server loop, until end of file (the client is gone)."""
    buffer = bytearray()
    scanned = 0
    skipping = False  # inside a line longer than max_line_bytes: drop it to its end
    async with send:
        while data := await stdin.receive_some():
            buffer += data
            while (end := buffer.find(b"\n", scanned)) >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                scanned = 0
                if skipping:
                    skipping = False
                elif line.strip():
                    await send.send(_message(line))
            scanned = len(buffer)
            if len(buffer) > max_line_bytes:
                if not skipping:
                    log.warning("dropping a message longer than %d bytes", max_line_bytes)
                    await send.send(ValueError(f"message longer than {max_line_bytes} bytes"))
                skipping = True
                buffer.clear()
                scanned = 0
        if buffer.strip() and not skipping:
            await send.send(_message(bytes(buffer)))


async def _write_messages(
    stdout: _Descriptor,
    receive: MemoryObjectReceiveStream[SessionMessage],
    disconnected: Callable[[], Any],
) -> None:
    """Messages from the server loop to stdout, one line each, until the loop closes."""
    async with receive:
        async for item in receive:
            data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                await stdout.send_all(data.encode() + b"\n")
            except (trio.BrokenResourceError, BrokenPipeError):
                log.info("stdout closed: the client is gone")
                disconnected()
                return


async def serve_stdio(
    server: Server[Any],
    *,
    max_line_bytes: int,
    notifications: trio.MemoryReceiveChannel[tuple[str, dict[str, Any]]] | None = None,
    experimental: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Serve one client on stdin and stdout until it closes stdin (or stdout). Cancel to
    stop sooner. `notifications` (method, params) are sent to the client as they come: ones
    the SDK has no type for (`endings.METHOD`); `experimental` are the capabilities declared
    for them."""
    options = server.create_initialization_options(experimental_capabilities=experimental)
    with _wire() as (wire_in, wire_out):
        stdin, stdout = _Descriptor(wire_in), _Descriptor(wire_out)
        try:
            async with _open_loop(stdin, stdout, max_line_bytes) as (incoming, outgoing, done):
                async with trio.open_nursery() as nursery:
                    if notifications is not None:
                        nursery.start_soon(_forward, notifications, outgoing.clone())
                    await server.run(incoming, outgoing, options)
                    nursery.cancel_scope.cancel()
                done()
        finally:
            await stdin.aclose()
            await stdout.aclose()


async def _forward(
    notifications: trio.MemoryReceiveChannel[tuple[str, dict[str, Any]]],
    outgoing: MemoryObjectSendStream[SessionMessage],
) -> None:
    """Our own notifications onto the client's stream, between the SDK's messages."""
    async with outgoing:
        async for method, params in notifications:
            message = JSONRPCNotification(jsonrpc="2.0", method=method, params=params)
            await outgoing.send(SessionMessage(message))


@contextlib.asynccontextmanager
async def _open_loop(
    stdin: _Descriptor, stdout: _Descriptor, max_line_bytes: int
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
        Callable[[], None],
    ]
]:
    """The reader and writer tasks around the server loop. `done()`: the loop has ended;
    the writer then has a moment to flush what is left."""
    send_in, receive_in = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    send_out, receive_out = anyio.create_memory_object_stream[SessionMessage](0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_read_messages, stdin, send_in, max_line_bytes)
        nursery.start_soon(_write_messages, stdout, receive_out, nursery.cancel_scope.cancel)

        def done() -> None:
            nursery.cancel_scope.deadline = trio.current_time() + _FLUSH_SECONDS

        yield receive_in, send_out, done
