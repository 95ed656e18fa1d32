"""`Manager.signal`: a signal to the terminal's foreground group (whom Ctrl-C reaches), with
real programs: the command a shell runs gets it and the shell does not; a program's own
handler runs; names are checked; an ended session refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

import trio_pty
from trio_pty import Limits, Wait, errors
from trio_pty.policy import validate

from .helpers import alive, poll_until

FAST = Limits(terminate_grace=0.1)


@pytest.mark.parametrize(
    ("given", "expected"),
    [("INT", "SIGINT"), ("sigterm", "SIGTERM"), ("Hup", "SIGHUP"), ("SIGKILL", "SIGKILL")],
)
def test_signal_names(given: str, expected: str) -> None:
    number, name = validate.signal_name(given)
    assert name == expected and number > 0


@pytest.mark.parametrize("given", ["", "9", "SIG", "NOPE", "INT ", 2, None])
def test_signal_names_refused(given: object) -> None:
    with pytest.raises(errors.InvalidInput) as refused:
        validate.signal_name(given)
    assert refused.value.field == "signal"


async def test_the_running_command_gets_it_and_the_shell_does_not(tmp_path: Path) -> None:
    environ = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    with trio.fail_after(20):
        async with trio_pty.open_manager(FAST, environ=environ) as manager:
            info = await manager.spawn_shell(description="sh", shell="bash", rc=False)
            started = await manager.run(info.id, "sleep 30", timeout_ms=200)
            assert started.reason == "timeout"
            result = await manager.signal(info.id, "INT")
            assert result.signal == "SIGINT" and info.pid not in result.pids
            [sleeper] = result.pids
            await poll_until(lambda: not alive(sleeper))
            page = await manager.read(info.id, tail=1, wait=Wait(prompt=True, timeout_ms=5000))
            assert page.reason == "prompt"
            [*_, last] = manager.commands(info.id)
            assert (last.command, last.exit_code) == ("sleep 30", 130)
            assert manager.get(info.id).status == "running" and alive(info.pid)

            # At the prompt the shell itself is in front: its line editor drops the line and
            # draws a new prompt, which `run` waits for.
            again = await manager.signal(info.id, "int")
            assert again.pids == [info.pid]
            done = await manager.run(info.id, "echo still here")
            assert [line.text for line in done.lines] == ["still here"]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
@pytest.mark.parametrize("how", ["signal", "ctrl-c", "enter"])
async def test_run_right_after_leaving_the_prompt(tmp_path: Path, shell: str, how: str) -> None:
    """SIGINT, a typed Ctrl-C or Enter at the prompt make the line editor drop its line, and
    the shell report D and draw a new prompt: a `run` right after must wait for that prompt.
    Typed before it, its keys met the editor's clean-up (bash ran `cho`, a key lost) and the
    interrupt's D;130 was taken for the command's end (130 with no output): before the fix,
    every case failed in its first round."""
    environ = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST, environ=environ) as manager:
            info = await manager.spawn_shell(description="sh", shell=shell, rc=False)
            for round in range(5):
                if how == "signal":
                    assert (await manager.signal(info.id, "INT")).pids == [info.pid]
                else:
                    await manager.write(info.id, "\x03" if how == "ctrl-c" else "\r")
                assert not manager.get(info.id).at_prompt  # until the new prompt is up
                result = await manager.run(info.id, f"echo round {round}", timeout_ms=5000)
                assert (result.reason, result.exit_code) == ("exited", 0)
                assert [line.text for line in result.lines] == [f"round {round}"]
            commands = manager.commands(info.id)
            assert [c.command for c in commands] == [f"echo round {n}" for n in range(5)]


async def test_a_program_handles_its_signal_and_an_ended_session_refuses() -> None:
    script = "trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.05; done"
    with trio.fail_after(20):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn(
                "sh", ["-c", script], description="trap", ready=Wait(pattern="^ready$")
            )
            result = await manager.signal(info.id, "USR1")
            assert info.pid in result.pids  # sh leads the foreground group
            page = await manager.read(info.id, wait=Wait(pattern="^got-usr1$", timeout_ms=5000))
            assert page.reason == "matched"
            with pytest.raises(errors.InvalidInput):
                await manager.signal(info.id, "NOPE")
            await manager.signal(info.id, "TERM")
            await manager.read(info.id, wait=Wait(exit=True, timeout_ms=5000))
            with pytest.raises(errors.NotRunning):
                await manager.signal(info.id, "INT")
            with pytest.raises(errors.SessionNotFound):
                await manager.signal(info.id, "INT", owner="someone-else")
