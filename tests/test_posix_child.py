"""The one-exec start of a session leader (`posix/child.py`, through `spawn.start_child`) with
real children: what the child gets, what it does not, and waiting for it."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

import trio_pty
from trio_pty import Limits, errors
from trio_pty.posix import child, libc, proc, spawn

from .helpers import wait_for_status, wait_for_text

FAST = Limits(terminate_grace=0.3)


@contextmanager
def pty_and_workdir(workdir: Path) -> Iterator[tuple[int, int, int]]:
    master, slave = spawn.open_pty(24, 80)
    cwd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield master, slave, cwd
    finally:
        os.close(cwd)
        os.close(slave)
        os.close(master)


async def test_a_descriptor_left_inheritable_does_not_reach_the_child() -> None:
    """Every descriptor from 3 up is closed in the child, not only the close-on-exec ones
    (what `close_fds=True` did): a library of the embedding program may leave one open."""
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    script = "for f in /proc/$$/fd/*; do echo ${f##*/}; done; echo done"
    try:
        with trio.fail_after(10):
            async with trio_pty.open_manager(FAST) as manager:
                info = await manager.spawn("sh", ["-c", script + "; sleep 100"], description="fds")
                text = await wait_for_text(manager, info.id, "done")
        # sh's own glob may hold one more descriptor for the directory it lists.
        descriptors = {int(word) for word in text.split()[:-1]}
        assert {0, 1, 2} <= descriptors and write_end not in descriptors, text
        assert len(descriptors - {0, 1, 2}) <= 1, text
    finally:
        os.close(read_end)
        os.close(write_end)


async def test_a_relative_path_entry_counts_from_the_workdir(tmp_path: Path) -> None:
    """`argv[0]` is looked up as execvp would in the child: a relative PATH entry names a
    directory below the workdir (the child's, after its fchdir), not below ours."""
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "only-here"
    tool.write_text("#!/bin/sh\necho found in $(pwd)\n")
    tool.chmod(0o755)
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST, root=str(tmp_path)) as manager:
            info = await manager.spawn(
                "only-here",
                description="relative PATH",
                workdir=str(tmp_path),
                env={"PATH": f"bin:{os.defpath}"},
            )
            await wait_for_status(manager, info.id, "exited")
            text = await wait_for_text(manager, info.id, "found in")
    assert f"found in {tmp_path}" in text


async def test_the_child_is_waited_for_by_many_and_reaped_once(tmp_path: Path) -> None:
    """`wait` from several tasks at once (the exit watcher and the teardown both wait), and
    `returncode` as a non-blocking reap: one reap, the pidfd closed after it (the leak
    fixture counts descriptors), signals to a reaped child are a no-op."""
    with pty_and_workdir(tmp_path) as (_master, slave, cwd):
        child = spawn.start_child(
            "sh", ["sh", "-c", "sleep 0.2; exit 7"], slave=slave, env={}, cwd_fd=cwd
        )
        assert os.getsid(child.pid) == child.pid
        assert child.returncode is None
        codes: list[int] = []

        async def waiter() -> None:
            codes.append(await child.wait())

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(waiter)
        assert codes == [7, 7, 7] and child.returncode == 7
        child.send_signal(signal.SIGTERM)  # reaped: nothing to reach, no error
        assert proc.read_stat(child.pid) is None  # reaped, not left a zombie


async def test_a_signal_death_is_a_negative_returncode(tmp_path: Path) -> None:
    with pty_and_workdir(tmp_path) as (_master, slave, cwd):
        child = spawn.start_child("sleep", ["sleep", "100"], slave=slave, env={}, cwd_fd=cwd)
        child.kill()
        with trio.fail_after(10):
            assert await child.wait() == -signal.SIGKILL


async def test_an_exec_failure_is_spawn_failed_and_leaves_no_child(tmp_path: Path) -> None:
    """posix_spawn reports the exec's own error; glibc reaps the failed child (the leak
    fixture fails a test that leaves a child process)."""
    plain = tmp_path / "plain"
    plain.write_text("not a program\n")
    plain.chmod(0o755)
    with pty_and_workdir(tmp_path) as (_master, slave, cwd):
        for argv, reason in ((["./plain"], "Exec format error"), (["nowhere"], "not found")):
            with pytest.raises(errors.SpawnFailed, match=reason):
                spawn.start_child(
                    argv[0], argv, slave=slave, env={"PATH": "/nonexistent"}, cwd_fd=cwd
                )


