"""Fault injection with real processes: bad commands and workdirs, fd exhaustion, children
that close, hold, stop, fork or flood, and subscribers that never read.

Each test names what must still hold: a clean error of the documented kind, or a teardown
that ends within its bound; and never a process, an fd or a task left behind (the autouse
fixtures in conftest.py check that after every test, as well as the tests themselves).
Cases already proved elsewhere are not repeated: the first three bad commands and a missing
workdir (test_core_sessions.py), a stopped leader (test_core_teardown.py), raising and
hanging exit callbacks (test_core_sessions.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
from pathlib import Path

import pytest
import trio

import trio_pty
from trio_pty import Limits, Wait, errors
from trio_pty.policy.authorize import AuthorizationRequest
from trio_pty.posix import proc

from . import leaks
from .helpers import (
    alive,
    own_fd_count,
    poll_until,
    process_state,
    tagged_processes,
    wait_for_status,
    wait_for_text,
)

LIMITS = Limits(terminate_grace=0.3, io_timeout=1.0)


# ------------------------------------------------------------------ commands that cannot run


def _make_bad_commands(tmp: Path) -> dict[str, tuple[str, dict[str, str] | None, str]]:
    """name -> (command, env overrides, what the SpawnFailed message must say)."""
    (tmp / "dangling").symlink_to(tmp / "missing")
    (tmp / "loop-a").symlink_to(tmp / "loop-b")
    (tmp / "loop-b").symlink_to(tmp / "loop-a")
    shadow = tmp / "path-dir"
    (shadow / "mytool").mkdir(parents=True)
    plain = tmp / "plain.sh"
    plain.write_text("#!/bin/sh\necho should not run\n")
    plain.chmod(0o644)
    return {
        "dangling symlink": (str(tmp / "dangling"), None, "No such file or directory"),
        "symlink loop": (str(tmp / "loop-a"), None, "Too many levels of symbolic links"),
        "name too long": (str(tmp / ("x" * 300)), None, "File name too long"),
        "relative, not executable": ("./plain.sh", None, "permission denied"),
        "directory found on PATH": ("mytool", {"PATH": str(shadow)}, "it is a directory"),
    }


BAD_COMMANDS = [
    "dangling symlink",
    "symlink loop",
    "name too long",
    "relative, not executable",
    "directory found on PATH",
]


@pytest.mark.parametrize("case", BAD_COMMANDS)
async def test_more_commands_that_cannot_run_fail_cleanly(tmp_path: Path, case: str) -> None:
    command, env, reason = _make_bad_commands(tmp_path)[case]
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS, root=str(tmp_path)) as manager:
            fds = own_fd_count()
            with pytest.raises(errors.SpawnFailed, match=reason) as failed:
                await manager.spawn(command, description=case, env=env)
            assert failed.value.kind == "spawn_failed"
            assert failed.value.details() == {"command": command}
            assert own_fd_count() == fds
            assert manager.list() == [] and tagged_processes(manager) == []
            # The reservation came back: the owner can still fill its quota.
            for _ in range(LIMITS.max_sessions_per_owner):
                await manager.spawn("true", description="fill")


async def test_an_executable_found_after_a_non_executable_one_on_path_runs(
    tmp_path: Path,
) -> None:
    """execvp semantics: a PATH entry that is not executable is skipped, not fatal."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "tool").write_text("#!/bin/sh\necho wrong tool\n")
    (first / "tool").chmod(0o644)
    (second / "tool").write_text("#!/bin/sh\necho right tool\n")
    (second / "tool").chmod(0o755)
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn(
                "tool", description="path", env={"PATH": f"{first}:{second}"}
            )
            await wait_for_status(manager, info.id, "exited")
            lines = [line.text for line in (await manager.read(info.id)).lines]
            assert lines == ["right tool"]


