"""A CLI people keep (issue 29, item 4): the monitor's URL as `--url` (its token never
echoed), errors in CLI words, not-found hints (`--owner`, evicted), names and id prefixes,
`attach`'s exit status, shell completion. Against a real `trio-pty serve` subprocess, the
verbs run in process as in test_cli.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import urllib.parse

import pytest
import trio
from hypothesis import assume, given
from hypothesis import strategies as st

from trio_pty.cli import build_parsers, invoked_verb
from trio_pty.client.client import redact_url, split_url
from trio_pty.console.common import UsageError
from trio_pty.console.targets import pick
from trio_pty.model import SessionInfo

from .rpc_support import ServerProcess, live, owner_for
from .test_cli import Cli, cli_env, server, stderr

__all__ = ["live", "server"]  # fixtures used by name


@pytest.fixture
def cli(live: ServerProcess, request: pytest.FixtureRequest, tmp_path: object) -> Cli:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    return Cli(live, owner_for(request), tmp_path)


# --------------------------------------------------------------------------------------------
# --url: the monitor's URL


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8765/?token=abc", ("ws://127.0.0.1:8765/rpc", "abc")),
        ("https://example.org/?token=abc", ("wss://example.org/rpc", "abc")),
        ("http://[::1]:9/", ("ws://[::1]:9/rpc", None)),
        ("ws://h:1/rpc?token=t&x=1", ("ws://h:1/rpc?x=1", "t")),
        ("ws://h:1/rpc", ("ws://h:1/rpc", None)),
        ("http://h:1/rpc?token=", ("ws://h:1/rpc", None)),
    ],
)
def test_split_url(url: str, expected: tuple[str, str | None]) -> None:
    assert split_url(url) == expected


@given(
    st.sampled_from(["http", "https", "ws", "wss", "ftp", ""]),
    st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=8),
)
def test_a_url_as_shown_never_holds_its_token(scheme: str, token: str) -> None:
    query = urllib.parse.urlencode({"token": token})
    url = f"{scheme}://host:1/?{query}" if scheme else f"host:1/?{query}"
    shown = redact_url(url)
    assume(token not in f"{scheme}://host:1/rpc")
    assert token not in shown and query not in shown
    assert split_url(url)[1] == token


async def test_url_takes_the_monitors_address_and_never_echoes_the_token(cli: Cli) -> None:
    live = cli.live
    assert live.token is not None
    page = f"http://127.0.0.1:{live.port}/?token={live.token}"
    with trio.fail_after(20):
        # The monitor's URL, the token taken from it (no other given).
        listed = await cli("list", "--url", page, env={"TRIO_PTY_TOKEN": ""})
        assert listed.returncode == 0, stderr(listed)
        assert "--url" in stderr(listed)  # the warning: argv is readable
        assert live.token not in stderr(listed)
        from_env = await cli("list", env={"TRIO_PTY_TOKEN": "", "TRIO_PTY_URL": page})
        assert (
            from_env.returncode == 0
            and stderr(from_env) == f"no sessions for owner {cli.owner!r}\n"
        )
        # Refused: a wrong token in the URL, a scheme it cannot use; the token never shown.
        secret = "s3cret-not-the-token"
        wrong = await cli(
            "list",
            env={
                "TRIO_PTY_TOKEN": "",
                "TRIO_PTY_URL": f"http://127.0.0.1:{live.port}/?token={secret}",
            },
        )
        assert wrong.returncode == 3 and "HTTP 401" in stderr(wrong)
        assert secret not in stderr(wrong)
        for url in (
            f"ftp://127.0.0.1:{live.port}/?token={secret}",
            f"http://127.0.0.1:1/?token={secret}",
        ):
            refused = await cli("list", env={"TRIO_PTY_TOKEN": "", "TRIO_PTY_URL": url})
            assert refused.returncode == 3, stderr(refused)
            assert secret not in stderr(refused), stderr(refused)


# --------------------------------------------------------------------------------------------
# Errors in CLI words; not-found hints


async def test_busy_names_cli_verbs(cli: Cli) -> None:
    with trio.fail_after(30):
        shell = (await cli.ok("shell", "--no-rc")).strip()
        still = await cli("run", shell, "--wait-ms", "100", "--", "sleep", "30")
        assert still.returncode == 124, stderr(still)
        busy = await cli("run", shell, "--", "true")
        assert busy.returncode == 1 and "[busy]" in stderr(busy)
        assert f"trio-pty wait {shell} --prompt" in stderr(busy)
        assert f"trio-pty signal {shell} INT" in stderr(busy)
        assert "Wait(" not in stderr(busy) and "escapes" not in stderr(busy)
        bad = await cli("wait", shell, "--idle", "1", "--wait-ms", "-5")
        assert bad.returncode == 1 and "(option --wait-ms)" in stderr(bad), stderr(bad)
        await cli.ok("kill", shell)


async def test_not_found_says_whose_it_is_and_what_was_evicted(
    cli: Cli, request: pytest.FixtureRequest
) -> None:
    other = Cli(cli.live, owner_for(request) + "-other", cli.cwd)
    with trio.fail_after(30):
        theirs = (await other.ok("spawn", "--", "sleep", "30")).strip()
        missing = await cli("read", theirs)
        assert missing.returncode == 1 and "[session_not_found]" in stderr(missing)
        assert f"add --owner {other.owner}" in stderr(missing), stderr(missing)
        unknown = await cli("read", "pty_00000000")
        assert "--owner" not in stderr(unknown) and "evicted" not in stderr(unknown)
        await other.ok("kill", theirs)

        # max_sessions_per_owner is 3: the 4th spawn evicts the oldest ended one.
        first = (await cli.ok("spawn", "--exit", "--", "true")).strip()
        for _ in range(2):
            await cli.ok("spawn", "--exit", "--", "true")
        await cli.ok("spawn", "--exit", "--", "true")
        gone = await cli("read", first)
        assert gone.returncode == 1 and "[session_not_found]" in stderr(gone)
        assert "evicted" in stderr(gone), stderr(gone)
        # Another owner asking for it learns nothing more than "not found".
        theirs_now = await other("read", first)
        assert theirs_now.returncode == 1
        assert "evicted" not in stderr(theirs_now) and "--owner" not in stderr(theirs_now)
        await cli.ok("delete-owner", cli.owner)


# --------------------------------------------------------------------------------------------
# Names and prefixes


def _info(
    session_id: str, *, name: str | None = None, created: float = 0.0, status: str = "running"
) -> SessionInfo:
    return SessionInfo(
        id=session_id,
        owner="o",
        command="true",
        args=[],
        workdir="/",
        title=None,
        description="d",
        status=status,  # type: ignore[arg-type]
        pid=1,
        exit_code=None,
        exit_signal=None,
        timed_out=False,
        created_at=created,
        line_count=0,
        byte_count=0,
        rows=24,
        cols=80,
        notify_on_exit=False,
        timeout=None,
        name=name,
    )


def test_pick_an_id_a_name_a_prefix_or_the_latest() -> None:
    sessions = [
        _info("pty_aa11", name="build", created=1, status="exited"),
        _info("pty_aa22", created=2),
        _info("pty_bb33", name="build", created=3),
        _info("pty_cc44", created=4, status="exited"),
    ]
    assert pick("pty_aa11", sessions) == "pty_aa11"
    assert pick("build", sessions) == "pty_bb33"  # the running one holds the name
    assert pick("build", sessions[:2]) == "pty_aa11"  # else the latest that had it
    assert pick("bb", sessions) == "pty_bb33" and pick("pty_aa2", sessions) == "pty_aa22"
    assert pick("zz", sessions) is None and pick("pty_zz", sessions) is None
    with pytest.raises(UsageError, match="pty_aa11, pty_aa22"):
        pick("aa", sessions)
    assert pick(None, sessions) == "pty_bb33"  # the latest running
    assert pick(None, [sessions[0], sessions[3]]) == "pty_cc44"  # else the latest
    with pytest.raises(UsageError, match="no session"):
        pick(None, [])


@given(st.sets(st.text("0123456789abcdef", min_size=8, max_size=8), min_size=1, max_size=20))
def test_an_id_or_a_prefix_only_it_has_means_it(hexes: set[str]) -> None:
    sessions = [_info("pty_" + h, created=i) for i, h in enumerate(sorted(hexes))]
    for info in sessions:
        assert pick(info.id, sessions) == info.id
        for size in range(1, 9):
            prefix = info.id[4 : 4 + size]
            owners = [s.id for s in sessions if s.id.startswith("pty_" + prefix)]
            if owners == [info.id]:
                assert pick(prefix, sessions) == info.id


async def test_names_and_prefixes_address_sessions(cli: Cli) -> None:
    with trio.fail_after(30):
        built = await cli.json("spawn", "--name", "build", "--", "sleep", "30")
        assert built["name"] == "build"
        other = (await cli.ok("shell", "--no-rc", "--name", "sh.1")).strip()
        table = await cli.lines("list")
        assert table[0].split()[:2] == ["ID", "NAME"]
        assert {line.split()[0]: line.split()[1] for line in table[1:]} == {
            built["id"]: "build",
            other: "sh.1",
        }
        taken = await cli("spawn", "--name", "build", "--", "true")
        assert taken.returncode == 1 and "[invalid_input]" in stderr(taken)
        assert built["id"] in stderr(taken) and "(option --name)" in stderr(taken)
        for bad in ("pty_x", "a b", "-x", ""):
            refused = await cli("spawn", f"--name={bad}", "--", "true")
            assert refused.returncode == 1 and "[invalid_input]" in stderr(refused), bad
        assert (await cli.ok("run", "sh.1", "--", "echo", "hi")).splitlines() == ["hi"]
        assert (await cli.json("kill", "build"))["id"] == built["id"]
        # An ended session gives its name up; the name then means the running one.
        again = (await cli.ok("spawn", "--name", "build", "--", "sleep", "30")).strip()
        assert (await cli.json("kill", "build"))["id"] == again
        assert (await cli.json("screen", other[4:9]))["id"] == other
        assert (await cli.json("kill", other[: len(other) - 2]))["id"] == other
        await cli.ok("delete-owner", cli.owner)


# --------------------------------------------------------------------------------------------
# attach: the latest session, its exit status


@pytest.mark.parametrize(("script", "status"), [("exit 7", 7), ("kill -TERM $$", 128 + 15)])
async def test_attach_takes_the_latest_session_and_exits_with_its_status(
    cli: Cli, script: str, status: int
) -> None:
    with trio.fail_after(30):
        await cli.ok("spawn", "--", "sleep", "30")
        latest = (await cli.ok("spawn", "--", "sh", "-c", f"read x; echo got:$x; {script}")).strip()
        result = await trio.run_process(
            cli.command("attach"),  # no id: the latest running session
            env=cli_env(cli.live, cli.owner),
            stdin=b"typed\n",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert result.returncode == status, stderr(result)
        assert "got:typed" in result.stdout.decode()
        assert f"[{latest} exited" in stderr(result)
        await cli.ok("delete-owner", cli.owner)


# --------------------------------------------------------------------------------------------
# Shell completion


def _complete(shell: list[str], script: str, words: str) -> list[str]:
    """What the completion function offers for the command line `words` (the last word is
    the one being completed), in a real shell with the script loaded."""
    probe = textwrap.dedent(
        f"""
        eval "$SCRIPT"
        complete -p trio-pty
        COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
        _trio_pty
        printf '%s\\n' "${{COMPREPLY[@]}}"
        """
    )
    done = subprocess.run(
        [*shell, probe],
        env={**os.environ, "SCRIPT": script},
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    registered, *offered = done.stdout.splitlines()
    assert registered.endswith("-F _trio_pty trio-pty"), registered
    return [word for word in offered if word]


def _script(shell: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "trio_pty", "completion", shell],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return done.stdout


def test_bash_completion_completes_verbs_and_options() -> None:
    script = _script("bash")
    bash = ["bash", "--norc", "--noprofile", "-c"]
    assert _complete(bash, script, "trio-pty at") == ["attach"]
    assert sorted(_complete(bash, script, "trio-pty rea")) == ["read", "read-raw"]
    assert _complete(bash, script, "trio-pty --json comp") == ["completion"]
    assert _complete(bash, script, "trio-pty spawn --na") == ["--name"]
    assert _complete(bash, script, "trio-pty completion z") == ["zsh"]


def test_zsh_completion_loads_and_completes_verbs() -> None:
    """zsh runs the bash function through bashcompinit; its `compgen` offers every word
    and zsh's own completion then keeps those that start with what was typed."""
    probe = textwrap.dedent(
        """
        autoload -Uz compinit && compinit -u -D
        eval "$SCRIPT"
        print -r -- "$_comps[trio-pty]"
        offer() {
            emulate -L sh
            setopt kshglob noshglob braceexpand
            COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
            _trio_pty
            printf '%s\\n' "${COMPREPLY[@]}"
        }
        offer trio-pty at
        echo --
        offer trio-pty spawn --na
        """
    )
    done = subprocess.run(
        ["zsh", "-f", "-c", probe],
        env={**os.environ, "SCRIPT": _script("zsh")},
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    registered, *rest = done.stdout.splitlines()
    assert registered == "_bash_complete -o default -F _trio_pty"
    verbs, options = "\n".join(rest).split("\n--\n")
    assert {"attach", "spawn", "completion"} <= set(verbs.split()) and "--url" not in verbs
    assert "--name" in options.split() and "attach" not in options.split()


# --------------------------------------------------------------------------------------------
# Speed: only the invoked verb's parser is built


@pytest.mark.parametrize(
    ("argv", "invoked"),
    [
        (["list"], "list"),
        (["--url", "ws://h/rpc", "--json", "read", "x"], "read"),
        (["--token", "list", "kill", "x"], "kill"),  # the token's value is no verb
        (["--url=ws://h/rpc", "attach"], "attach"),
        (["--help", "list"], None),
        (["bogus", "list"], None),
        ([], None),
    ],
)
def test_the_invoked_verb(argv: list[str], invoked: str | None) -> None:
    assert invoked_verb(argv) == invoked


def test_one_verbs_parser_parses_as_the_whole_parser() -> None:
    argv = ["--json", "read", "build", "--tail", "5", "--owner", "o"]
    alone, verbs = build_parsers("read")
    assert list(verbs) == ["read", "mcp"]
    assert vars(alone.parse_args(argv)) == vars(build_parsers()[0].parse_args(argv))