async def test_a_leader_reaped_by_someone_else_ends_with_code_0(tmp_path: Path) -> None:
    """An embedding program's waitpid(-1) can take the status first: the child still ends
    (returncode 0, as Popen says then) instead of raising ChildProcessError."""
    with pty_and_workdir(tmp_path) as (_master, slave, cwd):
        child = spawn.start_child("sh", ["sh", "-c", "exit 5"], slave=slave, env={}, cwd_fd=cwd)
        with trio.fail_after(10):
            pid, _status = await trio.to_thread.run_sync(os.waitpid, child.pid, 0)
            assert pid == child.pid
            assert await child.wait() == 0
        assert child.returncode == 0


@pytest.mark.parametrize("where", ["argv", "env"])
def test_a_nul_in_a_string_is_refused_not_cut_short(tmp_path: Path, where: str) -> None:
    """A C string ends at its first NUL: `sh -c "true\\0; rm x"` would run `true`. The
    manager refuses NUL in every text before this point; the start refuses it as well."""
    argv = ["/bin/sh", "-c", "true\0; echo no"] if where == "argv" else ["/bin/true"]
    env = {"A": "b\0c"} if where == "env" else {}
    with (
        pty_and_workdir(tmp_path) as (_master, slave, cwd),
        pytest.raises(ValueError, match="embedded NUL"),
    ):
        child.start_leader(argv[0], argv, env, tty=slave, cwd_fd=cwd)


# ------------------------------------------------------------------ the C library (posix/libc.py)


@pytest.mark.parametrize("missing", ["posix_spawn", *libc.SPAWN_EXTENSIONS])
def test_a_libc_without_the_posix_spawn_extensions_is_named(missing: str) -> None:
    """On a C library without them (older glibc, musl) every spawn would fail: the check
    names the missing function and what it takes. (A fake lookup: this machine has them.)"""
    with pytest.raises(libc.MissingLibcFunction, match=f"no {missing}:.*glibc 2.34\\+"):
        libc.require_spawn_support(has=lambda name: name != missing)
    libc.require_spawn_support()  # the real C library has every one


async def test_open_manager_refuses_at_once_without_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before anything starts (no keeper, no subreaper), not at the first spawn."""
    monkeypatch.setattr(libc, "_has", lambda name: name != libc.SPAWN_EXTENSIONS[-1])
    with pytest.raises(libc.MissingLibcFunction, match=libc.SPAWN_EXTENSIONS[-1]):
        async with trio_pty.open_manager(FAST):
            raise AssertionError("opened")


def test_every_binding_is_typed_and_checks_errno(tmp_path: Path) -> None:
    """Each function has its argument and result types declared (without `argtypes` a
    pointer or a long is passed as a C int), and a failure is an OSError with the errno
    the call set."""
    bindings = [v for v in vars(libc).values() if hasattr(v, "argtypes") and hasattr(v, "errcheck")]
    assert len(bindings) >= 15
    for function in bindings:
        assert function.argtypes is not None and function.restype is not None, function
    with pytest.raises(OSError) as failed:
        libc.prctl(-1)
    assert failed.value.errno == errno.EINVAL
    with pytest.raises(OSError) as failed:
        libc.timerfd_create(-1, 0)
    assert failed.value.errno == errno.EINVAL
    missing = os.fsencode(tmp_path / "missing")
    with pytest.raises(OSError) as failed:
        libc.openat2(-1, missing, flags=os.O_RDONLY, resolve=0)
    assert failed.value.errno in (errno.ENOENT, errno.ENOSYS, errno.EPERM)


def test_no_module_but_libc_uses_ctypes() -> None:
    package = Path(trio_pty.__file__).parent
    users = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "import ctypes" in path.read_text()
    )
    assert users == ["posix/libc.py"]