async def test_a_script_with_a_missing_interpreter_fails_the_spawn_with_the_reason(
    tmp_path: Path,
) -> None:
    """The command exists and is executable, so only exec can tell that its interpreter is
    missing. posix_spawn reports the exec's failure, so the spawn fails, naming the cause,
    and nothing is left running (a `setsid` helper in front of the command used to report it
    inside the PTY, with exit code 127)."""
    script = tmp_path / "script"
    script.write_text("#!/nonexistent/interpreter\necho hi\n")
    script.chmod(0o755)
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            with pytest.raises(errors.SpawnFailed, match="interpreter") as failed:
                await manager.spawn(str(script), description="bad interpreter")
            assert str(script) in failed.value.message
            assert manager.list() == []


# ------------------------------------------------------------------ workdirs that vanish


async def test_workdir_removed_before_spawn(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS, root=str(tmp_path)) as manager:
            info = await manager.spawn("sleep", ["100"], description="ok", workdir=str(workdir))
            workdir.rmdir()  # the running session keeps its (now deleted) directory
            fds = own_fd_count()
            with pytest.raises(errors.InvalidInput, match="No such file or directory") as bad:
                await manager.spawn("pwd", description="gone", workdir=str(workdir))
            assert bad.value.field == "workdir"
            assert own_fd_count() == fds
            assert [s.id for s in manager.list()] == [info.id]
            assert manager.get(info.id).status == "running"
            await manager.kill(info.id)
            assert tagged_processes(manager) == []


class RemovingAuthorizer:
    """While it 'decides', removes the workdir (and maybe puts something else there)."""

    def __init__(self, workdir: Path, replacement: str) -> None:
        self.workdir = workdir
        self.replacement = replacement
        self.done = False

    async def authorize(self, request: AuthorizationRequest) -> None:
        await trio.sleep(0.01)
        if request.permission == "shell" and not self.done:
            self.done = True
            self.workdir.rmdir()
            if self.replacement == "directory":
                self.workdir.mkdir()
            elif self.replacement == "file":
                self.workdir.write_text("not a directory")


@pytest.mark.parametrize("replacement", ["nothing", "directory", "file"])
async def test_workdir_removed_during_approval_is_refused(tmp_path: Path, replacement: str) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    authorizer = RemovingAuthorizer(workdir, replacement)
    with trio.fail_after(10):
        async with trio_pty.open_manager(
            LIMITS, root=str(tmp_path), authorizer=authorizer
        ) as manager:
            fds = own_fd_count()
            with pytest.raises(errors.PermissionDenied, match="changed during permission"):
                await manager.spawn("pwd", description="moved", workdir=str(workdir))
            assert own_fd_count() == fds  # the directory handle was closed
            assert manager.list() == [] and tagged_processes(manager) == []
            for _ in range(LIMITS.max_sessions_per_owner):  # no reservation was kept
                await manager.spawn("true", description="fill")


# ------------------------------------------------------------------ fd exhaustion

