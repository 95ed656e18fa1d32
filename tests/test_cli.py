"""The `trio-pty` client verbs end to end: each verb and option against a real `trio-pty
serve` subprocess, including a shell script that drives a shell session with `run` and
`write --pattern` and never sleeps. Attach through a real terminal is in
test_cli_attach.py.

The script, `read --follow` and `attach` run as processes of their own; the other verbs
run `trio_pty.cli.main(argv)` in this process (a thread with its own trio loop, its own
connection, stdout and stderr captured), which is the same code minus half a second of
interpreter start-up per command."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_pty.cli import main
from trio_pty.client.client import connect
from trio_pty.wire import ListParams

from .rpc_support import TEST_CONFIG, ServerProcess, live, owner_for, start_server

__all__ = ["live"]  # fixtures used by name

# The rpc tests' bounds, without command rules (under rules a client may set no variable).
CONFIG = TEST_CONFIG.split("[permissions]")[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose shells read the startup files of a HOME of ours: each says it ran."""
    home = tmp_path_factory.mktemp("home")
    (home / ".profile").write_text("export READ=profile\n")
    (home / ".bashrc").write_text("export READ=bashrc\n")
    process = start_server(
        tmp_path_factory.mktemp("server"), config=CONFIG, env={"HOME": str(home)}
    )
    try:
        yield process
    finally:
        process.stop()


Result = subprocess.CompletedProcess[bytes]


