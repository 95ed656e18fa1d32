"""The leak detector itself: it reads /proc on its own, so check that it sees what it must."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

from tests import leaks
from trio_pty.posix import proc


def _within(seconds: float, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.01)


def _reaped(pid: int) -> bool:
    """Reap `pid` if it has become our zombie (adopted, when this process is a subreaper)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return False


def test_the_detector_uses_the_librarys_tag_names() -> None:
    # The names are the one thing shared with the library: the contract of what is ours.
    assert (leaks.TAG_MANAGER, leaks.TAG_SESSION, leaks.TAG_KEEPER) == (
        proc.TAG_MANAGER,
        proc.TAG_SESSION,
        proc.TAG_KEEPER,
    )


def test_the_detector_sees_a_child_and_a_tagged_orphan() -> None:
    me = os.getpid()
    manager_id = f"leak-check-{uuid.uuid4().hex}"
    leaks.OUR_MANAGERS.add(manager_id)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # A tagged grandchild whose parent exits: reparented away from us (to PID 1 or to a
    # subreaper above), found only by its tag.
    env = {**os.environ, leaks.TAG_MANAGER: manager_id, leaks.TAG_SESSION: "s"}
    spawner = subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)'], start_new_session=True, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)",
        ],
        env=env,
        capture_output=True,
        check=True,
        timeout=30,
    )
    orphan = int(spawner.stdout)
    try:
        # The orphan's environment is readable once its exec is done.
        _within(10, lambda: orphan in leaks.descendants([me]))
        found = leaks.descendants([me])
        assert child.pid in found
        assert "time.sleep(60)" in found[orphan].cmdline
    finally:
        leaks.kill_leftovers([leaks.ProcessView(pid, "", "") for pid in (child.pid, orphan)])
        child.wait(5)
        _within(10, lambda: _reaped(orphan) or orphan not in leaks.descendants([me]))
        leaks.OUR_MANAGERS.discard(manager_id)