# Runs in a child Python process: RLIMIT_NOFILE is per process, and lowering it in the test
# process would break everything else there. It prints one JSON verdict line.
FD_SCRIPT = r"""
import fcntl, json, logging, os, resource, sys
import trio, trio_pty
from trio_pty import Limits, Wait, errors
from trio_pty.posix import reap

def open_fds():
    found = []
    for fd in range(4096):
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            continue
        found.append(fd)
    return found

def limit_leaving(room):
    # The soft limit under which exactly `room` more descriptors can be opened.
    used, free, fd = set(open_fds()), 0, 0
    while True:
        if fd not in used:
            if free == room:
                return fd
            free += 1
        fd += 1

SOFT, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)

def exhaust(room=0):
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit_leaving(room), HARD))

def restore():
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))

def leftovers(manager_id):
    snapshot = reap.ProcessTable().snapshot()
    me = os.getpid()
    mine = [pid for pid, e in snapshot.entries.items() if e.ppid == me]
    tagged = [e.pid for e in snapshot.with_tags_of(manager_id)]
    return sorted(set(mine) | set(tagged))

async def still_works(manager):
    info = await manager.spawn("sh", ["-c", "echo alive"], description="after")
    with trio.fail_after(5):
        await manager.wait_exit(info.id)
    text = [line.text for line in (await manager.read(info.id)).lines]
    await manager.kill(info.id, cleanup=True)
    return text == ["alive"]

async def spawn_at_every_room(manager, verdict):
    info = await manager.spawn("true", description="warm-up")
    await manager.kill(info.id, cleanup=True)
    baseline = open_fds()
    outcomes = []
    for room in range(9):
        before = open_fds()
        exhaust(room)
        info = None
        try:
            info = await manager.spawn("sleep", ["100"], description=f"room {room}")
            outcome = {"room": room, "error": None}
        except Exception as exc:
            outcome = {"room": room, "error": type(exc).__name__, "message": str(exc)}
        finally:
            restore()
        if info is not None:
            await manager.kill(info.id, cleanup=True)
        outcome["fds_back"] = open_fds() == before
        outcomes.append(outcome)
    verdict["outcomes"] = outcomes
    verdict["fds_back_to_baseline"] = open_fds() == baseline
    verdict["works_after"] = await still_works(manager)

async def kill_while_exhausted(manager, verdict):
    info = await manager.spawn("sleep", ["100"], description="victim")
    exhaust()
    try:
        with trio.fail_after(5):
            final = await manager.kill(info.id)
    finally:
        restore()
    verdict["status"] = final.status
    verdict["works_after"] = await still_works(manager)

class Skips(logging.Handler):
    def __init__(self):
        super().__init__()
        self.count = 0

    def emit(self, record):
        self.count += record.getMessage().startswith("orphan reaping skipped")

async def idle_while_exhausted(manager, verdict):
    # It orphans a child that dies while no descriptor is free: the reaper, which scans
    # only when a child of ours is a zombie, then has to scan without one.
    script = "(sleep 0.2 &); echo ready; sleep 100"
    info = await manager.spawn("sh", ["-c", script], description="bystander")
    await manager.read(info.id, wait=Wait(pattern="ready", timeout_ms=5000))
    skips = Skips()
    logging.getLogger("trio_pty").addHandler(skips)
    exhaust()
    try:
        # The orphan dies 0.2 s in; from then on every tick (0.05 s) skips its scan.
        with trio.move_on_after(10):
            while skips.count < 2:
                await trio.sleep(0.01)
    finally:
        restore()
        logging.getLogger("trio_pty").removeHandler(skips)
    verdict["status"] = manager.get(info.id).status
    verdict["skipped_scans"] = skips.count
    verdict["works_after"] = await still_works(manager)

async def main(mode):
    verdict = {"mode": mode}
    limits = Limits(
        terminate_grace=0.2, max_sessions=64, max_sessions_per_owner=64,
        # Only the "idle" mode lets the orphan reaper tick while no fd is free.
        orphan_reap_interval=0.05 if mode == "idle" else 60,
    )
    manager_id = None
    try:
        async with trio_pty.open_manager(limits) as manager:
            manager_id = manager.id
            await {"spawn": spawn_at_every_room, "kill": kill_while_exhausted,
                   "idle": idle_while_exhausted}[mode](manager, verdict)
    except BaseException as exc:
        verdict["manager_error"] = repr(exc)[:500]
    # What the kernel delivers (SIGHUP) takes a moment to end what it ends: what is still
    # there after a few seconds is left over.
    left = []
    if manager_id:
        with trio.move_on_after(5):
            while left := leftovers(manager_id):
                await trio.sleep(0.01)
    verdict["leftovers"] = left
    for pid in left:  # never leave them to PID 1
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    print(json.dumps(verdict))

trio.run(main, sys.argv[1])
"""


