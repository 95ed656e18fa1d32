"""Finding 1 of issue 17: a session read its parent's /proc/PID/environ (every secret the
environment filter had removed, the server's token), mem and fd. `harden_process` makes the
manager's process non-dumpable; these tests run a real manager in a subprocess and let a real
session probe its parent.

The kernel lets a child of the *same non-root uid* through unless the parent is non-dumpable,
so that is the case that proves the fix: when the tests run as root, the harness runs as
uid 65534 (setpriv), with a Python that uid can execute. Root children with CAP_SYS_PTRACE
are not stopped by the flag at all; a test pins that documented limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import trio

from trio_pty.posix import hardening

from .helpers import site_dirs, unprivileged_prefix

MARKER = "probe-secret-3f9a1c"

# The session's probe: can it read its parent's (the manager's) environ, open its memory,
# follow its descriptors? Each answer is one word, so the harness can parse them.
PROBE = r"""
p=$PPID
if grep -q MARKER /proc/$p/environ 2>/dev/null; then echo environ=read; else echo environ=denied; fi
if (exec 3</proc/$p/mem) 2>/dev/null; then echo mem=read; else echo mem=denied; fi
if readlink /proc/$p/fd/0 >/dev/null 2>&1; then echo fd=read; else echo fd=denied; fi
if readlink /proc/$p/cwd >/dev/null 2>&1; then echo cwd=read; else echo cwd=denied; fi
echo probe-end
""".replace("MARKER", MARKER)

HARNESS = """
import json, sys
for directory in json.loads(sys.argv[2]):
    import site; site.addsitedir(directory)
import trio, trio_pty

async def main():
    if sys.argv[1] == "harden":
        trio_pty.harden_process()
    dumpable = trio_pty.is_dumpable()
    async with trio_pty.open_manager(root="/") as manager:
        info = await manager.spawn(
            "sh", ["-c", sys.argv[3]], description="probe",
            ready=trio_pty.Wait(pattern="probe-end", timeout_ms=20000),
        )
        words = dict(
            line.text.split("=", 1) for line in info.ready.lines if "=" in line.text
        )
    print(json.dumps({"dumpable": dumpable, "uid": __import__("os").getuid(), **words}))

trio.run(main)
"""


async def _probe(prefix: list[str], mode: str) -> dict[str, object]:
    env = {**os.environ, "PROBE_SECRET_VALUE": MARKER}
    with trio.fail_after(60):
        done = await trio.run_process(
            [*prefix, "-c", HARNESS, mode, json.dumps(site_dirs()), PROBE],
            env=env,
            cwd="/",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result: dict[str, object] = json.loads(done.stdout.decode().splitlines()[-1])
    return result


async def test_same_uid_session_reads_a_dumpable_parent() -> None:
    """The control: without the call, the attack of the finding works (the probe is sound)."""
    result = await _probe(unprivileged_prefix(), "plain")
    assert result["uid"] != 0
    assert result["dumpable"] is True
    assert {key: result[key] for key in ("environ", "mem", "fd", "cwd")} == dict.fromkeys(
        ("environ", "mem", "fd", "cwd"), "read"
    )


async def test_hardened_parent_is_unreadable_to_same_uid_sessions() -> None:
    result = await _probe(unprivileged_prefix(), "harden")
    assert result["uid"] != 0
    assert result["dumpable"] is False
    assert {key: result[key] for key in ("environ", "mem", "fd", "cwd")} == dict.fromkeys(
        ("environ", "mem", "fd", "cwd"), "denied"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the documented limit concerns root children")
async def test_root_sessions_are_not_stopped_by_the_flag() -> None:
    """Documented limit (docs/security.md): root with CAP_SYS_PTRACE passes the check, so a
    root server needs a sandbox (its own PID namespace hides the parent) or another uid."""
    result = await _probe([sys.executable], "harden")
    assert result["dumpable"] is False
    assert result["environ"] == "read"


def test_harden_is_idempotent_and_checkable() -> None:
    """In a subprocess: the flag is process-wide and this test process stays dumpable."""
    code = (
        "import trio_pty; assert trio_pty.is_dumpable(); trio_pty.harden_process(); "
        "trio_pty.harden_process(); assert not trio_pty.is_dumpable(); print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=30, check=False
    )
    assert done.stdout.decode().strip() == "ok", done.stderr.decode()
    assert hardening.is_dumpable()
