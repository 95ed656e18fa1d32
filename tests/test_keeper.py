"""The crash guard: when the process holding a manager dies without closing it, nothing its
sessions started outlives it (posix/keeper.py, guard.py).

The manager runs in a child Python process (an embedding trio program) or in `trio-pty
serve`, which dies by `os._exit`, SIGTERM (Python's default action) or SIGKILL; what it
started must be gone within grace + 1 s of its death. Each session is the issue's
`trap '' HUP TERM; sleep & nohup sleep & setsid sleep & (setsid sh -c 'sleep & sleep' &)`.
Processes are found by their manager tag, wherever they went; what a failing test leaves is
ended by pid after a start-time check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import trio_pty
from trio_pty import Limits
from trio_pty.posix import keeper, proc, schedule

from . import leaks
from .helpers import poll_until, site_dirs, unprivileged_prefix
from .rpc_support import start_server

GRACE = 0.5
BOUND = GRACE + 1.0  # the bound: gone within grace + 1 s of the manager's death

STUBBORN = (
    "trap '' HUP TERM; sleep 1000 & nohup sleep 1000 >/dev/null 2>&1 & setsid sleep 1000 & "
    "(setsid sh -c 'sleep 1000 & sleep 1000' &); echo ready; sleep 1000"
)
AT_LEAST = 18  # processes of three such sessions, as the issue counted them

EMBEDDER = """\
import os, signal, subprocess, sys
import trio, trio_pty
from trio_pty import Limits, Wait
from trio_pty.posix import proc

how, state_dir, script, grace = sys.argv[1], sys.argv[2] or None, sys.argv[3], sys.argv[4]
bystander_file = sys.argv[5]

async def main():
    limits = Limits(terminate_grace=float(grace), max_sessions=64, max_sessions_per_owner=64)
    async with trio_pty.open_manager(limits, state_dir=state_dir) as manager:
        print(manager.id, flush=True)
        if how == "burst":
            started = []
            async def one():
                await manager.spawn("bash", ["-c", script], description="burst")
                started.append(1)
            async with trio.open_nursery() as nursery:
                for _ in range(24):
                    nursery.start_soon(one)
                while len(started) < 6:
                    await trio.sleep(0.001)
                os.kill(os.getpid(), signal.SIGKILL)  # with 18 spawns in flight
        for _ in range(3):
            ready = Wait(pattern="ready")
            await manager.spawn("bash", ["-c", script], description="s", ready=ready)
        # Not a session: the program's own child, which no teardown may touch.
        bystander = subprocess.Popen(["sleep", "1000"], start_new_session=True)
        with open(bystander_file, "w") as record:  # for the test to end it, whatever happens
            record.write(f"{bystander.pid} {proc.read_stat(bystander.pid).start_time}")
        print("READY", bystander.pid, flush=True)
        if how == "exit":
            os._exit(3)
        if how == "term":
            os.kill(os.getpid(), signal.SIGTERM)  # no handler: Python's default action
        await trio.sleep(1000)  # until the test kills it

trio.run(main)
"""


# README's recipe ("Stopped by SIGTERM"), with an application that starts sessions.
RECIPE = """\
import signal, sys
import trio, trio_pty
from trio_pty import Limits, Wait

async def your_application(manager):
    for _ in range(3):
        ready = Wait(pattern="ready")
        await manager.spawn("bash", ["-c", sys.argv[1]], description="s", ready=ready)
    print("READY", flush=True)
    await trio.sleep_forever()

async def main():
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio_pty.open_manager(Limits(terminate_grace=float(sys.argv[2]))) as manager:
            print(manager.id, flush=True)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(your_application, manager)
                async for _ in signals:  # the first SIGTERM or Ctrl-C
                    break
                nursery.cancel_scope.cancel()  # stop the application first
        # leaving open_manager tore every session down, bounded by close_timeout
    print("CLOSED", flush=True)

trio.run(main)
"""


def _alive(manager_id: str) -> list[proc.ProcEntry]:
    """Living processes carrying this manager's tag, wherever they are."""
    return proc.scan({}).with_tags_of(manager_id)


def _keepers(manager_id: str) -> list[proc.ProcEntry]:
    """Living keepers of this manager."""
    return [e for e in proc.scan({}).entries.values() if leaks.keeper_of(e) == manager_id]