async def _fd_verdict(mode: str) -> dict[str, object]:
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-c", FD_SCRIPT, mode],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    lines = done.stdout.decode().strip().splitlines()
    assert lines, f"no verdict: {done.stderr.decode()[-2000:]}"
    verdict: dict[str, object] = json.loads(lines[-1])
    return verdict


async def test_fd_exhaustion_at_every_step_of_a_spawn_is_a_clean_spawn_failed() -> None:
    """Whichever step of a spawn runs out of descriptors (workdir handle, PTY pair, process
    pipes, pidfd), the caller gets SpawnFailed naming the descriptor limit, nothing stays
    open, no process is left, and the manager keeps working once descriptors are back."""
    verdict = await _fd_verdict("spawn")
    assert "manager_error" not in verdict, verdict
    outcomes = verdict["outcomes"]
    assert isinstance(outcomes, list)
    failures = [outcome for outcome in outcomes if outcome["error"] is not None]
    assert failures, "never exhausted"
    assert len(failures) < len(outcomes), "room never sufficed"
    assert all(outcome["error"] == "SpawnFailed" for outcome in failures), failures
    assert all("descriptor" in outcome["message"] for outcome in failures), failures
    assert all(outcome["fds_back"] for outcome in outcomes), outcomes
    assert verdict["fds_back_to_baseline"] and verdict["works_after"], verdict
    assert verdict["leftovers"] == [], verdict


async def test_kill_while_no_fd_is_free_still_kills_and_keeps_the_manager() -> None:
    """No descriptor for a /proc scan: teardown must still end the session (by its groups)
    and must not take the manager down."""
    verdict = await _fd_verdict("kill")
    assert "manager_error" not in verdict, verdict
    assert verdict["status"] == "killed" and verdict["works_after"], verdict
    assert verdict["leftovers"] == [], verdict


async def test_orphan_reaper_survives_fd_exhaustion() -> None:
    """No descriptor for several orphan_reap_interval ticks: the reaper skips, the manager
    and its sessions go on."""
    verdict = await _fd_verdict("idle")
    assert "manager_error" not in verdict, verdict
    assert verdict["status"] == "running" and verdict["works_after"], verdict
    assert isinstance(verdict["skipped_scans"], int) and verdict["skipped_scans"] >= 1, verdict
    assert verdict["leftovers"] == [], verdict


# ------------------------------------------------------------------ children and the slave


async def test_child_that_closes_the_slave_at_once_but_keeps_running() -> None:
    script = "echo before; exec </dev/null >/dev/null 2>&1; sleep 100"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="deaf and mute")
            await wait_for_text(manager, info.id, "before")
            # EOF on the master is not an exit: the session runs on, the exit unrecorded.
            page = await manager.read(info.id, wait=Wait(exit=True, timeout_ms=600))
            assert page.reason == "timeout"
            current = manager.get(info.id)
            assert current.status == "running" and current.exit_code is None
            assert alive(info.pid)
            await manager.resize(info.id, rows=30, cols=90)
            with contextlib.suppress(errors.WriteTimeout):  # nobody reads the tty
                await manager.write(info.id, "into the void\n")
            start = trio.current_time()
            final = await manager.kill(info.id)
            assert trio.current_time() - start < LIMITS.terminate_grace + 1
            assert final.status == "killed" and final.exit_signal == signal.SIGHUP
            assert tagged_processes(manager, info.id) == []
            # Nothing after "before" but, perhaps, the tty's echo of what was written.
            lines = [line.text for line in (await manager.read(info.id)).lines]
            assert lines in (["before"], ["before", "into the void"]), lines


async def test_exit_of_a_child_that_closed_the_slave_is_recorded_promptly() -> None:
    script = "echo before; exec </dev/null >/dev/null 2>&1; sleep 0.5; exit 5"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="exits later")
            start = trio.current_time()
            with trio.fail_after(3):
                ending = await manager.wait_exit(info.id)
            # The EOF came long before, so the exit waits for no drain window.
            assert trio.current_time() - start < 0.5 + LIMITS.exit_drain_timeout + 0.5
            assert (ending.exit_code, ending.exit_signal) == (5, None)
            assert manager.get(info.id).status == "exited"


