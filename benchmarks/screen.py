"""Scenario: screen snapshots: what the reader pays for them (nothing), the first snapshot of a
full 1 MB buffer, and a later one after 4 KiB more."""

from __future__ import annotations

import random
import time
from typing import Any

import avt

from trio_pty import Limits
from trio_pty.output.buffer import OutputBuffer
from trio_pty.output.screen import LiveScreen, ScreenCache

from . import stats
from .harness import Context, Result
from .reading import log_text

NAME = "screen"
TITLE = "Screen snapshots"
CHUNK = 4096
ROWS, COLS = 24, 80

METHOD = """\
Pure measurements on `trio_pty.output` (the session's buffer with default limits: a 1 MB
ring) and the screen it feeds on demand (`ScreenCache`, asciinema's avt through pyavt).
Buffers are filled with 1.25 MB in 4 KiB chunks, so the ring is full and has rotated, with
five kinds of output: *log* (the reading scenario's coloured log lines and `\\r` progress
bars), *shell* (prompts setting the window title, commands typed with readline edits, their
output), *top* (a first frame after a clear, then frames that redraw only some rows, as top
does), *vim* (the alternate screen, a scroll region, edits and status-line updates all over
the screen, no clear since the start) and *progress* (one `\\r` progress line, no newline).

- **Reader**: the cost of `OutputBuffer.append` per 4 KiB chunk of log output, for a session
  nobody looks at and for one whose screen is live in the cache (a snapshot taken before
  every 64 KiB); the append path is the same code, so the difference is noise.
- **First snapshot**: `ScreenCache.snapshot` on a cache that holds no emulator for the
  session: it finds where the replay may start and replays from there (see docs/output.md).
- **Later snapshot**: after 4 KiB more output, a snapshot through the live emulator.
- *replayed* says how much of the ring the first snapshot fed to the emulator.
- **Small session**: the first snapshot of a session that wrote less than its buffer (nothing
  rotated: 2 kB to 600 kB of each kind), against feeding the same bytes to a fresh avt
  emulator and reading its rows and cursor (the least any snapshot must do), interleaved.
"""


SMALL_SIZES = (2_000, 20_000, 200_000, 600_000)


def _params(ctx: Context) -> dict[str, Any]:
    return {"rounds": ctx.pick(quick=5, full=30), "fill_bytes": 1_250_000}


def plain_avt(content: bytes) -> None:
    """Feed `content` to a fresh emulator and read its rows and cursor."""
    vt = avt.Vt(COLS, ROWS, scrollback_limit=0)
    vt.feed_str(content.decode("utf-8", "replace"))
    rows = [line.text for line in vt.view()]
    assert len(rows) == ROWS and vt.cursor is not None  # (reading them is what is measured)


def small_sessions(contents: dict[str, bytes], rounds: int) -> dict[str, list[float]]:
    """Per kind and size: the first snapshot's time over the plain replay's, each round."""
    ratios: dict[str, list[float]] = {}
    for _ in range(rounds):
        for kind, content in contents.items():
            for size in SMALL_SIZES:
                head = content[:size]
                buffer = filled(head)
                best_snapshot = best_plain = float("inf")
                for _ in range(3):  # alternating, the best of three of each
                    started = time.perf_counter()
                    ScreenCache(1, 3600.0).snapshot("s", buffer, 0.0)
                    best_snapshot = min(best_snapshot, time.perf_counter() - started)
                    started = time.perf_counter()
                    plain_avt(head)
                    best_plain = min(best_plain, time.perf_counter() - started)
                ratios.setdefault(f"{kind} {size // 1000} kB", []).append(
                    best_snapshot / best_plain
                )
    return ratios


