"""Slowloris peers for the HTTP front's tests, in a process of their own (as a program in a
session would be, and so that they do not slow the legitimate client down by sharing its
event loop): `python -m tests.slow_peers PORT KIND:SOURCE:COUNT...` until its stdin closes.

- `trickle`: a request head, one byte every 0.25 s;
- `silent`: connects and sends nothing.

Whenever the server drops one (408, 503, or to make room), it connects again half a second
later.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress

import trio

_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: 1\r\n" * 1000


async def until_dropped(stream: trio.SocketStream, stop: trio.Event) -> None:
    """Read (and discard) until the server closes `stream`, or until `stop`."""
    async with trio.open_nursery() as nursery:

        async def on_stop() -> None:
            await stop.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(on_stop)
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while await stream.receive_some(4096):
                pass
        nursery.cancel_scope.cancel()


async def _trickled(stream: trio.SocketStream, stop: trio.Event) -> None:
    with trio.move_on_after(30), suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        for byte in _HEAD:
            await stream.send_all(bytes([byte]))
            with trio.move_on_after(0.25):
                await stop.wait()
            if stop.is_set():
                return


async def _peer(
    behave: Callable[[trio.SocketStream, trio.Event], Awaitable[None]],
    source: str,
    port: int,
    stop: trio.Event,
) -> None:
    while not stop.is_set():
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=source)
        except OSError:
            await trio.sleep(0.5)
            continue
        async with stream:
            await behave(stream, stop)
        with trio.move_on_after(0.5):
            await stop.wait()


KINDS: dict[str, Callable[[trio.SocketStream, trio.Event], Awaitable[None]]] = {
    "trickle": _trickled,
    "silent": until_dropped,
}


async def main(port: int, peers: list[tuple[str, str, int]]) -> None:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        for kind, source, count in peers:
            for _ in range(count):
                nursery.start_soon(_peer, KINDS[kind], source, port, stop)
        print("started", flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(0))
        async with stdin:
            while await stdin.receive_some(4096):
                pass
        stop.set()


if __name__ == "__main__":
    specs = [arg.split(":") for arg in sys.argv[2:]]
    trio.run(main, int(sys.argv[1]), [(kind, src, int(n)) for kind, src, n in specs])
