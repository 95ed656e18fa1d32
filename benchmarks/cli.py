"""Scenario: what one command-line client call costs, against the floor any trio client
pays (importing trio and trio-websocket) and, when it is installed, tmux's own client.

Every call is a fresh process, timed from its start to its exit, against a real
`trio-pty serve --port 0` that is already running with one session.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio_pty

from . import procs, stats
from .harness import Context, Result

NAME = "cli"
TITLE = "Command-line client (trio-pty list, read)"
TIMEOUT = 30.0
FLOOR = "import trio, trio_websocket"
GOAL_RATIO = 1.5

METHOD = f"""\
A real `trio-pty serve --port 0` runs as a subprocess (`--no-ui --no-state-dir`), with one
session that printed `seq 1 100`. Each sample is one process, timed from its start to its
exit (`subprocess.run`): `trio-pty list` and `trio-pty read ID --tail 5` (the installed
console script: import, parse, connect over loopback with the token from the environment,
one request, print), against
`python3 -c "{FLOOR}"`, which every trio WebSocket client pays
before it does anything, and, when tmux is installed, `tmux list-sessions` against a tmux
server started for the run (the client of the tool people compare with). Variants
interleaved, medians compared. The goal: `trio-pty list` at most {GOAL_RATIO:g}x the floor.
Checks: every call exits 0 and `list` shows the session. trio_pty's modules are compiled to
bytecode first (`compileall`), as installing a wheel does and as trio's own are: with
PYTHONDONTWRITEBYTECODE set (some environments set it) an editable install would otherwise
recompile every module on every call, about 40 ms that no installed copy pays.
"""

_SERVE_LINE_TIMEOUT = 20.0


def _params(ctx: Context) -> dict[str, Any]:
    return {"rounds": ctx.pick(quick=5, full=40), "goal_ratio": GOAL_RATIO}


@contextmanager
def _server(env: dict[str, str]) -> Iterator[str]:
    """A `trio-pty serve --port 0`; yields its URL; SIGTERM and reap after."""
    argv = [sys.executable, "-m", "trio_pty", "serve", "--port", "0", "--no-ui"]
    process = subprocess.Popen(
        [*argv, "--no-state-dir"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().decode().strip()
        if not url.startswith("ws://"):
            raise RuntimeError(f"trio-pty serve printed {url!r} instead of its URL")
        yield url
    finally:
        process.terminate()  # our own child, by its pid
        try:
            process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


@contextmanager
def _tmux(env: dict[str, str], socket: str) -> Iterator[list[str] | None]:
    """A tmux server with one session on its own socket, or None without tmux."""
    tmux = shutil.which("tmux")
    if tmux is None:
        yield None
        return
    base = [tmux, "-S", socket]
    subprocess.run([*base, "new-session", "-d", "sleep 1000"], env=env, check=True)
    try:
        yield [*base, "list-sessions"]
    finally:
        subprocess.run([*base, "kill-server"], env=env, check=False)


def _timed(argv: list[str], env: dict[str, str], wrong: list[str]) -> Callable[[], float]:
    def run() -> float:
        began = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, timeout=TIMEOUT, check=False)
        elapsed = time.perf_counter() - began
        if done.returncode != 0:
            wrong.append(f"{argv[-3:]} exited {done.returncode}: {done.stderr[-200:]!r}")
        return elapsed

    return run


def _main(ctx: Context, result: Result, scratch: str) -> None:
    token = secrets.token_urlsafe(16)
    home = os.path.join(scratch, "home")
    os.mkdir(home)
    env = {**os.environ, "HOME": home, procs.TAG: ctx.tag, "TRIO_PTY_TOKEN": token}
    client = os.path.join(os.path.dirname(sys.executable), "trio-pty")
    package = os.path.dirname(os.path.abspath(trio_pty.__file__ or "."))
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True, timeout=120)
    with _server(env) as url, _tmux(env, os.path.join(scratch, "tmux")) as tmux:
        env["TRIO_PTY_URL"] = url
        spawned = subprocess.run(
            [client, "spawn", "--ready", "--", "bash", "-c", "seq 1 100; exec sleep 1000"],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=True,
        )
        session = spawned.stdout.split()[0]
        listed = subprocess.run(
            [client, "list"], env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
        result.check("trio-pty list shows the session", session in listed.stdout, listed.stdout)
        wrong: list[str] = []
        variants = {
            f'python3 -c "{FLOOR}"': _timed([sys.executable, "-c", FLOOR], env, wrong),
            "trio-pty list": _timed([client, "list"], env, wrong),
            "trio-pty read ID --tail 5": _timed(
                [client, "read", session, "--tail", "5"], env, wrong
            ),
        }
        if tmux is not None:
            variants["tmux list-sessions"] = _timed(tmux, env, wrong)
        for variant in variants.values():  # warm the page cache, unmeasured
            variant()
        samples = stats.interleave_sync(variants, result.params["rounds"], progress=ctx.progress)
        subprocess.run([client, "kill", session], env=env, capture_output=True, timeout=TIMEOUT)
    result.check("every call exited 0", not wrong, "; ".join(wrong[:3]))
    result.data["wall_s"] = samples
    _summarize(result, samples)


def _summarize(result: Result, samples: dict[str, list[float]]) -> None:
    floor = f'python3 -c "{FLOOR}"'
    ms = {name: [value * 1000 for value in values] for name, values in samples.items()}
    table = result.table("one call, process start to exit", "ms", ms, baseline=floor)
    base = table[floor]["median"]
    for name, key in (("trio-pty list", "cli_list"), ("trio-pty read ID --tail 5", "cli_read")):
        ours = table[name]["median"]
        ratio = stats.ratio(ours, base)
        goal = result.params["goal_ratio"] if key == "cli_list" else None
        result.goal(
            f"{name} at most {goal:g}x importing trio and trio-websocket"
            if goal is not None
            else f"{name} (measured, no goal set)",
            f"median {ours:.0f} ms vs {base:.0f} ms: {ratio:.2f}x",
            ratio <= goal if goal is not None else None,
            key=key,
            subject=f"{ours:.0f} ms",
            baseline=f"import trio, trio_websocket {base:.0f} ms",
            ratio=ratio,
        )
    if "tmux list-sessions" in table:
        tmux = table["tmux list-sessions"]["median"]
        result.notes.append(
            f"tmux list-sessions: median {tmux:.1f} ms; trio-pty list is "
            f"{stats.ratio(table['trio-pty list']['median'], tmux):.0f}x that"
        )


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    with tempfile.TemporaryDirectory(prefix="cli-bench-") as scratch:
        _main(ctx, result, scratch)
    left = procs.tagged(ctx.tag)
    result.check("nothing the server started is left", not left, str(left))
    procs.kill_and_wait(left)
    return result
