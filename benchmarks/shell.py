"""Scenario: a shell session's command round trip, `run("true")`, against the bare floor.

Variants, interleaved, for bash and for zsh: trio-pty's `manager.run(id, "true")` on a
session from `spawn_shell`, and the floor: the same shell with the same integration scripts
under a bare PTY, where one sample is an `os.write` of the same keystrokes and reading the
master until the end mark and then the prompt mark arrive.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from typing import Any

import trio

import trio_pty
from trio_pty import Limits
from trio_pty.shell import launch
from trio_pty.shell.keys import keystrokes

from . import procs, stats
from .harness import Context, Result

NAME = "shell"
TITLE = "Shell command round trip"
SHELLS = ("bash", "zsh")
COMMAND = "true"
TIMEOUT = 10.0

METHOD = """\
A sample is one command round trip in an interactive shell with trio-pty's integration
(`rc=False`: no user startup files), from the moment the command is sent to the moment the
shell is back at its prompt:

- *trio-pty*: `await manager.run(id, "true")`: validation, the busy check, the bracketed
  paste decision, writing, waiting for the end mark (D) through the session's reader and
  mark parser, then for the prompt mark (B), and building the CommandResult.
- *floor*: the same shell started with the same scripts under a bare `os.openpty()` +
  `trio.lowlevel.open_process` (through `setsid -c` for the controlling tty); `os.write` of the
  same keystrokes (a bracketed paste and Enter), then `wait_readable` + `os.read` on the
  master until D and then B have arrived. This is what any client of the same shell must
  pay: the shell's own work (readline or ZLE, PS0, PROMPT_COMMAND or precmd) is in both.

Both variants run one shell each, interleaved, many rounds; medians with min and max.
"""


def _params(ctx: Context) -> dict[str, Any]:
    return {"rounds": ctx.pick(quick=40, full=400), "ratio_goal": 1.2, "ms_goal": 5.0}


def _env() -> dict[str, str]:
    return {**os.environ, "TERM": "xterm-256color"}


class Floor:
    """A shell with the integration scripts under a bare PTY, driven by hand."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.nonce = secrets.token_hex(8)
        self.end_key = f"\x1b]133;D;0;tp={self.nonce}".encode()
        self.prompt_key = f"\x1b]133;B;tp={self.nonce}\x07".encode()
        self.keys = keystrokes(COMMAND, paste=True)
        self.master = -1
        self.process: trio.Process | None = None

    async def start(self) -> None:
        command = shutil.which(self.name) or self.name
        setup = launch.prepare(
            self.name, command, nonce=self.nonce, rc=False, login=False, environ=_env()
        )
        try:
            self.master, slave = os.openpty()
            os.set_blocking(self.master, False)
            argv = [shutil.which("setsid") or "setsid", "-c", "--", command, *setup.args]
            try:
                self.process = await trio.lowlevel.open_process(
                    argv,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    env={**_env(), **setup.env},
                    start_new_session=False,
                )
            finally:
                os.close(slave)
            await self._read_until(self.prompt_key)
        finally:
            setup.remove()

    async def _read_until(self, *keys: bytes) -> None:
        """Read until each of `keys` has arrived, in order."""
        seen = b""
        with trio.fail_after(TIMEOUT):
            for key in keys:
                while (found := seen.find(key)) < 0:
                    await trio.lowlevel.wait_readable(self.master)
                    try:
                        seen += os.read(self.master, 65536)
                    except BlockingIOError:
                        continue
                seen = seen[found + len(key) :]

    async def sample(self) -> float:
        started = time.perf_counter()
        os.write(self.master, self.keys)
        await self._read_until(self.end_key, self.prompt_key)
        return time.perf_counter() - started

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()  # our own child, by its pid
            with trio.CancelScope(shield=True):
                await self.process.wait()
        if self.master >= 0:
            trio.lowlevel.notify_closing(self.master)
            os.close(self.master)
            self.master = -1


async def _main(ctx: Context, result: Result) -> None:
    rounds = result.params["rounds"]
    samples: dict[str, dict[str, list[float]]] = {}
    checks: list[str] = []
    async with trio_pty.open_manager(Limits(terminate_grace=0.5)) as manager:
        for name in SHELLS:
            if shutil.which(name) is None:
                result.notes.append(f"{name} is not installed: not measured")
                continue
            info = await manager.spawn_shell(description=f"{name} round trip", shell=name, rc=False)
            floor = Floor(name)
            await floor.start()
            try:

                async def ours(session_id: str = info.id, name: str = name) -> float:
                    started = time.perf_counter()
                    done = await manager.run(session_id, COMMAND)
                    elapsed = time.perf_counter() - started
                    if (done.reason, done.exit_code, done.lines) != ("exited", 0, []):
                        checks.append(f"{name}: run({COMMAND!r}) gave {done!r}")
                    return elapsed

                variants = {"floor": floor.sample, "trio-pty": ours}
                for variant in variants.values():  # warm up, unmeasured
                    await variant()
                measured = await stats.interleave(
                    variants, rounds, progress=ctx.progress, label=f"{name}: "
                )
                samples[name] = {k: [v * 1000 for v in values] for k, values in measured.items()}
                history = manager.commands(info.id, limit=5)
                if any(c.state != "exited" or c.exit_code != 0 for c in history):
                    checks.append(f"{name}: history {history!r}")
            finally:
                await floor.stop()
                await manager.kill(info.id, cleanup=True)
    result.data["samples_ms"] = samples
    result.check("every run reported exit code 0 and no output", not checks, "; ".join(checks))
    _summarize(result, samples)


def _summarize(result: Result, samples: dict[str, dict[str, list[float]]]) -> None:
    ratio_goal, ms_goal = result.params["ratio_goal"], result.params["ms_goal"]
    for name, by_variant in samples.items():
        table = result.table(f"{name}: run(true) round trip", "ms", by_variant, baseline="floor")
        ours, floor = table["trio-pty"]["median"], table["floor"]["median"]
        ratio = stats.ratio(ours, floor)
        result.goal(
            f'{name}: run("true") within {ratio_goal}x of the bare floor and under {ms_goal} ms',
            f"median {ours:.2f} ms vs floor {floor:.2f} ms ({ratio:.2f}x)",
            ratio <= ratio_goal and ours < ms_goal,
            key=f"shell_{name}",
            subject=f"{ours:.2f} ms",
            baseline=f"floor {floor:.2f} ms",
            ratio=ratio,
        )


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    fds_before = procs.fd_set()
    trio.run(_main, ctx, result)
    left = procs.new_fds(fds_before)
    result.check("shell: every descriptor closed", not left, str(left))
    return result