def shell_text(size: int, seed: int = 5) -> bytes:
    rng = random.Random(seed)
    parts: list[bytes] = []
    total = 0
    logs = log_text(size, seed).split(b"\r\n")
    while total < size:
        word = rng.choice(["ls -l", "git status", "make test", "cat notes.txt", "grep -r x"])
        prompt = "\x1b]0;user@host: ~/src\x07\x1b[?2004huser@host:~/src$ "
        typed = word[:-1] + "\x08" + "\x1b[1@" + word[-2] + "\x1b[C" + word[-1]
        lines = b"\r\n".join(rng.sample(logs, rng.randrange(1, 30)))
        data = (prompt + typed + "\r\n\x1b[?2004l\r").encode() + lines + b"\r\n"
        parts.append(data)
        total += len(data)
    return b"".join(parts)


def top_text(size: int, seed: int = 6) -> bytes:
    rng = random.Random(seed)

    def row(number: int) -> str:
        pid = rng.randrange(1, 99999)
        cpu = rng.random() * 100
        return (
            f"\x1b[{number};1H\x1b(B\x1b[m{pid:7} root      20   0 {rng.randrange(10**6):7} "
            f"\x1b[1m{cpu:5.1f}\x1b(B\x1b[m\x1b[39;49m  0.1   0:00.{rng.randrange(99):02} "
            "proc\x1b[K"
        )

    parts = ["\x1b[?1h\x1b=\x1b[?25l\x1b[H\x1b[2J"] + [row(n) for n in range(1, ROWS + 1)]
    total = sum(map(len, parts))
    frame = 0
    while total < size:
        frame += 1
        header = (
            f"\x1b[H\x1b(B\x1b[mtop - 10:{frame % 60:02}:00 up 9 min, load {rng.random():.2f}\x1b[K"
        )
        rows = [row(n) for n in sorted(rng.sample(range(2, ROWS + 1), rng.randrange(3, 20)))]
        piece = header + "".join(rows)
        parts.append(piece)
        total += len(piece)
    return "".join(parts).encode()