async def test_output_after_the_child_reopens_its_terminal_is_read() -> None:
    script = (
        "echo before; exec </dev/null >/dev/null 2>&1; sleep 0.5; "
        "echo after-reopen >/dev/tty; sleep 100"
    )
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="reopens")
            await wait_for_text(manager, info.id, "after-reopen", timeout=1.5)


async def test_grandchild_holding_the_slave_delays_the_exit_by_at_most_the_drain() -> None:
    """The leader prints 64 KiB and exits 4 while a grandchild that ignores SIGTERM keeps
    the slave open and prints twice more (inside and after the drain window). The exit is
    recorded within about exit_drain_timeout, not after the grace; no byte is lost, the
    grandchild's later output is kept too, and the teardown ends it after the grace."""
    grace = 1.0
    limits = Limits(terminate_grace=grace, exit_drain_timeout=0.25)
    script = (
        "(trap '' TERM HUP; sleep 0.1; echo late-1; sleep 0.4; echo late-2; sleep 100) & "
        "head -c 65536 /dev/zero | tr '\\0' x; echo; echo leader-done; exit 4"
    )
    with trio.fail_after(15):
        async with trio_pty.open_manager(limits) as manager:
            start = trio.current_time()
            info = await manager.spawn("sh", ["-c", script], description="holder")
            with trio.fail_after(5):
                ending = await manager.wait_exit(info.id)
            recorded = trio.current_time() - start
            assert recorded < limits.exit_drain_timeout + 0.75, recorded
            assert (ending.exit_code, ending.exit_signal) == (4, None)
            assert manager.get(info.id).status == "exited"
            holders = tagged_processes(manager, info.id)
            assert holders, "the grandchild should still be inside its grace"
            await poll_until(lambda: not tagged_processes(manager, info.id), timeout=grace + 2)
            assert trio.current_time() - start >= grace  # it ignored SIGTERM
            raw = await manager.read_raw(info.id, offset=0)
            assert raw.data.count(b"x") == 65536
            lines = [line.text for line in (await manager.read(info.id)).lines]
            assert {"leader-done", "late-1", "late-2"} <= set(lines), lines


# ------------------------------------------------------------------ stopped and forking


async def test_stopped_grandchildren_are_torn_down_without_waiting_for_the_grace() -> None:
    """A stopped leader, a stopped grandchild in its group and a stopped grandchild that
    called setsid: SIGCONT follows SIGTERM for each, so none makes the kill wait."""
    grace = 2.0
    script = (
        "sleep 100 & kill -STOP $!; "
        "setsid sh -c 'kill -STOP $$; sleep 100' & "
        "echo ready; sleep 0.2; kill -STOP $$"
    )
    with trio.fail_after(15):
        async with trio_pty.open_manager(Limits(terminate_grace=grace)) as manager:
            info = await manager.spawn("sh", ["-c", script], description="stopped")
            await wait_for_text(manager, info.id, "ready")
            await poll_until(
                lambda: (
                    [process_state(p) for p in tagged_processes(manager, info.id)].count("T") >= 3
                )
            )
            start = trio.current_time()
            await manager.kill(info.id)
            assert trio.current_time() - start < grace / 2
            assert tagged_processes(manager, info.id) == []


