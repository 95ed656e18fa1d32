"""WebSocket bytes (client side: masked), built by hand so anything can be sent."""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence

from tests.fuzz.config import TOKEN
from tests.rpc_support import client_frame

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def fragments(payload: bytes, cuts: Sequence[float]) -> list[bytes]:
    """`payload` split at the given fractions of its length (empty pieces are legal)."""
    points = sorted(int(cut * len(payload)) for cut in cuts)
    pieces, start = [], 0
    for point in points:
        pieces.append(payload[start:point])
        start = point
    pieces.append(payload[start:])
    return pieces


def message_bytes(opcode: int, payload: bytes, cuts: Sequence[float], ping: bytes | None) -> bytes:
    """A whole message as one or more frames, a ping interleaved between fragments."""
    pieces = fragments(payload, cuts)
    out = b""
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        out += client_frame(opcode if index == 0 else OP_CONTINUATION, piece, fin=last)
        if ping is not None and not last and index == 0:
            out += client_frame(OP_PING, ping)
    if ping is not None and len(pieces) == 1:
        out += client_frame(OP_PING, ping)
    return out


def upgrade_request(port: int) -> bytes:
    """A WebSocket upgrade request for /rpc with the fuzz token (what raw_connect sends)."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        "GET /rpc HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        f"Authorization: Bearer {TOKEN}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