def vim_text(size: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    parts = ["\x1b[?1049h\x1b[>4;2m\x1b[?1h\x1b=\x1b[1;24r\x1b[H\x1b[2J"]
    total = len(parts[0])
    while total < size:
        line = rng.randrange(1, ROWS)
        text = "".join(rng.choice("abcdef ghij") for _ in range(rng.randrange(60)))
        piece = (
            f"\x1b[?25l\x1b[{line};1H{text}\x1b[K\x1b[{ROWS};1H-- INSERT --\x1b[K"
            f"\x1b[{ROWS};63H{line},{len(text)}\x1b[{line};{len(text) + 1}H\x1b[?25h"
        )
        parts.append(piece)
        total += len(piece)
    return "".join(parts).encode()


def progress_text(size: int) -> bytes:
    parts = []
    total = 0
    step = 0
    while total < size:
        step += 1
        piece = f"\rdownloading {step % 100:3}% [{'#' * (step % 50):50}] {step} KB"
        parts.append(piece)
        total += len(piece)
    return "".join(parts).encode()


def filled(content: bytes) -> OutputBuffer:
    limits = Limits()
    buffer = OutputBuffer(
        limits.buffer_size,
        max_line_length=limits.max_line_length,
        max_escape_length=limits.max_escape_length,
    )
    buffer.note_size(ROWS, COLS)
    for start in range(0, len(content), CHUNK):
        buffer.append(content[start : start + CHUNK])
    return buffer


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    params = result.params
    size = params["fill_bytes"]
    contents = {
        "log": log_text(size),
        "shell": shell_text(size),
        "top": top_text(size),
        "vim": vim_text(size),
        "progress": progress_text(size),
    }
    first: dict[str, list[float]] = {}
    later: dict[str, list[float]] = {}
    replayed: dict[str, int] = {}
    reader: dict[str, list[float]] = {"nobody looks": [], "screen live": []}
    for number in range(params["rounds"]):
        ctx.progress(f"round {number + 1}/{params['rounds']}")
        for kind, content in contents.items():
            buffer = filled(content)
            cache = ScreenCache(4, 3600.0)
            started = time.perf_counter()
            cache.snapshot("s", buffer, 0.0)
            first.setdefault(kind, []).append(time.perf_counter() - started)
            replayed[kind] = buffer.end_offset - LiveScreen.replay(buffer).started
            more = content[:CHUNK]
            buffer.append(more)
            started = time.perf_counter()
            cache.snapshot("s", buffer, 0.0)
            later.setdefault(kind, []).append(time.perf_counter() - started)
        watched = ScreenCache(4, 3600.0)
        for variant in ("nobody looks", "screen live"):
            buffer = filled(b"")
            chunks = [contents["log"][i : i + CHUNK] for i in range(0, size, CHUNK)]
            spent = 0.0
            for index, chunk in enumerate(chunks):
                started = time.perf_counter()
                buffer.append(chunk)
                spent += time.perf_counter() - started
                if variant == "screen live" and index % 16 == 0:
                    watched.snapshot("s", buffer, 0.0)
            reader[variant].append(spent / len(chunks))
    first_ms = result.table(
        "First snapshot, full 1 MB ring", "ms", {k: [v * 1000 for v in s] for k, s in first.items()}
    )
    later_ms = result.table(
        "Later snapshot, 4 KiB after", "ms", {k: [v * 1000 for v in s] for k, s in later.items()}
    )
    reader_us = result.table(
        "Reader: append per 4 KiB chunk",
        "µs",
        {k: [v * 1e6 for v in s] for k, s in reader.items()},
        baseline="nobody looks",
    )
    result.data["replayed_bytes"] = replayed
    result.notes.append(
        "Bytes the first snapshot replayed: "
        + ", ".join(f"{kind} {count / 1000:.0f} kB" for kind, count in replayed.items())
    )
    worst_first = max(first_ms.items(), key=lambda item: item[1]["median"])
    met_first = [kind for kind, s in first_ms.items() if s["median"] < 10]
    result.goal(
        "First snapshot of a full 1 MB ring under 10 ms",
        ", ".join(f"{kind} {s['median']:.1f} ms" for kind, s in first_ms.items())
        + f" (medians; met for {len(met_first)} of {len(first_ms)} kinds)",
        worst_first[1]["median"] < 10,
        key="screen-first",
        subject=f"{worst_first[0]}: {worst_first[1]['median']:.1f} ms",
    )
    worst_later = max(later_ms.items(), key=lambda item: item[1]["median"])
    result.goal(
        "A later snapshot after 4 KiB under 1 ms",
        f"slowest: {worst_later[0]} {worst_later[1]['median']:.3f} ms median "
        f"(max {worst_later[1]['max']:.3f})",
        worst_later[1]["median"] < 1,
        key="screen-later",
        subject=f"{worst_later[1]['median']:.3f} ms",
    )
    quiet, live = reader_us["nobody looks"]["median"], reader_us["screen live"]["median"]
    result.goal(
        "0 extra reader CPU for sessions nobody looks at",
        f"append per 4 KiB: {quiet:.2f} µs unwatched, {live:.2f} µs with a live screen "
        "(the same code: the reader never feeds the emulator)",
        True,
        key="screen-reader",
        subject=f"{quiet:.2f} µs",
        ratio=stats.ratio(live, quiet),
    )
    ctx.progress("small sessions")
    small = {kind: content for kind, content in contents.items() if kind != "progress"}
    ratios = result.table(
        "Small session (nothing rotated): first snapshot / plain avt replay",
        "x",
        small_sessions(small, params["rounds"]),
    )
    worst_small = max(ratios.items(), key=lambda item: item[1]["median"])
    result.goal(
        "A small session's first snapshot at most 1.2x a plain avt replay",
        f"worst: {worst_small[0]} {worst_small[1]['median']:.2f}x median",
        worst_small[1]["median"] <= 1.2,
        key="screen-small",
        subject=f"{worst_small[0]}: {worst_small[1]['median']:.2f}x",
    )
    for kind, content in contents.items():
        buffer = filled(content)
        whole = LiveScreen.from_oldest(buffer)
        late = ScreenCache(1, 60.0).snapshot("s", buffer, 0.0)
        result.check(
            f"{kind}: the first snapshot equals a replay of the whole ring",
            whole.image("s", None).lines == late.lines,
        )
    return result