async def test_stopped_child_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    grace = 0.5
    script = (
        "trap '' HUP TERM; sleep 100 & echo ready; kill -STOP $!; kill -STOP $$; "
        "while :; do sleep 1; done"
    )
    with trio.fail_after(10):
        async with trio_pty.open_manager(Limits(terminate_grace=grace)) as manager:
            info = await manager.spawn("sh", ["-c", script], description="stopped, deaf")
            await wait_for_text(manager, info.id, "ready")
            await poll_until(lambda: process_state(manager.get(info.id).pid) == "T")
            start = trio.current_time()
            final = await manager.kill(info.id)
            elapsed = trio.current_time() - start
            assert grace <= elapsed <= grace + 1, elapsed
            assert final.exit_signal == signal.SIGKILL
            assert tagged_processes(manager, info.id) == []


@pytest.mark.parametrize("escape", ["same group", "setsid"])
async def test_child_that_traps_sigterm_and_keeps_forking_is_gone_after_sigkill(
    escape: str,
) -> None:
    """Ignores SIGTERM (and so do its children) and forks every 10 ms through the grace:
    children born after any scan are caught by the group kill or by the next scan (as
    descendants, or as tagged orphans adopted by the subreaper once the parent is dead)."""
    grace = 0.5
    spawner = "sleep 100" if escape == "same group" else "setsid sleep 100"
    script = f"trap '' HUP TERM; echo ready; while :; do {spawner} & sleep 0.01; done"
    with trio.fail_after(20):
        async with trio_pty.open_manager(Limits(terminate_grace=grace)) as manager:
            info = await manager.spawn("sh", ["-c", script], description="forker")
            await wait_for_text(manager, info.id, "ready")
            await poll_until(lambda: len(tagged_processes(manager, info.id)) >= 10)
            start = trio.current_time()
            final = await manager.kill(info.id)
            elapsed = trio.current_time() - start
            assert grace <= elapsed <= grace + 1, elapsed
            assert final.status == "killed" and final.error is None
            assert tagged_processes(manager, info.id) == []


async def test_kill_right_after_spawn_leaves_nothing() -> None:
    """The leader forks a child that ignores SIGTERM and SIGHUP, then exits at once; kill
    comes at once too. kill() returns only when nothing of the session remains."""
    script = "trap '' HUP TERM; sleep 100 & echo bye"
    me = os.getpid()
    try:
        with trio.fail_after(30):
            async with trio_pty.open_manager(Limits(terminate_grace=0.1)) as manager:
                for _ in range(40):  # it fails within a few when the race is there
                    info = await manager.spawn("sh", ["-c", script], description="racy")
                    await manager.kill(info.id, cleanup=True)
                    left = leaks.descendants([me], keepers=False)
                    assert left == {}, left
    finally:
        # If it fails, leave nothing behind to fail the tests after it.
        await leaks.kill_descendants(me)


async def test_a_process_first_seen_while_it_execs_keeps_its_tags() -> None:
    """The tag is what finds a descendant that escaped with setsid and a double fork. A scan
    that happens to read the environment during an exec sees none; that must not stick."""
    env = {**os.environ, proc.TAG_MANAGER: "m-exec-race", proc.TAG_SESSION: "s-exec-race"}
    exec_sleep = "import os; os.execvp('sleep', ['sleep', '100'])"
    caught = 0
    with trio.fail_after(30):
        for _ in range(50):
            process = await trio.lowlevel.open_process([sys.executable, "-c", exec_sleep], env=env)
            try:
                missed: proc.TagCache | None = None
                while missed is None and _cmdline(process.pid) != "sleep 100":
                    entry = proc.read_stat(process.pid)
                    if entry is None or entry.dead:
                        break
                    cache: proc.TagCache = {}  # a scan seeing it for the first time
                    if not proc.Snapshot({entry.pid: entry}, cache).with_tags_of("m-exec-race"):
                        missed = cache
                if missed is None:
                    continue
                caught += 1
                await poll_until(lambda: _cmdline(process.pid) == "sleep 100")  # noqa: B023
                entry = proc.read_stat(process.pid)
                assert entry is not None
                found = proc.Snapshot({entry.pid: entry}, missed).with_tags_of("m-exec-race")
                assert [e.pid for e in found] == [process.pid], "forgotten after its exec"
                if caught >= 3:
                    break
            finally:
                process.kill()
                await process.wait()
    assert caught, "never caught a scan in the middle of an exec"


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


