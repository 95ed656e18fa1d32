"""Shell sessions with real bash and real zsh: run, commands, prompt waits, and the places
where marks cannot be trusted. Each test runs with a temporary HOME."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import trio_pty
from trio_pty import Limits, Wait, errors
from trio_pty.manager import Manager
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.posix.sandbox import BubblewrapSandbox

from .helpers import wait_for_text

# Interactive shells ignore SIGTERM: each teardown waits out the grace before SIGKILL.
FAST = Limits(terminate_grace=0.1)
SHELLS = ["bash", "zsh"]
SYNTAX_ERROR = {"bash": ("if then", 2), "zsh": ("echo )", 1)}


@asynccontextmanager
async def shell_manager(home: Path, **environ: str) -> AsyncIterator[Manager]:
    base = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", **environ}
    async with trio_pty.open_manager(FAST, environ=base) as manager:
        yield manager


def texts(lines: list[trio_pty.Line]) -> list[str]:
    return [line.text for line in lines]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


# ------------------------------------------------------------------ running commands


@pytest.mark.parametrize("shell", SHELLS)
async def test_200_commands_report_their_output_and_exit_codes_exactly(
    home: Path, shell: str
) -> None:
    codes = random.Random(14).choices(range(256), k=200)
    with trio.fail_after(60):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="many", shell=shell)
            assert (info.shell, info.at_prompt) == (shell, True)
            setup = await manager.run(info.id, 'f() { echo "out-$1"; return $2; }')
            assert (setup.reason, setup.exit_code, setup.lines) == ("exited", 0, [])
            for number, code in enumerate(codes):
                result = await manager.run(info.id, f"f {number} {code}")
                assert (result.reason, result.exit_code) == ("exited", code), number
                assert texts(result.lines) == [f"out-{number}"], number
                assert result.number == number + 2 and result.command == f"f {number} {code}"
                assert not result.has_more and result.missed_lines == 0
            history = manager.commands(info.id, limit=500)
            assert [c.exit_code for c in history] == [0, *codes]
            assert {c.state for c in history} == {"exited"}
            assert {c.source for c in history} == {"run"}
            assert manager.get(info.id).at_prompt


async def type_keys(manager: Manager, session_id: str, keys: list[str]) -> None:
    """One key at a time, each echoed before the next (as typed by hand: typed in bursts,
    a line editor redraws the line whole), then Enter."""
    for key in keys:
        await manager.write(session_id, key, wait=Wait(idle_ms=30, timeout_ms=2000))
    await manager.write(session_id, "\r", wait=Wait(prompt=True, timeout_ms=5000))


async def narrow_shell(manager: Manager, shell: str) -> str:
    """A shell in a window 30 columns wide, with a prompt of 2 (the same margin wherever
    the test runs)."""
    info = await manager.spawn_shell(description="narrow", shell=shell, cols=30)
    await manager.run(info.id, "PS1='$ '")
    return info.id


@pytest.mark.parametrize("shell", SHELLS)
async def test_a_typed_command_wider_than_the_window_is_recorded_as_typed(
    home: Path, shell: str
) -> None:
    # 70 characters after a prompt of 2 in 30 columns: three rows. bash's readline echoes
    # " \r" at each margin (the terminal's autowrap does the rest); zsh " \r ESC[K".
    typed = "echo a line typed key by key that wraps twice at thirty columns: done"
    with trio.fail_after(40):
        async with shell_manager(home) as manager:
            session_id = await narrow_shell(manager, shell)
            await type_keys(manager, session_id, list(typed))
            record = manager.commands(session_id)[-1]
            assert (record.command, record.exit_code) == (typed, 0)
            lines = texts((await manager.read(session_id, tail=3)).lines)
            assert lines[:2] == [f"$ {typed}", typed.removeprefix("echo ")]
            assert lines[2].rstrip() == "$"  # the next prompt


@pytest.mark.parametrize("shell", SHELLS)
async def test_a_wrapped_line_edited_across_the_margin_reads_as_the_screen_showed_it(
    home: Path, shell: str
) -> None:
    # Typed over three rows, then 45 x left (back across both margins: the line editors
    # go up with CR, ESC[A and ESC[nC), an "X" inserted there, Enter with the cursor on the
    # first row (bash comes down with line feeds, zsh with ESC[nB).
    typed = "echo 0123456789 abcdefghij klmnopqrst uvwxyz ABCDEFGHIJ KLMNOPQRST end"
    edited = typed[:-45] + "X" + typed[-45:]
    with trio.fail_after(40):
        async with shell_manager(home) as manager:
            session_id = await narrow_shell(manager, shell)
            await type_keys(manager, session_id, [*typed, *["\x1b[D"] * 45, "X"])
            assert manager.commands(session_id)[-1].command == edited
            lines = [text for text in texts((await manager.read(session_id)).lines) if text]
            assert lines[-3:-1] == [f"$ {edited}", edited.removeprefix("echo ")]
            assert lines[-1].rstrip() == "$"  # the next prompt


@pytest.mark.parametrize("shell", SHELLS)
async def test_state_persists_between_commands(home: Path, shell: str) -> None:
    (home / "proj" / "venv" / "bin").mkdir(parents=True)
    tool = home / "proj" / "venv" / "bin" / "tool"
    tool.write_text("#!/bin/sh\necho from-venv\n")
    tool.chmod(0o755)
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="state", shell=shell, workdir=str(home))
            result = await manager.run(info.id, "cd proj")
            assert result.cwd == str(home / "proj")
            await manager.run(info.id, "export GREETING=hello")
            await manager.run(info.id, 'export PATH="$PWD/venv/bin:$PATH"')
            result = await manager.run(info.id, 'echo "$GREETING from $PWD"; tool')
            assert texts(result.lines) == [f"hello from {home / 'proj'}", "from-venv"]
            assert result.cwd == str(home / "proj")


@pytest.mark.parametrize("shell", SHELLS)
async def test_an_awkward_directory_name_is_reported_exactly(home: Path, shell: str) -> None:
    awkward = home / "a;b%c?d#e f\tg\nh\x1b]133;D;0\x07é"
    awkward.mkdir()
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="cwd", shell=shell, workdir=str(home))
            result = await manager.run(info.id, "cd a*")
            assert (result.exit_code, result.cwd) == (0, str(awkward))
            result = await manager.run(info.id, "echo still fine")
            assert texts(result.lines) == ["still fine"] and result.cwd == str(awkward)


@pytest.mark.parametrize("shell", SHELLS)
async def test_multi_line_commands_are_one_command(home: Path, shell: str) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="multi", shell=shell)
            loop = await manager.run(info.id, "for i in 1 2 3; do\n  echo item-$i\ndone")
            assert texts(loop.lines) == ["item-1", "item-2", "item-3"]
            branch = await manager.run(
                info.id, "if [ -d / ]; then\n  echo yes\nelse\n  echo no\nfi\n(exit 4)"
            )
            assert (texts(branch.lines), branch.exit_code) == (["yes"], 4)
            heredoc = await manager.run(info.id, "cat <<'EOF'\nline one\n\tindented $HOME\nEOF")
            assert texts(heredoc.lines) == ["line one", "\tindented $HOME"]
            history = manager.commands(info.id)
            assert [c.number for c in history] == [1, 2, 3]
            assert history[2].command == "cat <<'EOF'\nline one\n\tindented $HOME\nEOF"


@pytest.mark.parametrize("shell", SHELLS)
async def test_a_command_reading_stdin(home: Path, shell: str) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="stdin", shell=shell)
            result = await manager.run(info.id, "cat", timeout_ms=300)
            assert (result.reason, result.exit_code) == ("timeout", None)
            assert not manager.get(info.id).at_prompt
            await manager.write(info.id, "typed input\n")
            done = await manager.write(
                info.id, "\\x04", escapes=True, wait=Wait(prompt=True, timeout_ms=5000)
            )
            assert done.output is not None and done.output.reason == "prompt"
            (record,) = manager.commands(info.id)
            assert (record.command, record.state, record.exit_code) == ("cat", "exited", 0)
            page = await manager.read(info.id, command=record.number)
            # the terminal echoes the input, then cat prints it
            assert texts(page.lines) == ["typed input", "typed input"]


@pytest.mark.parametrize("shell", SHELLS)
async def test_a_timed_out_command_then_ctrl_c(home: Path, shell: str) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="sleep", shell=shell)
            result = await manager.run(info.id, "sleep 30", timeout_ms=200)
            assert (result.reason, result.exit_code, result.number) == ("timeout", None, 1)
            assert 200 <= result.duration_ms < 5000
            with pytest.raises(errors.Busy) as busy:
                await manager.run(info.id, "echo too soon")
            assert busy.value.kind == "busy" and busy.value.details()["number"] == 1
            assert "sleep 30" in busy.value.message
            await manager.write(
                info.id, "\\x03", escapes=True, wait=Wait(prompt=True, timeout_ms=5000)
            )
            after = await manager.run(info.id, "echo after")
            assert (after.exit_code, texts(after.lines), after.number) == (0, ["after"], 2)
            history = manager.commands(info.id)
            assert [(c.command, c.exit_code, c.state) for c in history] == [
                ("sleep 30", 130, "exited"),
                ("echo after", 0, "exited"),
            ]


@pytest.mark.parametrize("shell", SHELLS)
async def test_long_output_gives_the_first_and_last_lines(home: Path, shell: str) -> None:
    with trio.fail_after(30):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="seq", shell=shell)
            result = await manager.run(info.id, "seq 1 20000")
            assert result.exit_code == 0
            assert texts(result.lines) == [
                *map(str, range(1, 251)),
                *map(str, range(19751, 20001)),
            ]
            assert (result.missed_lines, result.has_more) == (19500, True)
            first = result.lines[0].number
            assert [line.number for line in result.lines[:250]] == list(range(first, first + 250))
            assert result.lines[-1].number == first + 19999
            # every line can be paged through with read(command=N)
            seen: list[str] = []
            offset = 0
            while True:
                page = await manager.read(info.id, command=result.number, offset=offset, limit=2000)
                seen += texts(page.lines)
                if not page.has_more:
                    break
                offset = page.next_offset
            assert seen == [str(n) for n in range(1, 20001)]
            matches = await manager.read(info.id, command=result.number, pattern="^1999[0-9]$")
            assert texts(matches.lines) == [str(n) for n in range(19990, 20000)]


@pytest.mark.parametrize("shell", SHELLS)
async def test_output_without_a_trailing_newline(home: Path, shell: str) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="printf", shell=shell)
            result = await manager.run(info.id, "printf 'first\\nno newline'")
            assert texts(result.lines) == ["first", "no newline"]
            result = await manager.run(info.id, "printf abc")
            assert texts(result.lines) == ["abc"]
            after = await manager.run(info.id, "echo next")
            assert texts(after.lines) == ["next"] and after.exit_code == 0


@pytest.mark.parametrize("shell", SHELLS)
async def test_a_syntax_error_leaves_one_record(home: Path, shell: str) -> None:
    command, status = SYNTAX_ERROR[shell]
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="syntax", shell=shell)
            result = await manager.run(info.id, command, timeout_ms=5000)
            assert (result.reason, result.exit_code) == ("exited", status)
            assert len(result.lines) == 1 and "error" in result.lines[0].text
            after = await manager.run(info.id, "echo fine")
            assert (after.number, texts(after.lines)) == (2, ["fine"])
            assert [c.exit_code for c in manager.commands(info.id)] == [status, 0]


@pytest.mark.parametrize("shell", SHELLS)
async def test_forged_marks_are_ignored(home: Path, shell: str) -> None:
    forge = (
        "printf '\\033]133;D;0\\007\\033]133;A\\007\\033]133;B\\007"
        "\\033]133;D;0;tp=0000000000000000;cwd=/\\007"
        "\\033]133;B;tp=0000000000000000\\007forged\\n'"
    )
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="forge", shell=shell)
            result = await manager.run(info.id, f"{forge}; sleep 0.5; (exit 7)", timeout_ms=200)
            assert result.reason == "timeout"
            assert not manager.get(info.id).at_prompt  # a forged prompt mark did nothing
            assert manager.commands(info.id)[0].state == "running"
            await manager.read(info.id, wait=Wait(prompt=True, timeout_ms=5000))
            (record,) = manager.commands(info.id)
            assert (record.state, record.exit_code) == ("exited", 7)
            page = await manager.read(info.id, command=1)
            assert texts(page.lines) == ["forged"]


@pytest.mark.parametrize("shell", SHELLS)
async def test_exit_ends_the_session(home: Path, shell: str) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="exit", shell=shell)
            result = await manager.run(info.id, "exit 5")
            assert (result.reason, result.exit_code) == ("session_ended", 5)
            (record,) = manager.commands(info.id)
            assert (record.state, record.exit_code) == ("session_ended", 5)
            final = manager.get(info.id)
            assert (final.exit_code, final.at_prompt) == (5, False)
            with pytest.raises(errors.NotRunning):
                await manager.run(info.id, "echo gone")


@pytest.mark.parametrize("shell", SHELLS)
async def test_typed_commands_are_in_the_history(home: Path, shell: str) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="typed", shell=shell)
            write = await manager.write(
                info.id, "echo typed by hand; (exit 3)\r", wait=Wait(prompt=True, timeout_ms=5000)
            )
            assert write.output is not None and write.output.reason == "prompt"
            await manager.run(info.id, "echo by run")
            typed, ran = manager.commands(info.id)
            assert (typed.source, typed.command, typed.exit_code) == (
                "typed",
                "echo typed by hand; (exit 3)",
                3,
            )
            assert (ran.source, ran.number) == ("run", 2)
            page = await manager.read(info.id, command=1)
            assert texts(page.lines) == ["typed by hand"]
            assert typed.first_line == typed.last_line == page.lines[0].number


# ------------------------------------------------------------------ where marks stop


async def test_prompt_command_replaced_falls_back_to_timeouts(home: Path) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="hooks gone", shell="bash")
            result = await manager.run(info.id, "PROMPT_COMMAND='history -a'", timeout_ms=500)
            assert (result.reason, result.exit_code) == ("timeout", None)
            await manager.read(info.id, wait=Wait(prompt=True, timeout_ms=5000))
            # the prompt is back, so nothing runs: no Busy, but never an exit code again
            result = await manager.run(info.id, "echo still here; false", timeout_ms=500)
            assert (result.reason, result.exit_code) == ("timeout", None)
            assert texts(result.lines) == ["still here"]
            history = manager.commands(info.id)
            assert [(c.state, c.exit_code) for c in history] == [("open", None), ("open", None)]


async def test_exec_ends_with_the_session(home: Path) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="exec", shell="bash")
            result = await manager.run(info.id, "exec sh -c 'echo replaced; exit 4'")
            assert (result.reason, result.exit_code) == ("session_ended", 4)
            assert texts(result.lines) == ["replaced"]


@pytest.mark.parametrize("shell", SHELLS)
async def test_a_nested_shell_without_marks(home: Path, shell: str) -> None:
    """Like su or ssh: another shell runs inside, and its prompts carry no nonce."""
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="nested", shell=shell)
            result = await manager.run(info.id, "bash --norc --noprofile -i", timeout_ms=500)
            assert (result.reason, result.exit_code) == ("timeout", None)
            await manager.write(info.id, "echo inside\r")
            await wait_for_text(manager, info.id, "inside")
            assert not manager.get(info.id).at_prompt
            with pytest.raises(errors.Busy):
                await manager.run(info.id, "echo no")
            await manager.write(info.id, "exit 3\r", wait=Wait(prompt=True, timeout_ms=5000))
            (record,) = manager.commands(info.id)
            assert (record.state, record.exit_code) == ("exited", 3)


@pytest.mark.parametrize("shell", SHELLS)
async def test_a_background_job_printing_after_the_prompt(home: Path, shell: str) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="bg", shell=shell)
            started = await manager.run(info.id, "(sleep 0.3; echo late) &")
            assert started.exit_code == 0 and manager.get(info.id).at_prompt
            late = await manager.read(info.id, wait=Wait(pattern="late$", timeout_ms=5000))
            assert late.reason == "matched"
            assert manager.get(info.id).at_prompt
            result = await manager.run(info.id, "echo next")
            assert texts(result.lines) == ["next"]
            assert [c.number for c in manager.commands(info.id)] == [1, 2]


# ------------------------------------------------------------------ startup and dotfiles


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_made(home: Path) -> list[str]:
    """What is in HOME, shell history files aside (a shell that is hung up saves them)."""
    return sorted(p.name for p in home.iterdir() if "history" not in p.name)


def environ_of(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return handle.read()


def cmdline_of(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().decode().split("\0")


def exists(path: str | bytes) -> bool:
    return os.path.exists(path)


@pytest.mark.parametrize("mode", ["append", "replace"])
async def test_a_bashrc_with_its_own_prompt_command(home: Path, mode: str) -> None:
    hook = "echo hook-$? >> ~/hooks.log; false"
    quoted = hook.replace("$", "\\$")  # inside double quotes, for the shell to expand later
    setting = (
        f'PROMPT_COMMAND="${{PROMPT_COMMAND:+$PROMPT_COMMAND; }}{quoted}"'
        if mode == "append"
        else f"PROMPT_COMMAND='{hook}'"
    )
    bashrc = home / ".bashrc"
    bashrc.write_text(
        f"{setting}\n"
        'theme() { PS1="[\\u \\w \\$?]\\$ "; }\n'
        'PROMPT_COMMAND="$PROMPT_COMMAND; theme"\n'
        "alias printf='echo ALIASED'\n"
        "export FROM_BASHRC=yes\n"
    )
    before = digest(bashrc)
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="bashrc", shell="bash")
            result = await manager.run(info.id, "echo $FROM_BASHRC; (exit 9)")
            assert (texts(result.lines), result.exit_code) == (["yes"], 9)
            result = await manager.run(info.id, "true")
            assert result.exit_code == 0
            # the user's hook ran at every prompt and saw each command's status
            log = (home / "hooks.log").read_text().split()
            assert log[-2:] == ["hook-9", "hook-0"]
            screen = await manager.read(info.id)
            assert any(line.text.startswith("[") for line in screen.lines)  # the theme's prompt
    assert digest(bashrc) == before
    assert files_made(home) == [".bashrc", "hooks.log"]


async def test_a_zshrc_with_a_theme_like_prompt(home: Path) -> None:
    zshrc = home / ".zshrc"
    zshrc.write_text(
        "setopt prompt_subst\n"
        "autoload -Uz add-zsh-hook\n"
        "precmd() { print -n '\\e]0;title\\a'; false; }\n"  # old style, clobbers $?
        "theme_precmd() { PROMPT='%F{green}%n%f %~ $(echo git:main) %(?.ok.fail:%?) %# ' }\n"
        "add-zsh-hook precmd theme_precmd\n"
        "add-zsh-hook preexec theme_preexec\n"
        "theme_preexec() { print -n '\\e]0;running\\a' }\n"
        "RPROMPT='[%?]'\n"
        "export FROM_ZSHRC=yes\n"
    )
    before = digest(zshrc)
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="zshrc", shell="zsh")
            result = await manager.run(info.id, "echo $FROM_ZSHRC; (exit 6)")
            assert (texts(result.lines), result.exit_code) == (["yes"], 6)
            screen = await manager.read(info.id)
            assert any("fail:6" in line.text for line in screen.lines)  # the theme saw $?
            result = await manager.run(info.id, "echo ${ZDOTDIR-unset}")
            assert texts(result.lines) == ["unset"]
            result = await manager.run(info.id, "printf x")
            assert (texts(result.lines), result.exit_code) == (["x"], 0)
    assert digest(zshrc) == before


@pytest.mark.parametrize("shell", SHELLS)
async def test_strict_options_in_the_users_startup_file(home: Path, shell: str) -> None:
    (home / ".bashrc").write_text("set -u\nshopt -s extglob failglob\nunset PS0\n")
    (home / ".zshrc").write_text("setopt nounset ksh_arrays sh_word_split extended_glob\n")
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="strict", shell=shell)
            for code in (0, 3, 0):
                result = await manager.run(info.id, f"echo a b; (exit {code})")
                assert (texts(result.lines), result.exit_code) == (["a b"], code)
            loop = await manager.run(info.id, "for i in 1 2; do\n  echo $i\ndone")
            assert texts(loop.lines) == ["1", "2"]


async def test_zdotdir_is_the_users_again(home: Path) -> None:
    config = home / "config"
    config.mkdir()
    (config / ".zshrc").write_text("export FROM_CONFIG=yes\n")
    with trio.fail_after(20):
        async with shell_manager(home, ZDOTDIR=str(config)) as manager:
            info = await manager.spawn_shell(description="zdotdir", shell="zsh")
            result = await manager.run(info.id, 'echo "$ZDOTDIR $FROM_CONFIG"; env | grep ZDOTDIR')
            assert texts(result.lines) == [f"{config} yes", f"ZDOTDIR={config}"]


@pytest.mark.parametrize("shell", SHELLS)
async def test_rc_false_and_login(home: Path, shell: str) -> None:
    (home / ".bashrc").write_text("export RC=bashrc\n")
    (home / ".bash_profile").write_text("export LOGIN=bash_profile\n")
    (home / ".zshrc").write_text("export RC=zshrc\n")
    (home / ".zprofile").write_text("export LOGIN=zprofile\n")
    (home / ".zlogin").write_text("export LATE=zlogin\n")
    show = 'echo "${RC-none} ${LOGIN-none} ${LATE-none}"'
    with trio.fail_after(30):
        async with shell_manager(home) as manager:
            plain = await manager.spawn_shell(description="rc", shell=shell)
            bare = await manager.spawn_shell(description="no rc", shell=shell, rc=False)
            login = await manager.spawn_shell(description="login", shell=shell, login=True)
            results = [texts((await manager.run(s.id, show)).lines) for s in (plain, bare, login)]
    if shell == "bash":
        assert results == [["bashrc none none"], ["none none none"], ["none bash_profile none"]]
    else:
        assert results == [["zshrc none none"], ["none none none"], ["zshrc zprofile zlogin"]]


async def test_unsupported_shells_are_refused(home: Path) -> None:
    with trio.fail_after(20):
        async with shell_manager(home, SHELL="/bin/zsh") as manager:
            for shell in ("sh", "dash", "/bin/sh", "fish"):
                with pytest.raises(errors.InvalidInput) as refused:
                    await manager.spawn_shell(description="no", shell=shell)
                assert refused.value.field == "shell"
                assert "bash or zsh" in refused.value.message
            assert manager.list() == []
            info = await manager.spawn_shell(description="default")  # $SHELL, being zsh
            assert info.shell == "zsh"
    with trio.fail_after(20):
        async with shell_manager(home, SHELL="/bin/dash") as manager:
            info = await manager.spawn_shell(description="default")
            assert info.shell == "bash"


async def test_the_startup_files_are_gone_and_the_nonce_is_not_in_the_environment(
    home: Path,
) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="private", shell="bash")
            assert (info.command, info.args) == ("bash", [])  # what was asked for
            argv = cmdline_of(info.pid)
            rcfile = argv[argv.index("--rcfile") + 1]
            assert not exists(os.path.dirname(rcfile))
            environ = environ_of(info.pid)
            raw = await manager.read_raw(info.id)
            nonce = raw.data.split(b"tp=", 1)[1][:16]
            assert nonce not in environ
            zsh = await manager.spawn_shell(description="private", shell="zsh")
            zdotdir = environ_of(zsh.pid).split(b"ZDOTDIR=", 1)[1].split(b"\0", 1)[0]
            assert not exists(zdotdir)
            result = await manager.run(zsh.id, "echo ${ZDOTDIR-unset}")
            assert texts(result.lines) == ["unset"]


async def test_a_shell_that_never_shows_a_prompt(home: Path) -> None:
    (home / ".bashrc").write_text("echo about to hang; sleep 30\n")
    with trio.fail_after(20):
        async with trio_pty.open_manager(
            Limits(terminate_grace=0.1, spawn_timeout=1.0),
            environ={"PATH": os.environ["PATH"], "HOME": str(home)},
        ) as manager:
            with pytest.raises(errors.SpawnFailed) as failed:
                await manager.spawn_shell(description="hang", shell="bash")
            assert "no prompt within spawn_timeout" in failed.value.message
            assert "about to hang" in failed.value.message
            assert manager.list() == []


async def test_waits_for_the_prompt_and_their_checks(home: Path) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="waits", shell="bash")
            page = await manager.read(info.id, wait=Wait(prompt=True, timeout_ms=100))
            assert page.reason == "prompt"  # already at the prompt
            write = await manager.write(
                info.id, "sleep 0.3; echo done\r", wait=Wait(prompt=True, timeout_ms=5000)
            )
            assert write.output is not None and write.output.reason == "prompt"
            assert "done" in texts(write.output.lines)
            plain = await manager.spawn("sh", ["-c", "sleep 10"], description="not a shell")
            with pytest.raises(errors.InvalidInput) as refused:
                await manager.read(plain.id, wait=Wait(prompt=True))
            assert refused.value.field == "wait.prompt"
            with pytest.raises(errors.InvalidInput):
                await manager.spawn("sh", description="x", ready=Wait(prompt=True))
            with pytest.raises(errors.InvalidInput) as refused:
                await manager.run(plain.id, "echo")
            assert refused.value.field == "id"
            with pytest.raises(errors.InvalidInput):
                manager.commands(plain.id)
            with pytest.raises(errors.InvalidInput) as refused:
                await manager.read(info.id, command=99)
            assert refused.value.field == "command"
            for bad in ("", "  \n", "echo \x1b[201~ rm", "echo \x03"):
                with pytest.raises(errors.InvalidInput):
                    await manager.run(info.id, bad)
            # none of the refused commands reached the shell
            assert [c.command for c in manager.commands(info.id)] == ["sleep 0.3; echo done"]


# ------------------------------------------------------------------ with the security layers


@pytest.mark.parametrize("shell", SHELLS)
async def test_command_rules_see_the_shell_asked_for_and_env_allow_only_the_clients_env(
    home: Path, shell: str
) -> None:
    """Rules match the shell the caller asked for (not our startup-file arguments), and
    env_allow checks the caller's variables only: zsh's private ZDOTDIR is ours."""
    rules = RulesAuthorizer({"shell": [("*", "deny"), (shell, "allow")], "write": "allow"})
    base = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST, environ=base, authorizer=rules) as manager:
            info = await manager.spawn_shell(description="ruled", shell=shell)
            result = await manager.run(info.id, "echo ruled")
            assert (result.exit_code, texts(result.lines)) == (0, ["ruled"])
            with pytest.raises(trio_pty.PermissionDenied, match="env"):
                await manager.spawn_shell(description="ruled", shell=shell, env={"X": "1"})
            other = "zsh" if shell == "bash" else "bash"
            with pytest.raises(trio_pty.PermissionDenied):
                await manager.spawn_shell(description="ruled", shell=other)


async def test_a_run_waiting_for_the_prompt_is_refused_once_another_run_gets_in(
    home: Path,
) -> None:
    """A run that arrives while the prompt is on its way waits for it; when another run
    stops waiting and sends its command meanwhile, the first is refused with Busy at once,
    not queued behind it (waits for the prompt are not woken by output any more, so the
    second run's submission wakes them)."""
    (home / ".bashrc").write_text('PROMPT_COMMAND="${PROMPT_COMMAND:+$PROMPT_COMMAND; }sleep 1"\n')
    refused: list[object] = []
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="slow prompt", shell="bash")
            await manager.write(info.id, "true\r")
            for _ in range(1000):  # no event says when D came: look every 5 ms
                if any(c.state == "exited" for c in manager.commands(info.id)):
                    break
                await trio.sleep(0.005)
            # D has come, the prompt comes a second later: neither at it nor running.

            async def first() -> None:
                with pytest.raises(errors.Busy) as busy:
                    await manager.run(info.id, "echo first", timeout_ms=10_000)
                refused.append(busy.value.details()["command"])
                refused.append(trio.current_time() - started)

            started = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first)
                await trio.testing.wait_all_tasks_blocked()  # the first run waits for the prompt
                await manager.run(info.id, "echo second", timeout_ms=200)
    assert refused[0] == "echo second"
    assert isinstance(refused[1], float) and refused[1] < 0.9  # before the prompt came


