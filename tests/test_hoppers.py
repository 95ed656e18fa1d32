"""Pid hoppers on the crash path, and what the keeper may end (posix/keeper.py).

A hopper sleeps a few milliseconds per generation, then forks and lets the parent exit
(optionally calling setsid in every generation): a full /proc scan, a stat read per process,
rarely catches a generation alive. Judged by heartbeat files, not by scans. Every process a
test starts is ended by pid (or by the group it created) after a start-time check.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trio_pty.posix import keeper, proc

from .helpers import poll_until

GRACE = 0.3

# Ignores SIGHUP and SIGTERM, calls setsid, writes its group id to BEAT.pgid, then every
# generation appends a byte to BEAT, sleeps MS, forks, lets the parent exit, and (EVERY=1)
# calls setsid again. Bounded (about 3 s): one that escaped a failing test ends by itself.
HOPPER = """\
import os, signal, sys, time
for sig in (signal.SIGHUP, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
beat, ms, every = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
os.setsid()
with open(beat + ".pgid", "w") as handle:
    handle.write(str(os.getpgrp()))
for _ in range(int(3000 / max(ms, 1))):
    fd = os.open(beat, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, b".")
    os.close(fd)
    time.sleep(ms / 1000)
    if os.fork():
        os._exit(0)
    if every:
        os.setsid()
"""

# A program embedding a manager with a state directory: one session running the hopper,
# then READY; the test SIGKILLs it.
EMBEDDER = """\
import sys, trio, trio_pty
from trio_pty import Limits
async def main():
    limits = Limits(terminate_grace=float(sys.argv[3]))
    async with trio_pty.open_manager(limits, state_dir=sys.argv[2]) as manager:
        print(manager.id, flush=True)
        await manager.spawn("sh", ["-c", sys.argv[1]], description="hop")
        print("READY", flush=True)
        await trio.sleep(1000)
trio.run(main)
"""


def _beats(beat: Path) -> int:
    try:
        return beat.stat().st_size
    except FileNotFoundError:
        return 0


async def _still_beating(beat: Path) -> bool:
    """Over a window in which a live 2 ms hopper beats ~25 times."""
    before = _beats(beat)
    await trio.sleep(0.08)
    return _beats(beat) != before


def _stop(beat: Path) -> None:
    """After a failure only: the hopper's first group (this test's), while it is in use."""
    with contextlib.suppress(OSError, ValueError):
        os.killpg(int(beat.with_suffix(".pgid").read_text()), signal.SIGKILL)


def _hopper(beat: Path, ms: float, every: bool) -> str:
    program = f"{shlex.quote(sys.executable)} -c {shlex.quote(HOPPER)}"
    return f"trap '' HUP TERM; {program} {shlex.quote(str(beat))} {ms} {int(every)} & sleep 1000"


TRIES = 3


@pytest.mark.slow
@pytest.mark.parametrize("every", [False, True], ids=["setsid-once", "setsid-every-generation"])
async def test_the_keeper_ends_a_2ms_hopper_after_the_manager_is_killed(
    tmp_path: Path, every: bool
) -> None:
    """SIGKILL of the manager's process: the keeper ends a hopper of 2 ms per generation
    within grace + 1 s, confirms the end, and only then removes the records. (Before it
    watched for new pids between rounds, 18 of 18 such hoppers survived, and the records
    were removed anyway.)"""
    for attempt in range(TRIES):
        await _crash_with_a_hopper(tmp_path, attempt, every)


async def _crash_with_a_hopper(tmp_path: Path, attempt: int, every: bool) -> None:
    beat = tmp_path / f"beat-{attempt}"
    state = tmp_path / f"state-{attempt}"
    command = [sys.executable, "-c", EMBEDDER, _hopper(beat, 2, every), str(state), str(GRACE)]
    with open(tmp_path / f"embedder-{attempt}.err", "wb") as stderr:  # noqa: ASYNC230
        process = subprocess.Popen(  # noqa: ASYNC220 - read line by line, then killed
            command, stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        assert process.stdout is not None
        with trio.fail_after(20):
            manager_id = (await trio.to_thread.run_sync(process.stdout.readline)).decode()
            assert (await trio.to_thread.run_sync(process.stdout.readline)) == b"READY\n"
            await poll_until(lambda: _beats(beat) >= 20)  # hopping for a while
            process.kill()
            await trio.to_thread.run_sync(process.wait)
            await trio.sleep(GRACE + 1.0)
            assert not await _still_beating(beat), f"attempt {attempt}: it survived"
            # The keeper confirmed the end, then removed the records.
            records = state / manager_id.strip()
            await poll_until(lambda: not records.exists(), timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
        _stop(beat)


def _dead_manager(state: Path, name: str, leader: keeper.Leader) -> Path:
    """The records a manager that died (its pid is free) left for one session."""
    folder = state / name
    folder.mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    gone = subprocess.Popen(["true"])
    gone.wait(5)  # reaped: its pid names nothing (or, recycled, another start time)
    record = {"manager": name, "pid": gone.pid, "start_time": 2, "boot_id": keeper.boot_id()}
    (folder / "manager.json").write_text(json.dumps(record))
    (folder / f"{leader.session}.session.json").write_text(json.dumps(leader.to_json()))
    return folder


async def test_an_unconfirmed_teardown_keeps_the_records_for_the_next_manager(
    tmp_path: Path,
) -> None:
    """A teardown cut off by its deadline (close_timeout below the grace: the leader ignores
    SIGTERM and lives on) does not confirm the end: the records stay, and the next look at
    the directory ends the leader and only then removes them. (Before, they went whatever
    the outcome, and a restart found nothing to end.)"""
    state = tmp_path / "state"
    leader_process = subprocess.Popen(  # noqa: ASYNC220 - waited on at the end
        ["sh", "-c", "trap '' HUP TERM; touch ready; exec sleep 1000"],
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        await poll_until((tmp_path / "ready").exists, timeout=5)
        leader = keeper.leader_of("pty_1", "o", leader_process.pid)
        assert leader is not None
        folder = _dead_manager(state, "0123456789abcdef", leader)
        with trio.fail_after(20):
            first = await trio.to_thread.run_sync(
                lambda: keeper.reap_predecessors(str(state), grace=5.0, close_timeout=0.3)
            )
            assert first.outcome.survivors == [leader.pid] and not first.outcome.confirmed
            assert (folder / "pty_1.session.json").exists()
            second = await trio.to_thread.run_sync(
                lambda: keeper.reap_predecessors(str(state), grace=0.1, close_timeout=5.0)
            )
        assert second.outcome.confirmed and second.outcome.survivors == []
        assert leader_process.poll() is not None
        assert list(state.iterdir()) == []
    finally:
        if leader_process.poll() is None:
            leader_process.kill()
        leader_process.wait(5)


async def test_the_keeper_signals_no_group_a_process_not_ours_shares(tmp_path: Path) -> None:
    """A tagged process in a group with an untagged one that is not its descendant (it
    joined the group, or was left in it by a shell): the keeper ends the tagged one through
    its pidfd and leaves the other alone. (Before, it sent SIGKILL to the whole group: with
    a root keeper, another user's process in a group with a root process made it kill that
    process.)"""
    tag = f"TRIO_PTY_MANAGER=m-{os.getpid()} TRIO_PTY_SESSION=s"
    script = (
        f"(sleep 1000 & echo $! > bystander) ; exec env {tag} sh -c 'touch ready; exec sleep 1000'"
    )
    group = subprocess.Popen(  # noqa: ASYNC220 - waited on at the end
        ["sh", "-c", script], cwd=tmp_path, start_new_session=True
    )
    bystander: proc.ProcEntry | None = None
    try:
        await poll_until((tmp_path / "ready").exists, timeout=5)
        await poll_until(lambda: (tmp_path / "bystander").read_text().strip() != "", timeout=5)
        bystander = proc.read_stat(int((tmp_path / "bystander").read_text()))
        assert bystander is not None and bystander.pgid == group.pid
        with trio.fail_after(20):
            outcome = await trio.to_thread.run_sync(
                lambda: keeper.tear_down([f"m-{os.getpid()}"], [], grace=0.1, close_timeout=5.0)
            )
        current = proc.read_stat(bystander.pid)
        assert current is not None and current.key == bystander.key and not current.dead
        assert group.poll() is not None
        assert outcome.confirmed and outcome.processes == 1
    finally:
        if group.poll() is None:
            group.kill()
        group.wait(5)
        if bystander is not None:
            proc.signal_process(bystander, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):  # ours when we are a subreaper
                os.waitpid(bystander.pid, 0)  # noqa: ASYNC222 - SIGKILLed just now


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process of another uid")
async def test_a_root_keeper_leaves_another_users_process_that_carries_the_tag() -> None:
    """Another user's process sets the manager's tag (its id is in the keeper's argv): the
    root keeper does not end it, nor anything in its group. (Before, a tag was enough.)"""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("util-linux setpriv is needed")
    manager_id = f"m-{os.getpid()}-uid"
    other = subprocess.Popen(  # noqa: ASYNC220 - waited on at the end
        [
            *(setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups"),
            *("env", f"TRIO_PTY_MANAGER={manager_id}", "TRIO_PTY_SESSION=s"),
            *("sleep", "1000"),
        ],
        cwd="/",
        start_new_session=True,
    )
    try:
        await poll_until(lambda: proc.names_below(other.pid, most=1) == {"sleep"}, timeout=5)
        entry = proc.read_stat(other.pid)
        assert entry is not None and os.stat(f"/proc/{other.pid}").st_uid == 65534
        with trio.fail_after(20):
            outcome = await trio.to_thread.run_sync(
                lambda: keeper.tear_down([manager_id], [], grace=0.1, close_timeout=2.0)
            )
        current = proc.read_stat(other.pid)
        assert current is not None and current.key == entry.key and not current.dead
        assert outcome.processes == 0 and outcome.confirmed
    finally:
        if other.poll() is None:
            other.kill()
        other.wait(5)
