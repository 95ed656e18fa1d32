"""Small helpers for integration tests: bounded waits on real sessions and processes."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_pty
from trio_pty.manager import Manager
from trio_pty.posix import proc, reap


async def poll_until(condition: Callable[[], bool], *, timeout: float = 10) -> None:
    """Poll an outside observation (the process table, a status) until it holds; bounded.

    Tests use it only for what no event announces, such as a process appearing in /proc.
    """
    with trio.fail_after(timeout):
        while not condition():  # noqa: ASYNC110 - nothing to wait on but the observation
            await trio.sleep(0.01)


def comm(pid: int) -> str:
    """The process's command name ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""


async def output_text(manager: Manager, session_id: str, *, owner: str = "default") -> str:
    page = await manager.read(session_id, owner=owner, offset=0, limit=2000)
    return "\n".join(line.text for line in page.lines)


async def wait_for_text(
    manager: Manager, session_id: str, text: str, *, owner: str = "default", timeout: float = 10
) -> str:
    """Poll the session's clean text until `text` appears (tests only; bounded)."""
    with trio.fail_after(timeout):
        while True:
            current = await output_text(manager, session_id, owner=owner)
            if text in current:
                return current
            await trio.sleep(0.01)


async def wait_for_status(
    manager: Manager, session_id: str, status: str, *, owner: str = "default", timeout: float = 10
) -> None:
    await poll_until(lambda: manager.get(session_id, owner=owner).status == status, timeout=timeout)


def tagged_processes(manager: Manager, session_id: str | None = None) -> list[int]:
    """Living processes that carry this manager's (and session's) tag, wherever they are."""
    snapshot = reap.ProcessTable().snapshot()
    return [
        entry.pid
        for entry in snapshot.with_tags_of(manager.id)
        if session_id is None or proc.read_tags(entry.pid) == (manager.id, session_id)
    ]


def signal_pending(pid: int, signum: int) -> bool:
    """Whether `signum` sent to `pid` waits for the process to take it (its handler has not
    run yet): /proc/PID/status, the process's and its threads' pending sets."""
    bit = 1 << (signum - 1)
    pending = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as handle:
                for line in handle:
                    if line.startswith(("SigPnd:", "ShdPnd:")):
                        pending |= int(line.split()[1], 16)
        except OSError:
            continue
    return bool(pending & bit)


def process_state(pid: int) -> str:
    """`/proc` state letter of `pid` ("T" stopped, "Z" zombie, ...), or "gone"."""
    entry = proc.read_stat(pid)
    return "gone" if entry is None else entry.state


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (the library's own /proc stat parser)."""
    entry = proc.read_stat(pid)
    return entry is not None and not entry.dead


def numbers_in(text: str) -> list[int]:
    return [int(word) for word in text.split() if word.isdigit()]


def own_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def tagged_by_session(manager: Manager) -> dict[str, list[int]]:
    """Living processes carrying this manager's tag, grouped by session id (one /proc scan)."""
    snapshot = reap.ProcessTable().snapshot()
    found: dict[str, list[int]] = {}
    for entry in snapshot.with_tags_of(manager.id):
        tags = proc.read_tags(entry.pid)
        if tags is not None:
            found.setdefault(tags[1], []).append(entry.pid)
    return found


def python_steps(function: Callable[[], object]) -> int:
    """How many lines of trio_pty's Python ran while `function` ran: a count of work that
    does not depend on the machine or its load, for "stays linear" checks (speed itself is
    measured in benchmarks/). Work done in C (a regex scan) is not counted."""
    package = str(Path(trio_pty.__file__).resolve().parent)
    steps = 0

    def local(frame: types.FrameType, event: str, arg: object) -> Any:
        nonlocal steps
        if event == "line":
            steps += 1
        return local

    def call(frame: types.FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code.co_filename.startswith(package) else None

    previous = sys.gettrace()
    sys.settrace(call)
    try:
        function()
    finally:
        sys.settrace(previous)
    return steps


def site_dirs() -> list[str]:
    """Where this test run imports trio and trio_pty from (the venv and the source tree)."""
    source = str(Path(trio_pty.__file__).resolve().parent.parent)
    return [*site.getsitepackages(), source]


def unprivileged_prefix(*, file_modes: bool = False) -> list[str]:
    """The argv prefix that runs Python as a non-root uid (65534 through setpriv when the
    tests run as root, as in CI), with a Python that uid can run. The kernel lets root read
    any process's /proc files, so a probe of what a session can read must not run as root;
    give the Python `site_dirs()` (with `site.addsitedir`, or as PYTHONPATH) to import
    trio_pty.

    `file_modes=True` is for a probe of file permissions themselves: there the uid 65534
    below (with CAP_DAC_READ_SEARCH) would open any directory, and without it could not even
    reach pytest's 0700 tmp_path. Root keeps its uid instead and loses CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH (bounding and inheritable sets, so they are gone after exec): the
    mode bits then decide, as for anyone."""
    if os.geteuid() != 0:
        return [sys.executable]
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("util-linux setpriv is needed to run the probe as a non-root uid")
    if file_modes:
        dac = "-dac_override,-dac_read_search"
        return [setpriv, f"--bounding-set={dac}", f"--inh-caps={dac}", sys.executable]
    # CAP_DAC_READ_SEARCH (ambient, so it survives exec) lets that uid read the checkout and
    # its venv wherever CI cloned them (a 0700 temporary directory, say). It changes nothing
    # the probes measure: reading another process's /proc/PID/environ or mem is decided by
    # ptrace_may_access, which only CAP_SYS_PTRACE overrides (checked: a hardened process
    # stays unreadable to such a uid, a dumpable one is read).
    drop = [
        setpriv,
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
    ]
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"):
        if not os.path.exists(python):
            continue
        usable = subprocess.run(
            [*drop, python, "-c", "pass"], capture_output=True, timeout=30, check=False
        )
        if usable.returncode == 0:
            return [*drop, python]
    pytest.fail(f"no {minor} that uid 65534 can execute: cannot run the non-root probe")
