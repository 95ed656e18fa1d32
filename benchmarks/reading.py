"""Scenario 4: reading a full 1 MB buffer: a 500-line page, and pattern searches (RE2), with
Python's `re` over the same lines for contrast, pathological pattern included."""

from __future__ import annotations

import cProfile
import os
import pstats
import random
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

import re2

from trio_pty import Limits
from trio_pty.output.buffer import OutputBuffer
from trio_pty.output.search import compile_pattern

from . import stats
from .harness import Context, Result

NAME = "reading"
TITLE = "Reading and search"
CHUNK = 4096  # what the reader typically gets from the PTY per read

# The search suite: (name, buffer, pattern, ignore_case). Each matches nothing or little,
# so each scans the whole buffer.
SEARCHES: list[tuple[str, str, str, bool]] = [
    ("literal", "log", "NO SUCH TEXT 4242", False),
    ("alternation", "log", "segfault|panicked|out of memory|deadlock", False),
    ("classes", "log", r"status=5\d\d .*took=\d{4,}ms", False),
    ("anchors", "log", r"^\d{4}-\d\d-\d\dT\S+ ERROR .*$", False),
    ("\\b", "log", r"\bworker-9\b", False),
    ("case-insensitive", "log", "connection REFUSED", True),
    ("Unicode classes", "log", r"\p{Greek}+\s\p{Lu}", False),
    ("(a+)+$ on log lines", "log", r"(a+)+$", False),
    ("(a+)+$ on lines of a's", "aaa", r"(a+)+$", False),
    # DFA-hostile: RE2's DFA explodes on random a/b text and it falls back to its NFA.
    ("hostile a[ab]{20}c on random a/b lines", "ab", r"a[ab]{20}c", False),
]
RG_ROUNDS = 3  # ripgrep takes ~1 s on the hostile pattern: the first rounds only (quick: 1)

METHOD = """\
Buffers are filled directly through `trio_pty.output.buffer.OutputBuffer` (the session's
buffer, default limits: 1 MB ring) with 1.25 MB in 4 KiB chunks, so the ring is full and has
rotated: *log* is realistic terminal output (timestamped log lines, coloured test results,
`\\r` progress bars, UTF-8); *aaa* is 1 MB of lines of 998 `a`s and a `!`; *ab* is 1 MB of
random `a`/`b` lines, on which `a[ab]{20}c` makes RE2's DFA blow up (RE2 stays linear but
falls back to its slower NFA; the session then searches in 64 KiB slices with checkpoints in
between and stops after `max_search_ms`, so the event loop is never held that long: see
docs/output.md). **Cold** means the
first read of a freshly filled buffer (it pays for decoding, escape stripping and `\\r`
handling of everything it touches); **warm** repeats it (the clean text is cached). A search
is `OutputBuffer.read(first_line, 2000, pattern)` including the pattern's compilation, as
`manager.read(pattern=...)` does; the patterns match nothing or little, so each scans the
whole buffer. The anchors, in the same run, interleaved: **RE2 scan** is RE2 itself (the same
binding) compiled once with `(?m)` and run over the buffer's clean text as one UTF-8 string
(`finditer`, every match): the floor for any RE2 search of that text. **ripgrep** (`rg -c`,
over the same clean text in a file in /tmp, one process per search, so a few ms of its
startup are included; first {RG_ROUNDS} rounds only; skipped with a note when `rg` is not
installed). Python's `re` runs the same pattern over the same clean lines (already decoded,
so it gets the warm case for free), line by line, where it can compile it (it has no
`\\p{...}`); the pathological pattern runs in a subprocess killed after a timeout,
reported as "> timeout". The goal is judged on **warm** against the RE2 scan (both have
the clean text in hand); cold adds decoding the raw bytes.
""".replace("{RG_ROUNDS}", str(RG_ROUNDS))


def _params(ctx: Context) -> dict[str, Any]:
    return {
        "rounds": ctx.pick(quick=3, full=25),
        "rg_rounds": ctx.pick(quick=1, full=RG_ROUNDS),
        "fill_bytes": 1_250_000,
        "re_timeout_s": ctx.pick(quick=2.0, full=10.0),
    }


