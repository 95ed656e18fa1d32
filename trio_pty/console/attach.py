"""`trio-pty attach`: your terminal connected to a session, as tmux attaches a client.

Your terminal goes raw; as a driver, the session takes your window's size first; then your
terminal gets the session's state drawn from its screen model (`pty.attach` with `redraw`:
history lines, the screen, its modes and title; never the old raw bytes, whose terminal
queries your terminal would answer into the session; a file or a pipe gets the raw output),
then the live output byte for byte
(followed by a `ModeTracker`); your keystrokes go to the session byte for byte (`pty.write`
with escapes), a window resize (SIGWINCH) resizes the session. The detach keys (`--detach-key`,
default `C-]`; pressed twice they send themselves) end it, as do the session's end, a lost
connection, SIGTERM and SIGHUP; on every way out your terminal gets back what it had: the
modes the program turned on are turned off, then the terminal's own settings are restored.
`--read-only` watches: nothing typed reaches the session but the detach keys, and your
window's size is not imposed on it. With `--json`, the end is printed last: the ExitEvent
when the session ended, else `{"id": ..., "detached": true}`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import stat
import sys
import termios
import tty
from collections.abc import Iterator
from typing import Final

import attrs
import trio

from trio_pty.client.client import RpcError, TrioPtyClient
from trio_pty.console.common import EXIT_OK, print_json
from trio_pty.console.keys import (
    DETACH_DELAY,
    DetachMatcher,
    keystrokes_to_text,
    parse_keys,
)
from trio_pty.console.modes import ModeTracker
from trio_pty.model import ExitEvent
from trio_pty.wire import AttachParams, DetachResult, ResizeParams, WriteParams

__all__ = ["attach"]

_INPUT_CHUNK: Final = 4096
_RESTORE_TIMEOUT: Final = 2.0  # seconds to write the restoring bytes to a slow terminal


class _AsyncFd:
    """Async reads/writes on a duplicate of a standard descriptor: a non-blocking FdStream
    for terminals, pipes and sockets, a worker thread for files (epoll refuses them)."""

    def __init__(self, fd: int) -> None:
        mode = os.fstat(fd).st_mode
        self._fd = os.dup(fd)
        self._stream: trio.lowlevel.FdStream | None = None
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            try:
                self._stream = trio.lowlevel.FdStream(self._fd)
            except OSError:
                self._stream = None

    async def receive_some(self, size: int) -> bytes:
        if self._stream is not None:
            return await self._stream.receive_some(size)
        return await trio.to_thread.run_sync(os.read, self._fd, size, abandon_on_cancel=True)

    async def send_all(self, data: bytes) -> None:
        if self._stream is not None:
            await self._stream.send_all(data)
            return
        view = memoryview(data)
        while view:
            written = await trio.to_thread.run_sync(os.write, self._fd, view)
            view = view[written:]

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
        else:
            os.close(self._fd)


@contextlib.contextmanager
def terminal_mode(raw: bool) -> Iterator[None]:
    """Put stdin's terminal in raw mode (when `raw`), and on every way out restore its
    attributes and the blocking mode of stdin and stdout (FdStream makes them
    non-blocking, and the shell shares those open file descriptions)."""
    flags: dict[int, int] = {}
    for fd in (0, 1):
        with contextlib.suppress(OSError):
            flags[fd] = fcntl.fcntl(fd, fcntl.F_GETFL)
    saved = None
    if raw:
        saved = termios.tcgetattr(0)
        tty.setraw(0, termios.TCSANOW)
    try:
        yield
    finally:
        if saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(0, termios.TCSADRAIN, saved)
        for fd, value in flags.items():
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETFL, value)


def _window_size() -> tuple[int, int] | None:
    for fd in (1, 0):
        try:
            size = os.get_terminal_size(fd)
        except OSError:
            continue
        return size.lines, size.columns
    return None


@attrs.define(eq=False)
class _Attached:
    """One attach: the session, what the user asked, and what the output turned on."""

    client: TrioPtyClient
    session_id: str
    owner: str
    read_only: bool
    keys: DetachMatcher
    modes: ModeTracker = attrs.Factory(ModeTracker)
    ended: ExitEvent | None = None  # how the session ended, when it did
    signalled: str | None = None  # the signal that made us detach, if one did

    async def run(self) -> None:
        """Pump keystrokes in and output out until detach, exit or a terminating signal;
        then turn off what the program left on."""
        stdin, stdout = _AsyncFd(0), _AsyncFd(1)
        driver = not self.read_only
        # A terminal gets the state drawn; a file or a pipe, the output as it was.
        redraw = os.isatty(1)
        params = AttachParams(id=self.session_id, owner=self.owner, driver=driver, redraw=redraw)
        try:
            if driver:  # first, so that the state is drawn at your window's size
                await self._resize()
            async with (
                self.client.attach(params) as attachment,
                trio.open_nursery() as nursery,
            ):

                async def pump_output() -> None:
                    async for chunk in attachment:
                        self.modes.feed(chunk.data)
                        await stdout.send_all(chunk.data)
                    self.ended = attachment.exit_event
                    nursery.cancel_scope.cancel()

                async def pump_input() -> None:
                    if await self._pump_input(stdin):
                        nursery.cancel_scope.cancel()

                async def follow_window() -> None:
                    with trio.open_signal_receiver(signal.SIGWINCH) as winches:
                        async for _ in winches:
                            await self._resize()

                async def stop_on_signal() -> None:
                    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
                        async for signum in signals:
                            self.signalled = signal.Signals(signum).name
                            nursery.cancel_scope.cancel()

                nursery.start_soon(pump_output)
                nursery.start_soon(pump_input)
                if not self.read_only:
                    nursery.start_soon(follow_window)
                nursery.start_soon(stop_on_signal)
        finally:
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(_RESTORE_TIMEOUT),
                contextlib.suppress(OSError, trio.BrokenResourceError),
            ):
                if os.isatty(1):  # a file or a pipe gets the output as it was, no more
                    await stdout.send_all(self.modes.restore())
            await stdin.aclose()
            await stdout.aclose()

    async def _pump_input(self, stdin: _AsyncFd) -> bool:
        """Send keystrokes until the detach keys (True) or the end of piped input (False:
        the output keeps showing until the session ends)."""
        while True:
            data: bytes | None = None
            if self.keys.waiting:
                # Only the read is bounded: a write cancelled half-way would lose keys.
                with trio.move_on_after(DETACH_DELAY):
                    data = await stdin.receive_some(_INPUT_CHUNK)
            else:
                data = await stdin.receive_some(_INPUT_CHUNK)
            if data is None:
                send, detach = self.keys.expire()
            elif not data:
                return False
            else:
                send, detach = self.keys.feed(data)
            await self._send(send)
            if detach:
                return True

    async def _send(self, data: bytes) -> None:
        if not data or self.read_only:
            return
        try:
            text = keystrokes_to_text(data)
            await self.client.request(
                WriteParams(id=self.session_id, data=text, owner=self.owner, escapes=True)
            )
        except RpcError as exc:
            if exc.kind != "not_running":  # it ended: the exit notification follows
                raise

    async def _resize(self) -> None:
        size = _window_size()
        if size is None:
            return
        try:
            await self.client.request(
                ResizeParams(id=self.session_id, owner=self.owner, rows=size[0], cols=size[1])
            )
        except RpcError as exc:
            if exc.kind not in ("not_running", "invalid_input"):
                raise


async def attach(client: TrioPtyClient, args: argparse.Namespace) -> int:
    keys = parse_keys(args.detach_key)
    name = " ".join(args.detach_key.split())
    interactive = os.isatty(0)
    attached = _Attached(
        client, args.id, args.owner, read_only=args.read_only, keys=DetachMatcher(keys)
    )
    if interactive:
        how = "watching" if args.read_only else "attached to"
        print(f"[{how} {args.id}; detach with {name}]\r", file=sys.stderr, flush=True)
    with terminal_mode(raw=interactive):
        await attached.run()
    # The message starts a line of its own (where the program's cursor was left, on the
    # screen you are back on).
    newline = "" if attached.modes.at_line_start else "\n"
    ended = attached.ended
    if ended is not None:
        if ended.exit_signal is not None:
            how = f"exited on signal {ended.exit_signal}"
        else:
            how = f"exited with code {ended.exit_code}"
        print(f"{newline}[{args.id} {how}]", file=sys.stderr)
    elif attached.signalled is not None:
        print(f"{newline}[detached from {args.id} ({attached.signalled})]", file=sys.stderr)
    else:
        print(f"{newline}[detached from {args.id}]", file=sys.stderr)
    if args.json:
        print_json(ended if ended is not None else DetachResult(id=args.id, detached=True))
    if ended is None:
        return EXIT_OK
    # The session's end as a shell reports a command's: its code, or 128 + the signal.
    if ended.exit_signal is not None:
        return 128 + ended.exit_signal
    return ended.exit_code if ended.exit_code is not None else EXIT_OK
