"""Terminal emulators for screen snapshots, side by side: speed and the cases that matter.

Not a scenario of the runner: the candidates other than pyavt are not dependencies. Install
them in a scratch virtualenv with trio-pty's own dependencies and run, from the repository:

    python -m venv /tmp/emu && /tmp/emu/bin/pip install pyavt pyte vt100wasm attrs cattrs \\
        google-re2 trio trio-websocket h11
    PYTHONPATH=. /tmp/emu/bin/python -m benchmarks.emulators

Candidates that do not import are reported as such. The results are in docs/output.md.
"""

from __future__ import annotations

import codecs
import importlib
import statistics
import time
from collections.abc import Callable

from .reading import log_text
from .screen import top_text, vim_text

ROWS, COLS = 24, 80
CHUNK = 4096

# (name, bytes fed, what a terminal shows on the first row and where its cursor is)
CASES: list[tuple[str, bytes, str, tuple[int, int] | None]] = [
    ("vim 9's CSI > 4;2 m and CSI ? 4 m", b"\x1b[>4;2m\x1b[?4mhello", "hello", (0, 5)),
    (
        "alternate screen, left",
        b"primary\r\n\x1b[?1049h\x1b[H\x1b[2Jfull screen\x1b[?1049l",
        "primary",
        None,
    ),
    ("REP (CSI b)", b"a\x1b[3bX", "aaaaX", (0, 5)),
    ("ZWJ emoji kept whole", "👨\u200d👩\u200d👧|".encode(), "👨\u200d👩\u200d👧|", None),
    ("wide characters", "日本語|".encode(), "日本語|", (0, 7)),
]

Screen = Callable[[bytes, int], tuple[list[str], tuple[int, int] | None]]


def _avt() -> Screen:
    avt = importlib.import_module("avt")

    def feed(data: bytes, chunk: int) -> tuple[list[str], tuple[int, int] | None]:
        vt = avt.Vt(COLS, ROWS, scrollback_limit=0)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        for start in range(0, len(data), chunk):
            vt.feed_str(decoder.decode(data[start : start + chunk]))
        return [line.text.rstrip(" ") for line in vt.view()], (vt.cursor.row, vt.cursor.col)

    return feed


def _pyte() -> Screen:
    pyte = importlib.import_module("pyte")

    def feed(data: bytes, chunk: int) -> tuple[list[str], tuple[int, int] | None]:
        screen = pyte.Screen(COLS, ROWS)
        stream = pyte.ByteStream(screen)
        for start in range(0, len(data), chunk):
            stream.feed(data[start : start + chunk])
        lines = [line.rstrip(" ") for line in screen.display]
        return lines, (screen.cursor.y, screen.cursor.x)

    return feed


def _vt100wasm() -> Screen:
    vt100 = importlib.import_module("vt100wasm")

    def feed(data: bytes, chunk: int) -> tuple[list[str], tuple[int, int] | None]:
        screen = vt100.Screen(ROWS, COLS)
        for start in range(0, len(data), chunk):
            screen.process(data[start : start + chunk])
        return screen.contents().split("\n"), None  # the binding does not expose the cursor

    return feed


CANDIDATES: dict[str, Callable[[], Screen]] = {
    "pyavt (asciinema avt)": _avt,
    "vt100wasm (Rust vt100 in wasmtime)": _vt100wasm,
    "pyte": _pyte,
}


def main() -> None:
    size = 1_000_000
    loads = {"log": log_text(size)[:size], "top": top_text(size)[:size], "vim": vim_text(size)}
    for name, make in CANDIDATES.items():
        try:
            feed = make()
        except ImportError as exc:
            print(f"{name}: not importable ({exc})")
            continue
        print(f"== {name}")
        for case, data, row, cursor in CASES:
            try:
                lines, at = feed(data, CHUNK)
            except Exception as exc:
                print(f"  {case}: crashed ({type(exc).__name__}: {exc})")
                continue
            good = lines[0] == row and (cursor is None or at is None or at == cursor)
            print(f"  {case}: {'ok' if good else 'WRONG'} ({lines[0]!r}, cursor {at})")
        rounds = 1 if name == "pyte" else 5
        for load, data in loads.items():
            times: list[float] = []
            for _ in range(rounds):
                started = time.perf_counter()
                feed(data, CHUNK)
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            print(
                f"  1 MB of {load} in 4 KiB feeds: {median * 1000:.1f} ms ({1 / median:.0f} MB/s)"
            )


if __name__ == "__main__":
    main()
