"""The audit log: one JSON object a line, of what was done to sessions and by whom.

Entries (docs/security.md lists their fields): `spawn` (the token's name, the owner, the
command, its arguments, workdir and the *names* of the environment it was given), `command`
(each command a shell session reports: its text, exit code, cwd, duration and whether `run`
sent it or it was typed), `write` (its size and source; never its content), `signal`,
`resize`, `kill` (with what the teardown left: the session's status and exit code),
`delete` and `drain`. Never the token, an environment value or a session's output.

Writing must never hold up a session: `emit` only puts the line in a bounded queue and
never waits, and one task (`run`, in the manager's root nursery) writes the queue to the
file in a worker thread. A full queue (a slow disk) or a failed write (ENOSPC, EIO) drops
the entry: `dropped` counts them, and one warning is logged for each burst of drops.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Final

import trio

from .logs import event

__all__ = ["DEFAULT_QUEUE", "Audit"]

log = logging.getLogger("trio_pty.audit")

#: Entries waiting for the disk before new ones are dropped.
DEFAULT_QUEUE: Final = 4096
#: Lines written to the file in one worker-thread call, at most.
_BATCH: Final = 256


class Audit:
    """An append-only JSON-lines file of audit entries (0600, created if missing), written
    from a bounded queue. `open_manager(audit=Audit(path))` runs its writer; one manager,
    once: when the writer has ended, every entry is a drop."""

    def __init__(self, path: str | os.PathLike[str], *, queue: int = DEFAULT_QUEUE) -> None:
        self.path = os.fspath(path)
        self.written = 0
        self.dropped = 0
        self._in_burst = False  # dropping since the last warning: no new warning yet
        self._send, self._receive = trio.open_memory_channel[bytes](queue)
        self._fd: int | None = None
        self._torn = False  # the last write stopped mid-line

    def open(self) -> None:
        """Open the file (O_APPEND: lines from several writers never interleave mid-line);
        OSError when it cannot be. A file that exists keeps its mode: say 0600 at creation."""
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def open_once(self) -> None:
        """Open and close the file: whether it can be (OSError says why not)."""
        self.open()
        self.close()

    def emit(self, name: str, **fields: Any) -> None:
        """Queue entry `name` with `fields`; never waits (a full queue drops it)."""
        entry = {"ts": round(time.time(), 6), "event": name, **fields}
        line = json.dumps(entry, default=str, separators=(",", ":")) + "\n"
        try:
            self._send.send_nowait(line.encode())
        except (trio.WouldBlock, trio.ClosedResourceError):
            self._drop(1, "the queue is full")

    async def run(self) -> None:
        """Write queued entries until cancelled, then what is still queued (bounded by the
        queue's size), and close the file."""
        if self._fd is None:
            self.open()
        batch: list[bytes] = []
        try:
            while True:
                batch.append(await self._receive.receive())
                self._take(batch, _BATCH)
                written = await trio.to_thread.run_sync(self._write, batch)
                self._count(batch, written)
                batch = []
        finally:
            # Cancelled (the manager closes): the batch in hand, if its thread never ran,
            # and what is still queued, written here: the last entries (kills) matter most.
            self._send.close()
            self._take(batch, None)
            if batch:
                self._count(batch, self._write(batch))
            self.close()

    def _take(self, batch: list[bytes], most: int | None) -> None:
        """Add queued entries to `batch`, up to `most` in all, without waiting."""
        while most is None or len(batch) < most:
            try:
                batch.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, lines: list[bytes]) -> tuple[int, str]:
        """Write whole lines (in a worker thread: touches no counter); how many were
        written, and why the rest were not. A line cut short by a full disk is ended by the
        next line written, so every line in the file that ends is one whole entry or a
        torn one, never two run together."""
        assert self._fd is not None
        for index, line in enumerate(lines):
            data = b"\n" + line if self._torn else line
            try:
                done = os.write(self._fd, data)
            except OSError as exc:
                return index, os.strerror(exc.errno) if exc.errno else str(exc)
            if done < len(data):
                self._torn = True
                return index, "short write"
            self._torn = False
        return len(lines), ""

    def _count(self, lines: list[bytes], outcome: tuple[int, str]) -> None:
        written, why = outcome
        self.written += written
        if written:
            self._in_burst = False
        if written < len(lines):
            self._drop(len(lines) - written, why)

    def _drop(self, count: int, why: str) -> None:
        self.dropped += count
        if not self._in_burst:
            self._in_burst = True
            log.warning(
                "audit log %s: entries dropped (%s); %d so far",
                self.path,
                why,
                self.dropped,
                extra=event("audit_dropped", path=self.path, reason=why, dropped=self.dropped),
            )