@pytest.mark.parametrize("shell", SHELLS)
async def test_write_rules_are_consulted_for_each_run(home: Path, shell: str) -> None:
    """`run` skips the request only for AllowAll: rules that deny the command refuse it
    before any key reaches the shell."""
    rules = RulesAuthorizer({"shell": "allow", "write": [("*", "allow"), ("*rm -rf*", "deny")]})
    base = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST, environ=base, authorizer=rules) as manager:
            info = await manager.spawn_shell(description="ruled", shell=shell)
            with pytest.raises(trio_pty.PermissionDenied, match="rm -rf"):
                await manager.run(info.id, "rm -rf ./nothing-here")
            result = await manager.run(info.id, "echo allowed")
            assert (result.number, texts(result.lines)) == (1, ["allowed"])
            assert [c.command for c in manager.commands(info.id)] == ["echo allowed"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
@pytest.mark.parametrize("shell", SHELLS)
async def test_a_sandboxed_shell_reads_its_startup_files_and_reports_commands(
    home: Path, tmp_path: Path, shell: str
) -> None:
    """The sandbox's private /tmp would hide our startup files; they are bound read-only."""
    work = tmp_path / "work"
    work.mkdir()
    base = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
    sandbox = BubblewrapSandbox()
    with trio.fail_after(30):
        async with trio_pty.open_manager(
            FAST, environ=base, root=str(work), sandbox=sandbox
        ) as manager:
            info = await manager.spawn_shell(description="boxed", shell=shell)
            result = await manager.run(info.id, "touch /usr/x 2>/dev/null; echo $?")
            assert (result.exit_code, texts(result.lines)) == (0, ["1"])
            failed = await manager.run(info.id, "exit_code() { return 7; }; exit_code")
            assert failed.exit_code == 7


async def test_a_commands_output_is_paged_with_offset_only_and_screens_do_not_wait_for_prompts(
    home: Path,
) -> None:
    with trio.fail_after(20):
        async with shell_manager(home) as manager:
            info = await manager.spawn_shell(description="combos", shell="bash")
            result = await manager.run(info.id, "seq 1 3")
            for where in ({"tail": 2}, {"since": "last"}):
                with pytest.raises(trio_pty.InvalidInput, match="command"):
                    await manager.read(info.id, command=result.number, **where)
            page = await manager.read(info.id, command=result.number)
            assert texts(page.lines) == ["1", "2", "3"]
            with pytest.raises(trio_pty.InvalidInput, match=r"wait\.prompt"):
                await manager.screen(info.id, wait=trio_pty.Wait(prompt=True))
