"""The scenarios (`SCENARIOS`), what every scenario gets (a Context with the mode and a
progress line) and what it gives back (a Result: figures, goals, correctness checks)."""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from . import stats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> module, in running order (and in docs/benchmarks.md's order).
SCENARIOS: dict[str, str] = {
    "teardown": "benchmarks.teardown",
    "spawn": "benchmarks.spawn_latency",
    "throughput": "benchmarks.throughput",
    "reading": "benchmarks.reading",
    "screen": "benchmarks.screen",
    "rpc": "benchmarks.rpc",
    "shell": "benchmarks.shell",
    "mcp": "benchmarks.mcp",
    "mcp_http": "benchmarks.mcp_http",
    "memory": "benchmarks.memory",
    "cli": "benchmarks.cli",
}


def module(name: str) -> Any:
    """A scenario's module (imported on demand: each runs in its own child process)."""
    return importlib.import_module(SCENARIOS[name])


class Progress:
    """One line per scenario on stderr, rewritten in place on a terminal; elsewhere (CI
    logs) a line at most every few seconds, and the final one."""

    def __init__(self, name: str, *, stream: Any = None, every: float = 5.0) -> None:
        self._name = name
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._every = every
        self._last = 0.0
        self._started = time.monotonic()

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        line = f"[{self._name} {now - self._started:5.1f}s] {message}"
        if self._tty:
            self._stream.write("\r\x1b[K" + line[:160])
            self._stream.flush()
        elif now - self._last >= self._every:
            self._last = now
            print(line, file=self._stream, flush=True)

    def done(self, message: str) -> None:
        elapsed = time.monotonic() - self._started
        line = f"[{self._name} {elapsed:5.1f}s] {message}"
        if self._tty:
            self._stream.write("\r\x1b[K")
        print(line, file=self._stream, flush=True)


@attrs.define
class Context:
    quick: bool
    tag: str
    """Value of procs.TAG in every process this scenario starts (and in this process)."""
    progress: Progress

    def pick(self, *, quick: Any, full: Any) -> Any:
        return quick if self.quick else full


@attrs.define
class Result:
    """Figures, goals and checks of one scenario, as they go into latest.json."""

    name: str
    title: str
    status: str = "ok"
    params: dict[str, Any] = attrs.Factory(dict)
    rows: list[dict[str, Any]] = attrs.Factory(list)
    goals: list[dict[str, Any]] = attrs.Factory(list)
    checks: list[dict[str, Any]] = attrs.Factory(list)
    notes: list[str] = attrs.Factory(list)
    data: dict[str, Any] = attrs.Factory(dict)

    def table(
        self,
        group: str,
        unit: str,
        samples: Mapping[str, Sequence[float]],
        *,
        baseline: str | None = None,
        better: str = "lower",
    ) -> dict[str, dict[str, float]]:
        """Add one row per variant (median, min, max, n; ratio of medians to `baseline`).
        Returns the summaries by variant."""
        summaries = {name: stats.summarize(values) for name, values in samples.items()}
        base = summaries[baseline]["median"] if baseline is not None else math.nan
        for name, summary in summaries.items():
            self.rows.append(
                {
                    "group": group,
                    "variant": name,
                    "unit": unit,
                    "better": better,
                    **summary,
                    "baseline": baseline,
                    "ratio": stats.ratio(summary["median"], base) if baseline else None,
                }
            )
        return summaries

    def goal(
        self,
        goal: str,
        measured: str,
        met: bool | None,
        *,
        key: str = "",
        subject: str = "",
        baseline: str = "",
        ratio: float | None = None,
    ) -> None:
        """A goal of the issue and whether this run met it (None: not evaluated)."""
        self.goals.append(
            {
                "key": key,
                "goal": goal,
                "measured": measured,
                "met": met,
                "subject": subject,
                "baseline": baseline,
                "ratio": ratio,
            }
        )

    def check(self, check: str, ok: bool, detail: str = "") -> None:
        """A correctness check: a failed one makes the run exit non-zero."""
        self.checks.append({"check": check, "ok": ok, "detail": detail})

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)