def log_text(size: int, seed: int = 4) -> bytes:
    """Realistic terminal output, about `size` bytes."""
    rng = random.Random(seed)
    parts: list[bytes] = []
    total = 0
    number = 0
    while total < size:
        number += 1
        roll = rng.random()
        stamp = (
            f"2025-03-{number % 28 + 1:02}T{number % 24:02}:{number % 60:02}:{rng.randrange(60):02}"
        )
        if roll < 0.70:
            status = rng.choice([200, 200, 200, 201, 204, 304, 404, 500])
            line = (
                f"{stamp}.{rng.randrange(1000):03}Z INFO  worker-{rng.randrange(8)} GET "
                f"/api/v1/items/{rng.randrange(10**6)} status={status} took={rng.randrange(900)}ms"
            )
        elif roll < 0.85:
            mark = "\x1b[32m✓\x1b[0m" if rng.random() < 0.9 else "\x1b[31m✗\x1b[0m"
            line = (
                f"{mark} tests/test_módulo_{number % 97}.py::case_{number} ({rng.randrange(99)} ms)"
            )
        elif roll < 0.95:
            line = "".join(f"downloading {p}%\r" for p in range(0, 100, 20)) + "done"
        else:
            line = f"\x1b[33mWARNING\x1b[0m retrying connection to 10.0.{number % 256}.7\x1b[K"
        data = (line + "\r\n").encode()
        parts.append(data)
        total += len(data)
    return b"".join(parts)