DAEMON = """import os, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
print("daemon up", flush=True)
time.sleep(100)
"""


async def test_a_classic_double_fork_daemon_leaves_no_zombie() -> None:
    me = os.getpid()
    try:
        with trio.fail_after(10):
            async with trio_pty.open_manager(LIMITS) as manager:
                # Started from a shell, as daemons are: the leader stays, so no SIGHUP.
                script = f"{shlex.quote(sys.executable)} -c {shlex.quote(DAEMON)}; sleep 100"
                info = await manager.spawn("sh", ["-c", script], description="daemon")
                page = await manager.read(info.id, wait=Wait(pattern="daemon up"))
                assert page.reason == "matched"
                await manager.kill(info.id)
                assert tagged_processes(manager) == []
                left = leaks.descendants([me], keepers=False)
                assert left == {}, left
    finally:
        await leaks.kill_descendants(me)


# ------------------------------------------------------------------ subscribers


async def test_subscribers_that_never_read_hold_nothing_back() -> None:
    """Twenty attachments are opened and never iterated while a session floods 16 MB: the
    reader keeps up, another session answers promptly, memory stays the ring's (each
    attachment is only a cursor), and a late reader is told it fell behind (`gap`)."""
    buffer_size = 256 * 1024
    size = 16_000_000
    limits = Limits(terminate_grace=0.3, buffer_size=buffer_size)
    flood = f"yes 0123456789abcdef | head -c {size}; echo; echo flood-done; sleep 100"
    with trio.fail_after(40):
        async with trio_pty.open_manager(limits) as manager:
            other = await manager.spawn(
                "sh", ["-c", 'while read line; do echo "got $line"; done'], description="echo"
            )
            rss_before = _rss_bytes()
            async with contextlib.AsyncExitStack() as stack:
                info = await manager.spawn("sh", ["-c", "sleep 0.2; " + flood], description="f")
                streams = [
                    await stack.enter_async_context(manager.attach(info.id)) for _ in range(20)
                ]
                # The tty turns every "\n" into "\r\n": one more byte per 17-byte line.
                total = size + size // 17 + len(b"\r\nflood-done\r\n")
                await poll_until(lambda: manager.get(info.id).byte_count > 0)
                pings = 0
                while manager.get(info.id).byte_count < total:
                    start = trio.current_time()
                    result = await manager.write(
                        other.id, f"ping{pings}\n", wait=Wait(pattern=f"^got ping{pings}$")
                    )
                    assert result.output is not None and result.output.reason == "matched"
                    assert trio.current_time() - start < 2
                    pings += 1
                assert pings >= 1  # the other session answered during the flood
                done = await manager.read(
                    info.id, limit=1, wait=Wait(pattern="^flood-done$", timeout_ms=30_000)
                )
                assert done.reason == "matched"
                final = manager.get(info.id)
                assert final.byte_count == total
                raw = await manager.read_raw(info.id, offset=0)
                assert raw.gap and raw.offset >= final.byte_count - buffer_size
                first = await streams[0].__anext__()
                assert first.gap and first.offset >= final.byte_count - buffer_size
                assert first.data.startswith(b"0123456789abcdef\r\n")  # starts at a line
                caught_up = len(first.data)
                while caught_up < final.byte_count - first.offset:
                    caught_up += len((await streams[0].__anext__()).data)
                assert caught_up <= buffer_size
                # Attachments never block a kill; they end once everything was delivered.
                await manager.kill(info.id)
                rest = [chunk async for chunk in streams[1]]
                assert sum(len(chunk.data) for chunk in rest) <= buffer_size
            growth = _rss_bytes() - rss_before
            assert growth < 48 * 1024 * 1024, f"RSS grew by {growth} bytes"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