def _end(entries: list[proc.ProcEntry]) -> None:
    """SIGKILL each through a pidfd after a start-time check (cleanup, and the test's own
    kills of a keeper)."""
    for entry in entries:
        proc.signal_process(entry, signal.SIGKILL)


async def _line(process: subprocess.Popen[bytes], timeout: float = 20) -> str:
    assert process.stdout is not None
    with trio.fail_after(timeout):
        line = await trio.to_thread.run_sync(process.stdout.readline, abandon_on_cancel=True)
    assert line, "the embedder ended before printing"
    return line.decode().strip()


async def _died(process: subprocess.Popen[bytes], timeout: float = 20) -> float:
    """Wait for the process to end (bounded); when it was seen ended, in trio time."""
    with trio.fail_after(timeout):
        while process.poll() is None:  # noqa: ASYNC110 - another process, no event to wait on
            await trio.sleep(0.005)
    return trio.current_time()


@asynccontextmanager
async def _embedder(
    tmp_path: Path, how: str, *, state_dir: Path | None = None
) -> AsyncIterator[tuple[subprocess.Popen[bytes], str]]:
    """A trio program embedding a manager (see EMBEDDER, or RECIPE for "recipe"), and its
    manager's id. Whatever of it is still alive at the end is ended by pid, its bystander
    (its own child, which no teardown ends) included."""
    bystander_file = tmp_path / f"bystander-{how}.pid"
    command = [
        *(sys.executable, "-c", EMBEDDER, how, str(state_dir or ""), STUBBORN, str(GRACE)),
        str(bystander_file),
    ]
    if how == "recipe":
        command = [sys.executable, "-c", RECIPE, STUBBORN, str(GRACE)]
    with open(tmp_path / f"embedder-{how}.err", "wb") as stderr:  # noqa: ASYNC230
        process = subprocess.Popen(  # noqa: ASYNC220 - its pipe is read line by line
            command,
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    manager_id = ""
    try:
        manager_id = await _line(process)
        yield process, manager_id
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        bystander = _bystander(bystander_file)
        if bystander is not None:
            _end([bystander])
        assert process.stdout is not None
        process.stdout.close()
        if manager_id:
            _end(_alive(manager_id) + _keepers(manager_id))


def _bystander(path: Path) -> proc.ProcEntry | None:
    """The embedder's own child, if it started one and it still runs (the same process:
    its pid and start time)."""
    try:
        pid, start_time = map(int, path.read_text().split())
    except (OSError, ValueError):
        return None
    entry = proc.read_stat(pid)
    alive = entry is not None and entry.start_time == start_time and not entry.dead
    return entry if alive else None


async def _all_gone_within(manager_id: str, died_at: float, bound: float) -> None:
    """Nothing of this manager alive within `bound` of its death, and its keeper gone too."""
    await poll_until(lambda: not _alive(manager_id), timeout=bound)
    assert trio.current_time() - died_at <= bound
    await poll_until(lambda: not _keepers(manager_id), timeout=5)


@pytest.mark.parametrize("how", ["exit", "term", "kill"])
async def test_an_embedding_program_that_dies_leaves_nothing(tmp_path: Path, how: str) -> None:
    """os._exit(3), SIGTERM (no handler) or SIGKILL: no code of the manager runs, the keeper
    sees its pidfd and tears the sessions down as the manager would have; the program's own
    child, which is no session's, lives on."""
    with trio.fail_after(40):
        async with _embedder(tmp_path, how) as (process, manager_id):
            bystander = proc.read_stat(int((await _line(process)).split()[1]))
            assert bystander is not None
            await poll_until(lambda: len(_alive(manager_id)) >= AT_LEAST)
            assert len(_keepers(manager_id)) == 1
            if how == "kill":
                process.send_signal(signal.SIGKILL)
            died_at = await _died(process)
            expected = {"exit": 3, "term": -signal.SIGTERM, "kill": -signal.SIGKILL}[how]
            assert process.returncode == expected
            try:
                await _all_gone_within(manager_id, died_at, BOUND)
                still = proc.read_stat(bystander.pid)
                assert still is not None and still.key == bystander.key and not still.dead
            finally:
                _end([bystander])


# Runs as pid 1 of a new pid namespace, as in a container: the embedder's session and group
# began outside it, so /proc reads their ids as 0 there (CI saw exactly that). It starts the
# embedder, lets it die by os._exit, and prints how many of its processes were left.
IN_A_CONTAINER = """\
import subprocess, sys, time
from trio_pty.posix import proc

embedder, stderr_path, bound = sys.argv[1:-2], sys.argv[-2], float(sys.argv[-1])
with open(stderr_path, "wb") as stderr:
    child = subprocess.Popen(embedder, stdout=subprocess.PIPE, stderr=stderr)
manager_id = child.stdout.readline().decode().strip()
child.wait(30)
deadline = time.monotonic() + bound
while proc.scan({}).with_tags_of(manager_id) and time.monotonic() < deadline:
    time.sleep(0.01)
print("left", len(proc.scan({}).with_tags_of(manager_id)), flush=True)
deadline = time.monotonic() + 5  # the keeper logs its count last, then exits
while b"processes ended" not in open(stderr_path, "rb").read() and time.monotonic() < deadline:
    time.sleep(0.01)
"""


async def test_sessions_started_in_a_pid_namespace_are_recorded_and_ended(tmp_path: Path) -> None:
    """Regressions: (1) the session record held the leader's group and session ids, read
    before its `setsid -c` step ran, so they were the embedder's; in a container they read
    as 0 and the keeper refused every record as malformed. (2) A manager that died while its
    keeper was still starting (~20 ms) left the keeper ignoring the records in the pipe.
    Either way it counted no sessions (the tag scan still found the tagged processes)."""
    probe = await trio.run_process(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_stderr=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {probe.stderr.decode().strip()}")
    err = tmp_path / "embedder.err"
    embedder = [sys.executable, "-c", EMBEDDER, "exit", "", STUBBORN, str(GRACE), "/dev/null"]
    driver = [sys.executable, "-c", IN_A_CONTAINER, *embedder, str(err), str(BOUND)]
    # The namespace's pid 1 is the driver: when it exits, the kernel ends all that is left.
    done = await trio.run_process(
        ["unshare", "--pid", "--fork", "--mount-proc", *driver], capture_stdout=True
    )
    log = err.read_text()
    assert done.stdout.decode().split() == ["left", "0"], log
    assert "malformed" not in log
    assert "tearing down 3 sessions" in log


async def test_the_sigterm_recipe_is_a_normal_shutdown(tmp_path: Path) -> None:
    """README's recipe: SIGTERM cancels the application and closes the manager, which tears
    everything down itself (exit 0); the keeper has nothing to do and goes."""
    with trio.fail_after(40):
        async with _embedder(tmp_path, "recipe") as (process, manager_id):
            assert await _line(process) == "READY"
            await poll_until(lambda: len(_alive(manager_id)) >= AT_LEAST)
            process.send_signal(signal.SIGTERM)
            assert await _line(process) == "CLOSED"
            assert _alive(manager_id) == []
            await _died(process)
            assert process.returncode == 0
            await poll_until(lambda: not _keepers(manager_id))
    assert "keeper" not in (tmp_path / "embedder-recipe.err").read_text()


async def test_sigkill_during_a_spawn_burst_leaves_nothing(tmp_path: Path) -> None:
    """Killed with 18 spawns in flight: sessions the keeper never heard of (started, not yet
    registered) are found by their tags."""
    with trio.fail_after(40):
        async with _embedder(tmp_path, "burst") as (process, manager_id):
            died_at = await _died(process)
            assert process.returncode == -signal.SIGKILL
            await _all_gone_within(manager_id, died_at, BOUND)


async def test_a_killed_keeper_is_replaced_and_the_replacement_guards(tmp_path: Path) -> None:
    with trio.fail_after(40):
        async with _embedder(tmp_path, "stay") as (process, manager_id):
            assert (await _line(process)).startswith("READY")
            (first,) = _keepers(manager_id)
            await trio.sleep(1.1)  # a keeper that dies within a second is not replaced
            _end([first])
            await poll_until(lambda: [e.pid for e in _keepers(manager_id)] not in ([], [first.pid]))
            process.send_signal(signal.SIGKILL)
            died_at = await _died(process)
            await _all_gone_within(manager_id, died_at, BOUND)


async def test_a_keeper_killed_again_and_again_is_always_replaced(tmp_path: Path) -> None:
    """A session of our uid finds the keeper (its argv is world-readable) and kills it as
    soon as it starts, three times: each is replaced, and the last still ends the sessions
    after the manager's SIGKILL. (Before, a keeper that died within a second of its start
    was not replaced: two `kill -9` switched the crash guard off.)"""
    with trio.fail_after(40):
        async with _embedder(tmp_path, "stay") as (process, manager_id):
            assert (await _line(process)).startswith("READY")
            killed: list[int] = []

            def new_keepers() -> list[proc.ProcEntry]:
                return [e for e in _keepers(manager_id) if e.pid not in killed]

            for _ in range(3):
                await poll_until(lambda: new_keepers() != [])
                (keeper_entry,) = new_keepers()
                _end([keeper_entry])
                killed.append(keeper_entry.pid)
            await poll_until(lambda: new_keepers() != [])
            process.send_signal(signal.SIGKILL)
            died_at = await _died(process)
            await _all_gone_within(manager_id, died_at, BOUND)


async def test_no_keeper_is_left_after_a_normal_close() -> None:
    with trio.fail_after(20):
        fds = leaks.open_fds()
        async with trio_pty.open_manager(Limits(terminate_grace=GRACE)) as manager:
            # Its environment reads empty until its exec has loaded the program, a moment
            # after the spawn returned (long under load).
            await poll_until(lambda: len(_keepers(manager.id)) == 1)
            (guard,) = _keepers(manager.id)
            assert guard.ppid == os.getpid() and guard.sid == guard.pid  # its own session
            await manager.spawn("sleep", ["100"], description="s")
        assert proc.read_stat(guard.pid) is None  # gone and reaped
        assert leaks.open_fds() == fds


# A manager run as a non-root uid, whose session (the same uid) probes the manager's keeper
# and, as the control that the probe is sound, the manager itself (left dumpable here).
KEEPER_PROBE = r"""
import json, os, sys
for directory in json.loads(sys.argv[1]):
    import site; site.addsitedir(directory)
import trio, trio_pty

PROBE = (
    "for who in keeper=$0 parent=$PPID; do p=${who#*=}; "
    "if cat /proc/$p/environ >/dev/null 2>&1; "
    "then echo ${who%=*}-environ=read; else echo ${who%=*}-environ=denied; fi; "
    "if (exec 3</proc/$p/mem) 2>/dev/null; "
    "then echo ${who%=*}-mem=read; else echo ${who%=*}-mem=denied; fi; done; echo probe-end"
)

def keeper_pid():
    # Our child started by `python -S` (a session leader's argv is its command's).
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as children:
            for pid in children.read().split():
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    if b"-S" in cmdline.read().split(b"\0"):
                        return int(pid)
    return None

async def main():
    async with trio_pty.open_manager(root="/") as manager:
        # Its argv shows only once its exec has loaded the program, a moment after the
        # spawn returned: under load that moment is long.
        with trio.fail_after(10):
            while (pid := keeper_pid()) is None:
                await trio.sleep(0.01)
        # It hardens itself once its Python runs; its /proc files then belong to root.
        with trio.move_on_after(10):
            while os.stat(f"/proc/{pid}/environ").st_uid != 0:
                await trio.sleep(0.01)
        info = await manager.spawn(
            "sh", ["-c", PROBE, str(pid)], description="probe",
            ready=trio_pty.Wait(pattern="probe-end", timeout_ms=20000),
        )
        words = dict(line.text.split("=", 1) for line in info.ready.lines if "=" in line.text)
    print(json.dumps({"uid": os.getuid(), **words}))

trio.run(main)
"""


async def test_the_keeper_is_unreadable_to_sessions_of_its_uid() -> None:
    """The keeper makes itself non-dumpable: a session of the same non-root uid cannot read
    its /proc/PID/environ or open its mem (another uid never could). Run as uid 65534 when
    the tests run as root, since root reads any process's /proc files."""
    with trio.fail_after(60):
        done = await trio.run_process(
            [*unprivileged_prefix(), "-c", KEEPER_PROBE, json.dumps(site_dirs())],
            cwd="/",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads(done.stdout.decode().splitlines()[-1])
    assert result["uid"] != 0
    # The control: the same probe reads the manager's process, which is dumpable here.
    assert (result["parent-environ"], result["parent-mem"]) == ("read", "read")
    assert (result["keeper-environ"], result["keeper-mem"]) == ("denied", "denied")


# ------------------------------------------------------------------ the keeper's teardown itself

# Leaders of the direct tests below: (how it reacts, shell script). Each is a session leader
# the test starts itself (not a session of a manager) and names to `keeper.tear_down` in a
# record, as a dead manager's keeper would be told.
DIES_ON_HUP = "trap '' TERM; touch ready; exec sleep 1000"
TERM_HANDLER = (
    "trap '' HUP; trap 'echo bye > term-handled; exit 0' TERM; touch ready; "
    "while :; do sleep 0.01; done"
)
STUBBORN_LEADER = "trap '' HUP TERM; touch ready; exec sleep 1000"


@asynccontextmanager
async def _leaders(
    tmp_path: Path, scripts: dict[str, str]
) -> AsyncIterator[dict[str, tuple[subprocess.Popen[bytes], keeper.Leader]]]:
    """Start each script as the leader of its own session in its own directory, once its
    traps are set, with the record the keeper would hold; end whatever is left by pid."""
    started: dict[str, tuple[subprocess.Popen[bytes], keeper.Leader]] = {}
    try:
        for name, script in scripts.items():
            workdir = tmp_path / name
            workdir.mkdir()
            process = subprocess.Popen(  # noqa: ASYNC220 - a leader, waited on at the end
                ["sh", "-c", script], cwd=workdir, start_new_session=True
            )
            leader = keeper.leader_of(name, "o", process.pid)
            assert leader is not None
            started[name] = process, leader
        for name in scripts:  # the traps are set (they outlive the exec that may follow)
            ready = tmp_path / name / "ready"
            await poll_until(ready.exists, timeout=5)
        yield started
    finally:
        for process, _ in started.values():
            if process.poll() is None:
                process.kill()
            process.wait(5)


async def test_the_keepers_teardown_hangs_up_then_terminates_then_kills_at_the_grace(
    tmp_path: Path,
) -> None:
    """The crash path's sequence (the manager's schedule, driven by the keeper): a leader
    that dies on the hang-up goes at once, one with a SIGTERM handler runs it (no SIGKILL
    first), one that ignores both is killed at the grace, and two scans confirm the end."""
    grace = 1.5
    scripts = {"hup": DIES_ON_HUP, "term": TERM_HANDLER, "stubborn": STUBBORN_LEADER}
    with trio.fail_after(20):
        async with _leaders(tmp_path, scripts) as started:
            gone: dict[str, float] = {}
            result: list[keeper.Outcome] = []

            async def tear_down() -> None:
                leaders = [leader for _, leader in started.values()]
                outcome = await trio.to_thread.run_sync(
                    lambda: keeper.tear_down(
                        ["no-manager-of-this-test"], leaders, grace=grace, close_timeout=5.0
                    )
                )
                result.append(outcome)

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tear_down)
                while len(gone) < len(started):  # when each one ended (an outside view)
                    for name, (process, _) in started.items():
                        if name not in gone and process.poll() is not None:
                            gone[name] = trio.current_time() - start
                    await trio.sleep(0.005)
            took = trio.current_time() - start
    assert result[0].survivors == [] and result[0].processes >= 3
    assert gone["hup"] < grace / 2, gone
    assert (tmp_path / "term" / "term-handled").read_text() == "bye\n"
    assert gone["term"] < grace / 2, gone
    assert grace <= gone["stubborn"] < grace + 1.0, gone
    assert took < grace + 1.5, took


class _FakeClock:
    """The keeper's clock and sleep, simulated: each reading moves time on by 20 µs, and a
    sleep by exactly its length; `action` runs once, before the first sleep that ends at or
    after `at`."""

    def __init__(self, at: float, action: Callable[[], None]) -> None:
        self.now = 0.0
        self._at = at
        self._action: Callable[[], None] | None = action

    def clock(self) -> float:
        self.now += 20e-6
        return self.now

    def sleep(self, seconds: float) -> None:
        if self.now + seconds >= self._at and self._action is not None:
            action, self._action = self._action, None
            action()
        self.now += seconds


async def test_the_keepers_grace_ends_at_kill_at_when_the_round_there_finds_nothing(
    tmp_path: Path,
) -> None:
    """The manager's fix, on the crash path: the round planned at `kill_at` takes the newest
    snapshot; when the one before it (at a 64 ms tick, 0.6 ms before `kill_at`) found the
    last process gone, that round finds nothing alive and must still end the grace, or it
    would be planned at `kill_at` again and again on the same snapshot until the deadline.
    On a simulated clock (the real processes, the keeper's real scans)."""
    tick = schedule.LAST_TICK
    last_tick = (0.9 // tick + 1) * tick  # the first 64 ms tick after 0.9 s
    kill_at = last_tick + 0.0006  # between the tick and the next millisecond
    async with _leaders(tmp_path, {"stubborn": STUBBORN_LEADER}) as started:
        process, leader = started["stubborn"]

        def die() -> None:  # just before the tick's scan
            process.kill()
            process.wait(5)

        fake = _FakeClock(last_tick, die)
        outcome = keeper.tear_down(
            ["no-manager-of-this-test"],
            [leader],
            grace=kill_at - 20e-6,  # counted from the clock's first reading
            close_timeout=1.5,
            clock=fake.clock,
            sleep=fake.sleep,
        )
    assert outcome.survivors == [] and outcome.processes == 1
    assert fake.now < kill_at + 0.01, fake.now - kill_at  # not at the deadline (1.5 s)


# ------------------------------------------------------------------ the state directory


async def test_a_restart_on_the_state_dir_ends_what_a_killed_manager_and_keeper_left(
    tmp_path: Path,
) -> None:
    """The keeper is SIGKILLed with the manager, so nothing runs the teardown; the next
    manager on the same state directory does, before `open_manager` returns."""
    state = tmp_path / "state"
    with trio.fail_after(40):
        async with _embedder(tmp_path, "stay", state_dir=state) as (process, manager_id):
            assert (await _line(process)).startswith("READY")
            records = sorted(p.name for p in (state / manager_id).iterdir())
            assert len(records) == 4 and "manager.json" in records
            await poll_until(lambda: len(_alive(manager_id)) >= AT_LEAST)
            left = {e.key for e in _alive(manager_id)}
            process.send_signal(signal.SIGSTOP)  # it would replace a keeper killed first
            _end(_keepers(manager_id))
            process.send_signal(signal.SIGKILL)
            await _died(process)
            await poll_until(lambda: not _keepers(manager_id))
            await trio.sleep(GRACE + 0.5)  # nothing ends them by itself
            assert left <= {e.key for e in _alive(manager_id)}
            async with trio_pty.open_manager(Limits(terminate_grace=GRACE), state_dir=state):
                assert _alive(manager_id) == []
                assert not (state / manager_id).exists()
        assert list(state.iterdir()) == []


async def test_a_record_naming_a_process_we_did_not_start_is_left_alone(tmp_path: Path) -> None:
    """A recycled pid: the records of a dead manager name a live process that is not ours
    (same pid, another start time), as its manager and as a session leader, with its group
    and session; and a record of another boot names it with its real start time. It lives
    on; the records go."""
    state = tmp_path / "state"
    bystander = subprocess.Popen(["sleep", "100"], start_new_session=True)  # noqa: ASYNC220
    try:
        entry = proc.read_stat(bystander.pid)
        assert entry is not None
        for name, boot, start in [
            ("0123456789abcdef", keeper.boot_id(), entry.start_time + 1),
            ("fedcba9876543210", "another-boot", entry.start_time),
        ]:
            folder = state / name
            folder.mkdir(parents=True, mode=0o700)
            state.chmod(0o700)
            record = {"manager": name, "pid": bystander.pid, "start_time": start, "boot_id": boot}
            (folder / "manager.json").write_text(json.dumps(record))
            session = keeper.Leader("pty_1", "o", bystander.pid, start)
            (folder / "pty_1.session.json").write_text(json.dumps(session.to_json()))
        with trio.fail_after(20):
            async with trio_pty.open_manager(Limits(terminate_grace=GRACE), state_dir=state):
                pass
        current = proc.read_stat(bystander.pid)
        assert current is not None and current.key == entry.key and not current.dead
        assert list(state.iterdir()) == []
    finally:
        bystander.kill()
        bystander.wait(5)


async def test_a_live_manager_on_the_same_state_dir_is_left_alone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with trio.fail_after(20):
        async with trio_pty.open_manager(Limits(terminate_grace=GRACE), state_dir=state) as first:
            info = await first.spawn("sleep", ["100"], description="first's")
            async with trio_pty.open_manager(Limits(terminate_grace=GRACE), state_dir=state):
                assert first.get(info.id).status == "running"
                assert len(list(state.iterdir())) == 2
            assert first.get(info.id).status == "running"


async def test_a_state_dir_others_can_write_to_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)
    with pytest.raises(PermissionError, match="not be writable by group or others"):
        async with trio_pty.open_manager(state_dir=state):
            pass


# ------------------------------------------------------------------ trio-pty serve


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_trio_pty_serve_killed_by_sigkill_leaves_nothing(
    tmp_path: Path, log_format: str
) -> None:
    """...and the keeper's lines, in the stderr it shares with the server, are in the
    server's log format (with JSON, every line of that stream stays one JSON object)."""
    from trio_pty.client.client import connect
    from trio_pty.wire.methods import SpawnParams

    # terminate_grace 0.3 in its config
    server = start_server(tmp_path, "--log-format", log_format)
    manager_id = ""
    try:
        with trio.fail_after(40):
            async with connect(server.url, server.token) as client:
                for _ in range(3):
                    info = await client.request(
                        SpawnParams(command="bash", args=["-c", STUBBORN], description="stubborn")
                    )
                # Unreadable for a moment around the leader's exec: wait it out.
                await poll_until(lambda: proc.read_tags(info.pid) is not None)
                tags = proc.read_tags(info.pid)
                assert tags is not None
                manager_id = tags[0]
                await poll_until(lambda: len(_alive(manager_id)) >= AT_LEAST)
                server.proc.send_signal(signal.SIGKILL)
                died_at = await _died(server.proc)
            await _all_gone_within(manager_id, died_at, 0.3 + 1.0)
        lines = server.stderr().splitlines()
        if log_format == "json":
            records = {}
            for line in lines:  # every line is one JSON object
                record = json.loads(line)
                records[record["event"]] = record
            assert records["keeper_teardown"]["sessions"] == 3
            assert records["keeper_teardown"]["logger"] == "trio_pty.keeper"
            assert records["keeper_done"]["processes"] >= AT_LEAST
            assert records["keeper_done"]["survivors"] == []
        else:
            assert any("died; tearing down 3 sessions" in line for line in lines), lines
    finally:
        server.stop()
        if manager_id:
            _end(_alive(manager_id) + _keepers(manager_id))


async def test_trio_pty_serve_restarted_on_its_state_dir_ends_what_it_left(tmp_path: Path) -> None:
    """`trio-pty serve --state-dir` SIGKILLed together with its keeper; the next one on the
    same directory ends what it left before it prints its URL, and logs one line."""
    from trio_pty.client.client import connect
    from trio_pty.wire.methods import SpawnParams

    state = tmp_path / "state"
    first = start_server(tmp_path, "--state-dir", str(state))
    manager_id = ""
    try:
        with trio.fail_after(40):
            async with connect(first.url, first.token) as client:
                for _ in range(3):
                    info = await client.request(
                        SpawnParams(command="bash", args=["-c", STUBBORN], description="stubborn")
                    )
            # Unreadable for a moment around the leader's exec: wait it out.
            await poll_until(lambda: proc.read_tags(info.pid) is not None)
            tags = proc.read_tags(info.pid)
            assert tags is not None
            manager_id = tags[0]
            await poll_until(lambda: len(_alive(manager_id)) >= AT_LEAST)
            first.proc.send_signal(signal.SIGSTOP)  # it would replace a keeper killed first
            _end(_keepers(manager_id))
            first.proc.send_signal(signal.SIGKILL)
            await _died(first.proc)
            await poll_until(lambda: not _keepers(manager_id))
            assert len(_alive(manager_id)) >= AT_LEAST  # nothing else ends them
            second = start_server(tmp_path, "--state-dir", str(state))  # returns at its URL
            try:
                assert _alive(manager_id) == []
            finally:
                second.stop()
            assert "1 dead managers left 3 sessions" in second.stderr()
    finally:
        first.stop()
        if manager_id:
            _end(_alive(manager_id) + _keepers(manager_id))


def test_trio_pty_serve_refuses_a_state_dir_others_can_write_to(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    done = subprocess.run(
        [sys.executable, "-m", "trio_pty", "serve", "--port", "0", "--state-dir", str(state)],
        capture_output=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done
    assert b"not be writable by group or others" in done.stderr
    assert done.stdout == b""