def aaa_text(size: int) -> bytes:
    line = b"a" * 998 + b"!\r\n"
    return line * (size // len(line) + 1)


def ab_text(size: int, seed: int = 7) -> bytes:
    """Random a/b lines: the text that makes `a[ab]{20}c` blow up RE2's DFA."""
    rng = random.Random(seed)
    lines = [
        "".join(rng.choice("ab") for _ in range(79)).encode() + b"\r\n"
        for _ in range(size // 81 + 1)
    ]
    return b"".join(lines)


def filled(content: bytes) -> OutputBuffer:
    limits = Limits()
    buffer = OutputBuffer(
        limits.buffer_size,
        max_line_length=limits.max_line_length,
        max_escape_length=limits.max_escape_length,
    )
    for start in range(0, len(content), CHUNK):
        buffer.append(content[start : start + CHUNK])
    return buffer


def _timed(function: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def clean_lines(buffer: OutputBuffer) -> list[str]:
    lines: list[str] = []
    offset = buffer.first_line
    while True:
        page = buffer.read(offset, 2000)
        lines.extend(line.text for line in page.lines)
        if not page.has_more:
            return lines
        offset = page.next_offset


def python_re_in_subprocess(pattern: str, lines: list[str], timeout: float) -> float | None:
    """Seconds Python's re takes over `lines`, or None when it did not finish in time."""
    program = textwrap.dedent(
        """
        import re, sys, time
        lines = open(sys.argv[1], encoding="utf-8").read().split("\\n")
        rx = re.compile(sys.argv[2])
        started = time.perf_counter()
        found = [i for i, line in enumerate(lines) if rx.search(line)]
        print(time.perf_counter() - started)
        """
    )
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt") as handle:
        handle.write("\n".join(lines))
        handle.flush()
        try:
            done = subprocess.run(
                [sys.executable, "-c", program, handle.name, pattern],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=True,
            )
        except subprocess.TimeoutExpired:  # subprocess.run has killed and reaped it
            return None
    return float(done.stdout.strip())


def re2_scan(text: str, pattern: str, ignore_case: bool) -> int:
    """RE2 itself over the whole text at once: compile with (?m), count every match."""
    options = re2.Options()
    options.log_errors = False  # the hostile pattern logs "DFA out of memory" every time
    options.case_sensitive = not ignore_case
    rx = re2.compile("(?m)" + pattern, options)
    return sum(1 for _ in rx.finditer(text))


def rg_count(rg: str, path: str, pattern: str, ignore_case: bool) -> str:
    """ripgrep counting matching lines (exit status 1 means none: fine)."""
    command = [rg, "--no-config", "-c", *(["-i"] if ignore_case else []), "-e", pattern, path]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode > 1:
        raise RuntimeError(f"rg failed on {pattern!r}: {done.stderr.strip()}")
    return done.stdout


def _text_file(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, f"{name}.txt")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def _python_re(pattern: str, ignore_case: bool) -> re.Pattern[str] | None:
    """Python's re for the same pattern, or None where it has no such syntax (\\p{...})."""
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error:
        return None


def _search_goal(
    result: Result,
    samples: dict[str, dict[str, list[float]]],
    re_seconds: float | None,
    timeout: float,
) -> None:
    """Every pattern of the suite, warm, at most 1.2x RE2's own scan and faster than rg."""
    medians = {
        group[8:]: {name: stats.summarize(values)["median"] for name, values in by.items()}
        for group, by in samples.items()
        if group.startswith("search: ")
    }
    ratios = {name: stats.ratio(m["trio-pty warm"], m["RE2 scan"]) for name, m in medians.items()}
    result.data["search_ratio_to_re2"] = ratios
    worst = max(ratios, key=lambda name: ratios[name])
    has_rg = all("ripgrep" in m for m in medians.values())
    slower_than_rg = [
        n for n, m in medians.items() if has_rg and m["trio-pty warm"] >= m["ripgrep"]
    ]
    rg_text = (
        "; ripgrep slower on every pattern"
        if has_rg and not slower_than_rg
        else (
            f"; NOT faster than ripgrep on: {', '.join(slower_than_rg)}"
            if has_rg
            else "; ripgrep not installed (not compared)"
        )
    )
    hostile = next(m for n, m in medians.items() if n.startswith("hostile"))
    result.goal(
        "Every pattern of the suite at most 1.2x RE2's own whole-buffer scan (warm), and "
        "faster than ripgrep on the same text",
        f"worst: {worst} {ratios[worst]:.2f}x ({medians[worst]['trio-pty warm'] * 1000:.2f} ms "
        f"vs {medians[worst]['RE2 scan'] * 1000:.2f} ms){rg_text}; hostile a[ab]{{20}}c: "
        f"{hostile['trio-pty warm'] * 1000:.1f} ms warm, {hostile['trio-pty cold'] * 1000:.1f} "
        f"ms cold, RE2 scan {hostile['RE2 scan'] * 1000:.1f} ms"
        + (f", ripgrep {hostile['ripgrep'] * 1000:.0f} ms" if "ripgrep" in hostile else "")
        + "; Python re on (a+)+$: "
        + (f"{re_seconds:.2f} s" if re_seconds is not None else f"> {timeout:g} s"),
        ratios[worst] <= 1.2 and has_rg and not slower_than_rg,
        key="search",
        subject=f"{ratios[worst]:.2f}x RE2 ({worst})",
        baseline="RE2's own scan",
        ratio=ratios[worst],
    )


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    params = result.params
    contents = {
        "log": log_text(params["fill_bytes"]),
        "aaa": aaa_text(params["fill_bytes"]),
        "ab": ab_text(params["fill_bytes"]),
    }
    samples: dict[str, dict[str, list[float]]] = {}
    texts: dict[str, str] = {}
    files: dict[str, str] = {}
    rg = shutil.which("rg")
    if rg is None:
        result.notes.append(
            "ripgrep (`rg`) is not installed here: its column is skipped (Debian: ripgrep)."
        )
    scratch = tempfile.mkdtemp(prefix="ptybench-rg-")

    def record(group: str, variant: str, seconds: float) -> None:
        samples.setdefault(group, {}).setdefault(variant, []).append(seconds)

    for number in range(params["rounds"]):
        ctx.progress(f"round {number + 1}/{params['rounds']}")
        for where in ("first", "last"):
            buffer = filled(contents["log"])
            start = buffer.first_line if where == "first" else buffer.total_lines - 500
            for variant in ("cold", "warm"):
                seconds, page = _timed(lambda b=buffer, s=start: b.read(s, 500))
                assert len(page.lines) == 500
                record(f"500-line page, {where} 500 lines", variant, seconds)
        for index, (name, which, pattern, ignore_case) in enumerate(SEARCHES):
            buffer = filled(contents[which])

            def search(b: OutputBuffer = buffer, p: str = pattern, i: bool = ignore_case) -> Any:
                compiled = compile_pattern(p, ignore_case=i, max_length=500)
                return b.read(b.first_line, 2000, compiled)

            # trio-pty cold first (it fills the clean-text cache), then the rest in a
            # rotating order.
            seconds, _ = _timed(search)
            record(f"search: {name}", "trio-pty cold", seconds)
            text = texts.setdefault(which, "\n".join(clean_lines(buffer)))
            others: dict[str, Any] = {
                "trio-pty warm": search,
                "RE2 scan": lambda t=text, p=pattern, i=ignore_case: re2_scan(t, p, i),
            }
            if rg is not None and number < params["rg_rounds"]:
                path = files.setdefault(which, _text_file(scratch, which, text))
                others["ripgrep"] = lambda f=path, p=pattern, i=ignore_case: rg_count(rg, f, p, i)
            if which == "log" and (rx := _python_re(pattern, ignore_case)) is not None:
                lines = text.split("\n")
                others["Python re"] = lambda rx=rx, lines=lines: [x for x in lines if rx.search(x)]
            names = list(others)
            shift = (number + index) % len(names)
            for variant in names[shift:] + names[:shift]:
                seconds, _ = _timed(others[variant])
                record(f"search: {name}", variant, seconds)
    # Python's re on the pathological case, once, bounded.
    ctx.progress("Python re on the pathological pattern (bounded)")
    buffer = filled(contents["aaa"])
    timeout = params["re_timeout_s"]
    re_seconds = python_re_in_subprocess(r"(a+)+$", clean_lines(buffer), timeout)
    pathological = "search: (a+)+$ on lines of a's"
    result.data["python_re_pathological_s"] = re_seconds
    result.data["python_re_timeout_s"] = timeout
    if re_seconds is not None:
        record(pathological, "Python re", re_seconds)
    else:
        result.notes.append(
            f"Python `re` with `(a+)+$` over the lines of a's did not finish within "
            f"{timeout:g} s (killed): > {timeout:g} s, against RE2's milliseconds."
        )
    shutil.rmtree(scratch, ignore_errors=True)
    for group, by_variant in samples.items():
        baseline = "RE2 scan" if "RE2 scan" in by_variant else None
        in_ms = {name: [v * 1000 for v in values] for name, values in by_variant.items()}
        result.table(group, "ms", in_ms, baseline=baseline)
        if group == pathological and re_seconds is None:
            result.rows.append(
                {
                    "group": group,
                    "variant": "Python re",
                    "unit": "ms",
                    "better": "lower",
                    "median": None,
                    "min": None,
                    "max": None,
                    "n": 1,
                    "baseline": None,
                    "ratio": None,
                    "display": f"> {timeout * 1000:.0f} (killed)",
                }
            )
    _search_goal(result, samples, re_seconds, timeout)
    result.data["buffer"] = {
        "log_lines_retained": filled(contents["log"]).total_lines,
        "bytes_written": len(contents["log"]),
    }
    return result


def profile(ctx: Context, n: int, out: str) -> None:
    """`python -m benchmarks --profile reading`: the suite's closest case, `(a+)+$` over the
    lines of a's (it matches none: each line ends in "!"), searched warm `n` times
    (`--sessions`, default 256) under cProfile. Prints the median warm search and RE2's own
    scan of the same text, interleaved outside the profiler, then where the search's time
    went (RE2's share is `re2._re2.Match`)."""
    pattern = r"(a+)+$"
    buffer = filled(aaa_text(1_250_000))

    def search() -> Any:
        compiled = compile_pattern(pattern, ignore_case=False, max_length=500)
        return buffer.read(buffer.first_line, 2000, compiled)

    search()  # cold: fills the clean-text cache
    text = "\n".join(clean_lines(buffer))
    warm, scan = [], []
    for _ in range(n):
        warm.append(_timed(search)[0] * 1000)
        scan.append(_timed(lambda: re2_scan(text, pattern, False))[0] * 1000)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(n):
        search()
    profiler.disable()
    profiler.dump_stats(out)
    median_warm, median_scan = stats.summarize(warm)["median"], stats.summarize(scan)["median"]
    print(
        f"{n} warm searches of {pattern} over 1 MB of a's: median {median_warm:.3f} ms, RE2's "
        f"own scan {median_scan:.3f} ms ({median_warm / median_scan:.2f}x); profile in {out}"
    )
    pstats.Stats(out).sort_stats("tottime").print_stats(15)
