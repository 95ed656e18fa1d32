"""Input and policy on real PTYs: bounded writes, send-and-wait, readiness, authorization."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

import trio_pty
from trio_pty import Limits, Wait, errors
from trio_pty.policy.authorize import AuthorizationRequest, RulesAuthorizer

from .helpers import wait_for_status, wait_for_text

LIMITS = Limits(terminate_grace=0.3, io_timeout=0.5)


async def test_write_to_a_child_that_never_reads_times_out_without_wedging() -> None:
    with trio.fail_after(15):
        async with trio_pty.open_manager(LIMITS) as manager:
            deaf = await manager.spawn("sleep", ["100"], description="deaf")
            other = await manager.spawn("cat", description="other")
            line = "x" * 1000 + "\n"
            start = trio.current_time()
            with pytest.raises(errors.WriteTimeout) as timed_out:
                for _ in range(200):
                    await manager.write(deaf.id, line)
            elapsed = trio.current_time() - start
            assert 0.5 <= elapsed < 1.5, elapsed
            assert 0 <= timed_out.value.bytes_written < len(line)
            assert "bytes went in" in str(timed_out.value)
            # Another session (and the manager) keep working.
            await manager.write(other.id, "still fine\n")
            await wait_for_text(manager, other.id, "still fine\nstill fine")
            assert manager.get(deaf.id).status == "running"


async def test_a_megabyte_paste_in_16k_writes_goes_through() -> None:
    block = ("y" * 63 + "\n") * 256  # 16 KiB of lines
    with trio.fail_after(30):
        async with trio_pty.open_manager(LIMITS) as manager:
            script = "stty -echo; echo ready; wc -c"
            info = await manager.spawn("sh", ["-c", script], description="paste")
            await wait_for_text(manager, info.id, "ready")  # echo is off before the paste
            for _ in range(64):
                await manager.write(info.id, block)
            await manager.write(info.id, "\\x04", escapes=True)  # end of input
            text = await wait_for_text(manager, info.id, str(64 * len(block)), timeout=20)
            assert str(1024 * 1024) in text


async def test_writes_are_bounded_and_checked() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("cat", description="bounds")
            await manager.write(info.id, "é" * (LIMITS.max_write_bytes // 2))
            with pytest.raises(errors.InvalidInput, match="data"):
                await manager.write(info.id, "é" * (LIMITS.max_write_bytes // 2) + "x")
            with pytest.raises(errors.InvalidInput, match="position 3"):
                await manager.write(info.id, "abc\\q", escapes=True)
            with pytest.raises(errors.InvalidInput, match="NUL"):
                await manager.write(info.id, "a\0b")


async def test_send_and_wait_with_a_python_repl() -> None:
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn(
                "python3", ["-q", "-i"], description="repl", ready=Wait(pattern=">>> ")
            )
            assert info.ready is not None and info.ready.reason == "matched"
            result = await manager.write(
                info.id, "6 * 7\n", wait=Wait(pattern="^>>> ", timeout_ms=5000)
            )
            assert result.output is not None and result.output.reason == "matched"
            texts = [line.text for line in result.output.lines]
            assert "42" in texts and texts[0] == ">>> 6 * 7"
            assert result.offset > 0 and result.bytes_written == len("6 * 7\n")


async def test_readiness_of_an_http_server() -> None:
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn(
                "python3",
                ["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"],
                description="dev server",
                ready=Wait(pattern="Serving HTTP", timeout_ms=10_000),
            )
            assert info.ready is not None and info.ready.reason == "matched"
            assert any("Serving HTTP" in line.text for line in info.ready.lines)


async def test_readiness_never_counts_silence() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn(
                "sleep", ["100"], description="silent", ready=Wait(idle_ms=50, timeout_ms=300)
            )
            assert info.ready is not None and info.ready.reason == "timeout"
            exited = await manager.spawn(
                "true", description="quick", ready=Wait(pattern="x", timeout_ms=5000)
            )
            assert exited.ready is not None and exited.ready.reason == "exited"


async def test_workdir_symlink_is_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS, root=str(tmp_path)) as manager:
            info = await manager.spawn(
                "sh", ["-c", "pwd -P"], description="pwd", workdir=str(tmp_path / "link")
            )
            assert info.workdir == str(real)
            await wait_for_text(manager, info.id, str(real))


class SwappingAuthorizer:
    """Swaps the workdir for a symlink while it 'decides', then allows."""

    def __init__(self, workdir: Path, elsewhere: Path) -> None:
        self.workdir, self.elsewhere = workdir, elsewhere
        self.asked: list[AuthorizationRequest] = []

    async def authorize(self, request: AuthorizationRequest) -> None:
        self.asked.append(request)
        await trio.sleep(0.01)
        if request.permission == "shell":
            self.workdir.rename(self.workdir.with_name("moved"))
            self.workdir.symlink_to(self.elsewhere)


async def test_workdir_swapped_during_approval_is_refused(tmp_path: Path) -> None:
    workdir, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    workdir.mkdir()
    elsewhere.mkdir()
    authorizer = SwappingAuthorizer(workdir, elsewhere)
    with trio.fail_after(10):
        async with trio_pty.open_manager(
            LIMITS, root=str(tmp_path), authorizer=authorizer
        ) as manager:
            with pytest.raises(errors.PermissionDenied) as refused:
                await manager.spawn("pwd", description="swap", workdir=str(workdir))
            assert str(refused.value) == (
                f"Working directory changed during permission approval: {workdir}"
            )
            assert manager.list() == []
            assert [r.permission for r in authorizer.asked] == ["shell"]


async def test_rules_decide_shell_write_and_external_directories(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    inside = tmp_path / "root"
    outside.mkdir()
    inside.mkdir()
    rules = RulesAuthorizer.from_config(
        {
            "shell": [["*", "deny"], ["cat", "allow"], ["sh *", "allow"], ["rm *", "ask"]],
            "write": [["*", "allow"], ["cat <stdin> *secret*", "deny"]],
            "external_directory": "deny",
        }
    )
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS, root=str(inside), authorizer=rules) as m:
            info = await m.spawn("cat", description="allowed")
            await m.write(info.id, "hello\n")
            with pytest.raises(errors.PermissionDenied, match="write"):
                await m.write(info.id, "my secret\n")
            with pytest.raises(errors.PermissionDenied, match="shell"):
                await m.spawn("python3", ["-c", "1"], description="denied")
            with pytest.raises(errors.PermissionDenied, match="shell"):
                await m.spawn("rm", ["-rf", "x"], description="ask means deny")
            with pytest.raises(errors.PermissionDenied, match="external_directory"):
                await m.spawn("cat", description="outside", workdir=str(outside))
            assert [s.id for s in m.list()] == [info.id]


async def test_write_rechecks_the_session_after_approval(tmp_path: Path) -> None:
    class SlowApproval:
        """Answers a write only once the session has been killed meanwhile."""

        def __init__(self) -> None:
            self.asked, self.answer = trio.Event(), trio.Event()

        async def authorize(self, request: AuthorizationRequest) -> None:
            if request.permission == "write":
                self.asked.set()
                await self.answer.wait()

    approval = SlowApproval()

    async def kill_during_the_approval(session_id: str) -> None:
        await approval.asked.wait()
        await manager.kill(session_id)
        approval.answer.set()

    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS, root=os.getcwd(), authorizer=approval) as manager:
            info = await manager.spawn("cat", description="slow")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_during_the_approval, info.id)
                with pytest.raises(errors.NotRunning, match="killed"):
                    await manager.write(info.id, "late\n")
            await wait_for_status(manager, info.id, "killed")
