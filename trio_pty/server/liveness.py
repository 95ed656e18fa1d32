"""How long an upgraded connection may keep its slot without being a live client.

An admitted WebSocket holds one of `max_connections` slots. Without a bound in time, a
client that completed the handshake and then sent nothing, or trickled one frame a byte a
second, held its slot forever (issue 30, finding 3: still open after 45 s). Two bounds, both
measured only while the server is waiting for the client's bytes (a reader held back by the
server's own back-pressure is not the client's fault):

- `websocket_idle_timeout`: no byte at all for that long ends the connection. The server
  pings after a third of it without a message (`Connection`), and every WebSocket client
  (trio-websocket, a browser) answers a ping by itself, so a quiet but live client is never
  idle;
- `websocket_message_timeout`: a frame, or a message fragmented over several frames, must
  arrive whole within that much waiting from its first byte, however its bytes trickle in.

`FrameTracker` follows the client's frame boundaries (RFC 6455 section 5.2) in the raw
bytes, without decoding anything: it only tells whether a frame or message is under way.
`WatchedStream` holds the connection's stream to both bounds: past one, it logs why and
reports end of stream, and the WebSocket layer closes the connection as abnormal (1006).
"""

from __future__ import annotations

import logging
from typing import Final

import trio

__all__ = ["FrameTracker", "WatchedStream"]

log = logging.getLogger("trio_pty.server")

_FIN: Final = 0x80
_MASKED: Final = 0x80
_LENGTH_16: Final = 126
_LENGTH_64: Final = 127
_FIRST_CONTROL_OPCODE: Final = 0x8


class FrameTracker:
    """Follows frame boundaries in a client's byte stream, after `skip` bytes (the HTTP
    request head, replayed to the WebSocket layer before the frames). `busy` is True from
    the first byte of a frame until it is complete, and across the frames of a fragmented
    data message until its final one (control frames may come between those)."""

    def __init__(self, skip: int = 0) -> None:
        self._skip = skip
        self._header = bytearray()  # of the frame being read, while incomplete
        self._payload_left = 0  # bytes of the current frame's payload still to come
        self._final = True  # the current frame's FIN bit
        self._control = False  # the current frame's opcode is a control one
        self._fragmented = False  # a data message goes on past its last complete frame

    @property
    def busy(self) -> bool:
        return bool(self._header) or self._payload_left > 0 or self._fragmented

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        if self._skip:
            skipped = min(self._skip, len(view))
            self._skip -= skipped
            view = view[skipped:]
        index = 0
        while index < len(view):
            if self._payload_left:
                taken = min(self._payload_left, len(view) - index)
                self._payload_left -= taken
                index += taken
                if not self._payload_left:
                    self._frame_done()
                continue
            self._header.append(view[index])
            index += 1
            if len(self._header) == self._header_size():
                self._start_payload()

    def _header_size(self) -> int:
        if len(self._header) < 2:
            return 2
        length = self._header[1] & 0x7F
        extended = 2 if length == _LENGTH_16 else 8 if length == _LENGTH_64 else 0
        mask = 4 if self._header[1] & _MASKED else 0
        return 2 + extended + mask

    def _start_payload(self) -> None:
        header = self._header
        self._final = bool(header[0] & _FIN)
        self._control = (header[0] & 0x0F) >= _FIRST_CONTROL_OPCODE
        length = header[1] & 0x7F
        if length == _LENGTH_16:
            length = int.from_bytes(header[2:4], "big")
        elif length == _LENGTH_64:
            length = int.from_bytes(header[2:10], "big")
        header.clear()
        self._payload_left = length
        if not length:
            self._frame_done()

    def _frame_done(self) -> None:
        if not self._control:  # a control frame neither starts nor ends a message
            self._fragmented = not self._final


class WatchedStream(trio.abc.HalfCloseableStream):
    """`transport_stream` held to the idle and per-message bounds (see the module)."""

    def __init__(
        self,
        transport_stream: trio.abc.Stream,
        *,
        idle_timeout: float,
        message_timeout: float,
        skip: int = 0,
        peer: str = "a client",
    ) -> None:
        self.transport_stream = transport_stream
        self._idle_timeout = idle_timeout
        self._message_timeout = message_timeout
        self._frames = FrameTracker(skip)
        self._message_waited = 0.0  # waiting for the message under way, so far
        self._peer = peer
        #: Why the stream was ended here ("idle" or "slow message"), or None.
        self.expired: str | None = None

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self.expired is not None:
            return b""
        busy = self._frames.busy
        budget = self._message_timeout - self._message_waited if busy else self._idle_timeout
        started = trio.current_time()
        with trio.move_on_after(budget):
            data = await self.transport_stream.receive_some(max_bytes)
            if busy:
                self._message_waited += trio.current_time() - started
            self._frames.feed(data)
            if not self._frames.busy:
                self._message_waited = 0.0
            return data
        self.expired = "slow message" if busy else "idle"
        log.warning(
            "%s: closing the connection: %s",
            self._peer,
            f"a message took over {self._message_timeout:g} s"
            if busy
            else f"nothing received for {self._idle_timeout:g} s",
        )
        return b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        if not isinstance(self.transport_stream, trio.abc.HalfCloseableStream):
            raise trio.ClosedResourceError("the transport stream cannot be half-closed")
        await self.transport_stream.send_eof()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()