def cli_env(live: ServerProcess, owner: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_PTY_")}
    env.update(TRIO_PTY_URL=live.url, TRIO_PTY_TOKEN=live.token or "", TRIO_PTY_OWNER=owner)
    env.update(extra)
    return env


_IN_PROCESS = threading.Lock()  # main() reads the environment and the working directory


def run_main(argv: list[str], env: dict[str, str], cwd: Path) -> Result:
    """`main(argv)` with `env` as its TRIO_PTY_* variables, in `cwd`, its output captured."""
    with _IN_PROCESS:
        saved_env = {name: os.environ.get(name) for name in env}
        saved_cwd = os.getcwd()
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        err = io.StringIO()
        try:
            os.environ.update(env)
            os.chdir(cwd)
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    code = main(argv)
                except SystemExit as exc:  # argparse's own usage errors
                    code = exc.code if isinstance(exc.code, int) else 2
        finally:
            os.chdir(saved_cwd)
            for name, value in saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        assert isinstance(out.buffer, io.BytesIO)
        return subprocess.CompletedProcess(
            argv, code, out.buffer.getvalue(), err.getvalue().encode()
        )


class Cli:
    """Runs `trio-pty VERB ...` as one owner, from a directory of the test's."""

    def __init__(self, live: ServerProcess, owner: str, cwd: Path) -> None:
        self.live, self.owner, self.cwd = live, owner, cwd

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "trio_pty", *args]

    async def __call__(
        self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> Result:
        variables = {
            "TRIO_PTY_URL": self.live.url,
            "TRIO_PTY_TOKEN": self.live.token or "",
            "TRIO_PTY_OWNER": self.owner,
            "TRIO_PTY_READER": "",
            "TRIO_PTY_DETACH_KEY": "",
            **(env or {}),
        }
        return await trio.to_thread.run_sync(run_main, list(args), variables, cwd or self.cwd)

    async def ok(self, *args: str, cwd: Path | None = None) -> str:
        """Run, require exit status 0, return stdout."""
        result = await self(*args, cwd=cwd)
        assert result.returncode == 0, (args, result.returncode, result.stderr.decode())
        return result.stdout.decode()

    async def lines(self, *args: str) -> list[str]:
        return (await self.ok(*args)).splitlines()

    async def json(self, *args: str) -> Any:
        return json.loads(await self.ok("--json", *args))


@pytest.fixture
def cli(live: ServerProcess, request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return Cli(live, owner_for(request), tmp_path)


SERVER_ROOT = os.path.realpath(os.getcwd())  # the server's, where it was started


def stderr(result: Result) -> str:
    return result.stderr.decode()


async def test_spawn_starts_in_your_directory_and_waits_until_ready(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    show = ["sh", "-c", 'pwd; echo "A=$A"; stty size; echo ready; sleep 30']
    with trio.fail_after(30):
        mine = (
            await cli.ok(
                "spawn", "--ready", "--pattern", "^ready$", "--", *show, cwd=tmp_path / "sub"
            )
        ).strip()
        lines = await cli.lines("read", mine)
        assert lines == [str(tmp_path / "sub"), "A=", "24 80", "ready"]
        relative = (
            await cli.ok(
                "spawn",
                "--workdir",
                "deeper",
                "--env",
                "A=1",
                "--rows",
                "30",
                "--cols",
                "100",
                "--ready",
                "--pattern",
                "ready",
                "--",
                *show,
                cwd=tmp_path / "sub",
            )
        ).strip()
        assert await cli.lines("read", relative) == [
            str(tmp_path / "sub" / "deeper"),
            "A=1",
            "30 100",
            "ready",
        ]
        root = await cli.json("spawn", "--server-root", "--ready", "--exit", "--", "pwd")
        assert root["ready"]["reason"] == "exited"
        [line] = root["ready"]["lines"]
        assert line["text"] == root["workdir"] != str(tmp_path)
        assert root["workdir"] == SERVER_ROOT
        await cli.ok("kill", root["id"], "--cleanup")  # (a quota of 3 per owner)

        # A wait that times out: the id is still printed (the session runs), exit status 4.
        slow = await cli(
            "spawn", "--ready", "--pattern", "never", "--wait-ms", "200", "--", "sleep", "30"
        )
        assert slow.returncode == 4 and "(the wait ended: timeout)" in stderr(slow)
        for session in (mine, relative, slow.stdout.decode().strip()):
            assert (await cli.ok("kill", session, "--cleanup")).startswith(f"{session} killed")


async def test_write_and_send_take_text_that_looks_like_options(cli: Cli) -> None:
    with trio.fail_after(30):
        session = (await cli.ok("spawn", "--", "cat", "-v")).strip()
        # Escapes are decoded by default; `-1\n` is text, not an option.
        out = await cli.lines("write", session, "-1\\n", "--pattern", "^-1$")
        assert out == ["-1", "-1"]  # the echo, then cat's copy
        out = await cli.lines("write", session, "--literal", "a\\tb\\n", "--idle", "100")
        assert out == ["a\\tb\\n"]  # the echo; no newline was sent, so no copy from cat
        out = await cli.lines("write", session, "\\x1b[A\\r", "--escapes", "--pattern", "A$")
        assert out[-1] == "a\\tb\\n^[[A"  # --escapes is the default now, and still accepted
        out = await cli.lines("send", session, "grep", "-v", "--color", "x", "--pattern", "color")
        assert out == ["grep -v --color x", "grep -v --color x"]
        assert await cli.lines("send", session, "--raw", "half,") == []
        out = await cli.lines("send", session, "whole", "--pattern", "whole")
        assert out[-1] == "half,whole"
        result = await cli.json("write", session, "z\\n", "--pattern", "^z$")
        assert result["bytes_written"] == 2 and result["output"]["reason"] == "matched"
        sent = await cli.json("send", session, "--raw", "q")
        assert sent["bytes_written"] == 1 and sent["output"] is None

        # A wait that ends otherwise than asked: exit status 4, the output still printed.
        timed_out = await cli("write", session, "y\\n", "--pattern", "never", "--wait-ms", "200")
        assert timed_out.returncode == 4, stderr(timed_out)
        assert timed_out.stdout.decode().splitlines()[-1] == "qy"
        await cli.ok("kill", session, "--cleanup")


LINES_THEN_PASSWORD = (
    'for i in $(seq 1 30); do echo line$i; done; printf "Password: "; '
    'stty -echo; read x; stty echo; echo; echo "got:$x"'
)


async def test_read_tail_new_command_and_follow_with_an_unfinished_line(cli: Cli) -> None:
    with trio.fail_after(30):
        session = (
            await cli.ok(
                "spawn", "--ready", "--pattern", "Password", "--", "sh", "-c", LINES_THEN_PASSWORD
            )
        ).strip()
        assert len(await cli.lines("read", session, "--new")) == 31
        assert await cli.lines("read", session, "--new") == []
        assert await cli.lines("read", session, "--tail", "3") == ["line29", "line30", "Password: "]
        assert len(await cli.lines("read", session, "--new", "--reader", "other")) == 31
        page = await cli("read", session, "--offset", "5", "--limit", "2")
        assert page.stdout.decode().splitlines() == ["line6", "line7"]
        assert "(more: --offset 7)" in stderr(page)
        assert await cli.lines("read", session, "--pattern", "LINE3.", "-i") == ["line30"]
        as_json = await cli.json("read", session, "--tail", "1")
        assert as_json["lines"] == [{"number": 30, "text": "Password: "}]
        waited = await cli(
            "read", session, "--new", "--wait", "--pattern", "got", "--wait-ms", "200"
        )
        assert waited.returncode == 4 and "(the wait ended: timeout)" in stderr(waited)
        not_a_shell = await cli("read", session, "--command", "1")
        assert not_a_shell.returncode == 1 and "[invalid_input]" in stderr(not_a_shell)

        # --follow shows the unfinished `Password: ` line at once, then the rest.
        follow = await trio.lowlevel.open_process(
            cli.command("read", session, "--follow", "--tail", "1"),
            env=cli_env(cli.live, cli.owner),
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        try:
            assert follow.stdout is not None
            shown = b""
            with trio.fail_after(5):
                while b"Password: " not in shown:
                    shown += await follow.stdout.receive_some(4096)
            assert shown == b"Password: "  # no newline: the line is not finished
            await cli.ok("write", session, "secret\\n")
            with trio.fail_after(10):
                while chunk := await follow.stdout.receive_some(4096):
                    shown += chunk
                await follow.wait()
        finally:
            follow.kill()  # (only if the test failed before it ended)
            await follow.wait()
            if follow.stdout is not None:
                await follow.stdout.aclose()
        assert follow.returncode == 0
        assert shown.decode().splitlines() == ["Password: ", "got:secret"]
        await cli.ok("kill", session, "--cleanup")


SCRIPT = textwrap.dedent(
    r"""
    set -eu
    id=$(trio-pty shell --no-rc --description script)
    trio-pty run "$id" -- 'mkdir -p made && cd made'
    [ "$(trio-pty run "$id" -- pwd)" = "$PWD/made" ]
    [ "$(trio-pty run "$id" -- echo one two)" = "one two" ]
    status=0; trio-pty run "$id" -- 'f() { echo failing; return 3; }; f' > /dev/null || status=$?
    [ "$status" = 3 ]
    trio-pty write "$id" 'python3 -q\n' --pattern '^>>>' > /dev/null
    [ "$(trio-pty write "$id" 'print(6*7)\n' --pattern '^42$' | grep -x 42)" = 42 ]
    trio-pty write "$id" 'exit()\n' --prompt > /dev/null
    status=0; trio-pty run "$id" --wait-ms 200 -- sleep 30 || status=$?
    [ "$status" = 124 ]
    trio-pty signal "$id" INT > /dev/null
    trio-pty wait "$id" --prompt
    [ "$(trio-pty run "$id" -- 'seq 1 600 | wc -l')" = 600 ]
    trio-pty run "$id" -- seq 1 1200 | tail -n 1
    trio-pty commands "$id"
    trio-pty kill "$id" --cleanup > /dev/null
    echo all done
    """
)


async def test_a_script_drives_a_shell_without_sleeping(cli: Cli, tmp_path: Path) -> None:
    """`run` prints a command's output and exits with its status (124 while it still
    runs); `write --pattern`/`--prompt` and `wait --prompt` replace every sleep."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "trio-pty").write_text(f'#!/bin/sh\nexec {sys.executable} -m trio_pty "$@"\n')
    (bin_dir / "trio-pty").chmod(0o755)
    env = cli_env(cli.live, cli.owner, PATH=f"{bin_dir}:{os.environ['PATH']}", HOME=str(tmp_path))

    async def sh(script: str) -> subprocess.CompletedProcess[bytes]:
        return await trio.run_process(
            ["sh", "-c", script],
            env=env,
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )

    # The bound is only a guard against a hang: the script starts about twenty Pythons,
    # so it is counted in the cost of one (`trio-pty list`) here and now, on a machine as
    # loaded as it is while the script runs.
    started = time.monotonic()
    with trio.fail_after(60):
        assert (await sh("trio-pty list > /dev/null")).returncode == 0
    one_call = time.monotonic() - started
    with trio.fail_after(30 + 40 * one_call):
        result = await sh(SCRIPT)
    out = result.stdout.decode().splitlines()
    assert result.returncode == 0, (out, stderr(result))
    assert out[0] == "1200" and out[-1] == "all done"
    table = [line.split() for line in out[1:-1]]
    assert table[0] == ["N", "STATE", "EXIT", "LINES", "TIME", "CWD", "COMMAND"]
    states = {int(row[0]): (row[1], row[2]) for row in table[1:]}
    assert states[4] == ("exited", "3")  # the failing function
    assert states[5] == ("exited", "0")  # python3, typed through write
    assert states[6] == ("exited", "130")  # sleep 30, interrupted by `signal INT`
    assert "(command 6 still runs" in stderr(result)


SCREEN = (
    r"trap 'echo got-usr1' USR1; "
    r"printf '\033]2;the title\007\033[?1049h\033[H\033[2Jtop line\033[3;5Hthird'; "
    r"while :; do sleep 0.05; done"
)


async def test_screen_signal_resize_and_raw_output(cli: Cli, tmp_path: Path) -> None:
    with trio.fail_after(30):
        session = (
            await cli.ok(
                "spawn",
                "--rows",
                "4",
                "--cols",
                "20",
                "--ready",
                "--idle",
                "200",
                "--",
                "sh",
                "-c",
                SCREEN,
            )
        ).strip()
        screen = await cli.ok("screen", session)
        assert screen.splitlines() == ["top line", "", "    third", ""]
        shown = await cli.json("screen", session, "--pattern", "third")
        assert (shown["alternate"], shown["title"], shown["reason"]) == (
            True,
            "the title",
            "matched",
        )
        missing = await cli("screen", session, "--pattern", "nowhere", "--wait-ms", "100")
        assert missing.returncode == 4 and missing.stdout.decode().splitlines()[0] == "top line"

        assert (await cli.ok("resize", session, "10", "50")).strip() == f"{session} 10x50"
        resized = await cli.json("resize", session, "12", "60")
        assert (resized["rows"], resized["cols"]) == (12, 60)

        signalled = await cli.ok("signal", session, "usr1")
        assert signalled.startswith("SIGUSR1 -> ")
        # (A full-screen program's lines are on its screen, not in the line log.)
        await cli.ok("screen", session, "--pattern", "got-usr1", "--wait-ms", "5000")
        as_json = await cli.json("signal", session, "WINCH")
        assert as_json["signal"] == "SIGWINCH" and as_json["pids"]
        bad = await cli("signal", session, "NOPE")
        assert bad.returncode == 1 and "[invalid_input]" in stderr(bad)

        raw = tmp_path / "raw.bin"
        await cli.ok("read-raw", session, "--output", str(raw))
        data = raw.read_bytes()
        assert data.startswith(b"\x1b]2;the title\x07\x1b[?1049h") and b"got-usr1\r\n" in data
        assert (await cli("read-raw", session, "--offset", "4", "--limit", "5")).stdout == data[4:9]
        chunks = await cli.json("read-raw", session, "--limit", "3")
        assert [(c["offset"], c["next_offset"]) for c in chunks] == [(0, 3)]

        # The wait verb: for the end of the session too.
        await cli.ok("signal", session, "KILL")
        await cli.ok("wait", session, "--exit")
        never = await cli("wait", session, "--pattern", "nowhere", "--wait-ms", "100")
        assert never.returncode == 4 and "(the wait ended: exited)" in stderr(never)
        killed = await cli.json("kill", session, "--cleanup")
        assert killed["exit_signal"] == 9


async def test_list_owners_commands_delete_owner_and_info(cli: Cli, request: Any) -> None:
    other = Cli(cli.live, owner_for(request) + "-other", cli.cwd)
    with trio.fail_after(30):
        mine = (await cli.ok("spawn", "--description", "mine", "--", "sleep", "30")).strip()
        shell = (await other.ok("shell", "--no-rc", "--description", "theirs")).strip()
        assert (await other.json("run", shell, "--", "echo", "hi"))["exit_code"] == 0
        history = await other.json("commands", shell)
        assert [(c["number"], c["command"], c["exit_code"]) for c in history] == [(1, "echo hi", 0)]
        assert (await other.lines("commands", shell, "--limit", "1"))[1].split()[-2:] == [
            "echo",
            "hi",
        ]
        shell_info = await other.json("shell", "--no-rc", "--shell", "bash", "--title", "t")
        assert (shell_info["shell"], shell_info["at_prompt"], shell_info["title"]) == (
            "bash",
            True,
            "t",
        )

        header, row = await cli.lines("list")
        assert header.split()[:2] == ["ID", "NAME"] and row.startswith(mine) and "mine" in row
        table = await cli.lines("list", "--all-owners")
        assert table[0].split()[:2] == ["OWNER", "ID"]
        rows = {line.split()[1]: line for line in table[1:]}
        assert rows[mine].startswith(cli.owner) and rows[shell].startswith(other.owner)
        assert "running (prompt)" in rows[shell]
        listed = await cli.json("list")
        assert [s["id"] for s in listed] == [mine]
        everyone = await cli.json("list", "--all-owners")
        assert {mine, shell, shell_info["id"]} <= {s["id"] for s in everyone}

        assert (await cli.ok("delete-owner", other.owner)).strip() == (
            f"owner {other.owner!r}: 2 sessions removed"
        )
        empty = await other("list")
        assert empty.stdout == b"" and f"no sessions for owner {other.owner!r}" in stderr(empty)
        gone = await other("shell", "--no-rc")
        assert gone.returncode == 1 and "[owner_deleted]" in stderr(gone)
        deleted = await cli.json("delete-owner", cli.owner)
        assert deleted == {"owner": cli.owner, "removed": 1}
        info = json.loads(await cli.ok("info"))
        assert info["limits"]["max_sessions_per_owner"] == 3
    async with connect(cli.live.url, cli.live.token) as client:
        assert (await client.request(ListParams(owner=cli.owner))).sessions == []


async def test_the_remaining_options(cli: Cli, tmp_path: Path) -> None:
    """What the tests above leave out: each option once, and its effect."""
    (tmp_path / "sub").mkdir()
    with trio.fail_after(60):
        # --url and --token as options (nothing in the environment).
        bare = {"TRIO_PTY_URL": "", "TRIO_PTY_TOKEN": ""}
        # `--token=`: a generated token starts with "-" one time in 64, and argparse takes
        # `--token -x...` for a missing value (this test failed so, once in ten runs).
        token = f"--token={cli.live.token or ''}"
        result = await cli("list", "--url", cli.live.url, token, env=bare)
        assert result.returncode == 0, stderr(result)

        info = await cli.json(
            "spawn",
            "--notify",
            "--timeout",
            "30",
            "-i",
            "--pattern",
            "READY",
            "--",
            "sh",
            "-c",
            "echo ready; echo second; sleep 30",
        )
        assert (info["notify_on_exit"], info["timeout"], info["ready"]["reason"]) == (
            True,
            30.0,
            "matched",
        )
        session = info["id"]
        assert (await cli("read", session, "--idle", "100")).returncode == 0
        assert (await cli("read", session, "--exit", "--wait-ms", "100")).returncode == 4
        assert (await cli("wait", session, "--idle", "100")).returncode == 0
        late = await cli("wait", session, "--offset", "2", "--pattern", "ready", "--wait-ms", "100")
        assert late.returncode == 4  # line 0 is before --offset
        assert (await cli("screen", session, "--wait")).returncode == 0
        assert (await cli("screen", session, "--idle", "100")).returncode == 0
        assert (await cli("screen", session, "--exit", "--wait-ms", "100")).returncode == 4
        await cli.ok("kill", session, "--cleanup")

        cat = (await cli.ok("spawn", "--", "cat")).strip()
        assert (
            await cli("write", cat, "echo\\n", "--ignore-case", "--pattern", "ECHO")
        ).returncode == 0
        assert (await cli("send", cat, "x", "--exit", "--wait-ms", "100")).returncode == 4
        await cli.ok("kill", cat, "--cleanup")

        shell = await cli.json(
            "shell",
            "--login",
            "--env",
            "A=b",
            "--workdir",
            "sub",
            "--timeout",
            "30",
            "--description",
            "login shell",
        )
        assert (shell["shell"], shell["workdir"], shell["timeout"]) == (
            "bash",
            str(tmp_path / "sub"),
            30.0,
        )
        assert await cli.lines("run", shell["id"], "--", 'echo "$A $READ"') == ["b profile"]
        assert await cli.lines("read", shell["id"], "--command", "1") == ["b profile"]
        plain = (await cli.ok("shell")).strip()  # reads ~/.bashrc
        no_rc = (await cli.ok("shell", "--no-rc")).strip()  # reads nothing of yours
        assert await cli.lines("run", plain, "--", 'echo "[$READ]"') == ["[bashrc]"]
        assert await cli.lines("run", no_rc, "--", 'echo "[$READ]"') == ["[]"]
        for session in (plain, no_rc):
            await cli.ok("kill", session, "--cleanup")
        assert (await cli("read", shell["id"], "--tail", "1", "--prompt")).returncode == 0
        await cli.ok("kill", shell["id"], "--cleanup")


async def test_attach_without_a_terminal_shows_the_output_until_the_end(cli: Cli) -> None:
    """With piped input, attach sends what it reads, then keeps showing the output until
    the session ends; --json prints how it ended."""
    with trio.fail_after(30):
        session = (
            await cli.ok("spawn", "--", "sh", "-c", "read x; echo got:$x; sleep 0.2")
        ).strip()
        result = await trio.run_process(
            cli.command("attach", session, "--json"),
            env=cli_env(cli.live, cli.owner),
            stdin=b"typed\n",
            capture_stdout=True,
            capture_stderr=True,
        )
        text = result.stdout.decode()
        output, _, event = text.partition("{")
        assert output.replace("\r", "").splitlines() == ["typed", "got:typed"]
        assert json.loads("{" + event)["exit_code"] == 0
        assert f"[{session} exited with code 0]" in stderr(result)
        await cli.ok("kill", session, "--cleanup")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["write", "pty_0"], "write needs TEXT"),
        (["write", "pty_0", "a", "-b"], "write takes one TEXT"),
        (["send", "pty_0"], "send needs WORD"),
        (["run", "pty_0"], "run needs -- CMD"),
        (["wait", "pty_0", "--wait-ms", "5"], "wait for what?"),
        (["spawn", "--env", "X", "--", "true"], "--env expects NAME=VALUE"),
        (["spawn"], "spawn needs a command"),
        (["read", "pty_0", "--follow", "--idle", "5"], "--follow waits by itself"),
        (["read", "pty_0", "--follow", "--command", "2"], "--follow follows the session"),
        (["attach", "pty_0", "--detach-key", "C-b C-b"], "--detach-key"),
        (["attach", "pty_0", "--detach-key", "F13"], "--detach-key: not a key"),
        (["list", "--bogus"], "unrecognized arguments: --bogus"),
        (["read-raw", "pty_0", "--output", "/nonexistent/dir/file"], "cannot write"),
    ],
)
async def test_usage_errors(cli: Cli, args: Sequence[str], message: str) -> None:
    """Usage errors exit with 2, and nothing is sent."""
    with trio.fail_after(10):
        result = await cli(*args)
    assert result.returncode == 2, stderr(result)
    assert message in stderr(result), stderr(result)


async def test_record_writes_the_session_as_an_asciicast(cli: Cli) -> None:
    with trio.fail_after(30):
        session = (await cli.ok("spawn", "--", "printf", "cast me\\n")).strip()
        await cli.ok("wait", session, "--exit")
        v3 = (await cli.ok("record", session)).splitlines()
        assert json.loads(v3[0])["version"] == 3
        assert [json.loads(line)[1:] for line in v3[1:]] == [["o", "cast me\r\n"], ["x", "0"]]
        v2 = (await cli.ok("record", session, "--format", "v2")).splitlines()
        assert json.loads(v2[0])["version"] == 2
        assert [json.loads(line)[1:] for line in v2[1:]] == [["o", "cast me\r\n"]]
        as_json = await cli.json("record", session)
        assert (as_json["id"], as_json["format"]) == (session, 3)
        assert as_json["cast"].splitlines() == v3
        assert (await cli("record", session, "--format", "v4")).returncode == 2
        await cli.ok("kill", session, "--cleanup")
