"""Finding 4 of issue 17: with `"*" = deny, "git status" = allow`, a client ran its own program
through `env={"PATH": evil}`, and any command through `GIT_CONFIG_COUNT/KEY/VALUE` setting
`core.fsmonitor`. Under command rules a client's `env` may only name variables the operator
allowed (risky ones only by exact name), and the command is resolved with the server's PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import trio_pty
from trio_pty.errors import PermissionDenied
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.policy.environment import EnvAllowList, risky_reason

from .helpers import wait_for_status

FAST = trio_pty.Limits(terminate_grace=0.3)
GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


def git_only() -> RulesAuthorizer:
    return RulesAuthorizer([("*", "deny"), ("git status", "allow")])


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository to run `git status` in, and a fake `git` in evil/ that leaves a mark."""
    base = tmp_path.resolve()
    (base / "repo").mkdir()
    subprocess.run(["git", "init", "-q", str(base / "repo")], check=True, timeout=30)
    evil = base / "evil"
    evil.mkdir()
    (evil / "git").write_text(f"#!/bin/sh\ntouch {base / 'pwned-by-path'}\necho fake git\n")
    (evil / "git").chmod(0o755)
    return base


def fsmonitor_env(base: Path) -> dict[str, str]:
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": f"touch {base / 'pwned-by-config'}; false",
    }


async def run_git(
    base: Path,
    env: dict[str, str],
    *,
    authorizer: RulesAuthorizer | None,
    env_allow: list[str] | None = None,
) -> trio_pty.SessionInfo:
    """Spawn `git status` in the repository and wait for it to exit; a refusal is raised
    outside the manager's block (not wrapped in its nursery's exception group)."""
    refused: PermissionDenied | None = None
    with trio.fail_after(20):
        async with trio_pty.open_manager(
            FAST, root=str(base / "repo"), authorizer=authorizer, env_allow=env_allow
        ) as manager:
            try:
                info = await manager.spawn("git", ["status"], description="git", env=env)
            except PermissionDenied as exc:
                refused = exc
            else:
                await wait_for_status(manager, info.id, "exited")
                return manager.get(info.id)
    assert refused is not None
    raise refused


@needs_git
async def test_path_in_env_is_refused_under_rules(repo: Path) -> None:
    with pytest.raises(PermissionDenied) as info:
        await run_git(repo, {"PATH": str(repo / "evil")}, authorizer=git_only())
    assert info.value.kind == "permission_denied"
    assert "PATH" in str(info.value) and "env_allow" in str(info.value)
    assert not (repo / "pwned-by-path").exists()


@needs_git
async def test_allowed_path_still_runs_the_servers_git(repo: Path) -> None:
    """Even when the operator lets clients set PATH, the command is the one our PATH finds."""
    info = await run_git(
        repo, {"PATH": str(repo / "evil")}, authorizer=git_only(), env_allow=["PATH"]
    )
    assert info.command == "git"  # SessionInfo keeps the user's command
    assert info.exit_code == 0
    assert not (repo / "pwned-by-path").exists()


@needs_git
async def test_git_config_through_env_is_refused_under_rules(repo: Path) -> None:
    with pytest.raises(PermissionDenied, match="GIT_CONFIG_COUNT"):
        await run_git(repo, fsmonitor_env(repo), authorizer=git_only())
    # A wildcard never unlocks a risky name: only an exact entry does.
    with pytest.raises(PermissionDenied, match="GIT_CONFIG"):
        await run_git(repo, fsmonitor_env(repo), authorizer=git_only(), env_allow=["*"])
    assert not (repo / "pwned-by-config").exists()


@needs_git
async def test_the_attack_is_real_without_rules(repo: Path) -> None:
    """The control: with no rules, env is the client's (documented), and the probe works."""
    await run_git(repo, fsmonitor_env(repo), authorizer=None)
    assert (repo / "pwned-by-config").exists()


async def test_allowed_names_pass_and_others_are_refused(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with trio_pty.open_manager(
            FAST,
            root=str(tmp_path),
            authorizer=RulesAuthorizer([("*", "allow")]),
            env_allow=["APP_*", "DEBUG"],
        ) as manager:
            info = await manager.spawn(
                "sh",
                ["-c", 'echo "$APP_MODE $DEBUG"'],
                description="env",
                env={"APP_MODE": "dev", "DEBUG": "1"},
                ready=trio_pty.Wait(exit=True, timeout_ms=10_000),
            )
            assert info.ready is not None
            assert "dev 1" in [line.text for line in info.ready.lines]
            with pytest.raises(PermissionDenied, match="OTHER"):
                await manager.spawn("true", description="x", env={"OTHER": "1"})
            with pytest.raises(PermissionDenied, match="LD_PRELOAD"):
                await manager.spawn("true", description="x", env={"LD_PRELOAD": "/x.so"})


def test_default_allow_list_refuses_everything() -> None:
    allow = EnvAllowList()
    for name in ("FOO", "LANG", "PATH", "GIT_DIR", "LD_PRELOAD"):
        assert allow.refusal(name) is not None
    allow.check(None)
    allow.check({})


@pytest.mark.parametrize(
    "name",
    ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "GIT_CONFIG_COUNT", "GIT_SSH_COMMAND",
     "PYTHONPATH", "PYTHONSTARTUP", "BASH_ENV", "ENV", "PROMPT_COMMAND", "HOME",
     "BASH_FUNC_x%%", "NODE_OPTIONS", "PERL5OPT"],
)  # fmt: skip
def test_risky_names_need_an_exact_entry(name: str) -> None:
    assert risky_reason(name) is not None
    assert EnvAllowList(["*"]).refusal(name) is not None
    assert EnvAllowList([name[:2] + "*"]).refusal(name) is not None
    assert EnvAllowList([name]).refusal(name) is None


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True))
def test_a_wildcard_allows_exactly_the_names_that_are_not_risky(name: str) -> None:
    assert (EnvAllowList(["*"]).refusal(name) is None) == (risky_reason(name) is None)


def test_bad_entries_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        EnvAllowList([""])


def test_relative_path_entries_are_skipped_when_resolving_for_rules(tmp_path: Path) -> None:
    from trio_pty.errors import SpawnFailed
    from trio_pty.posix import spawn

    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert spawn.resolve_command("tool", path="bin", cwd=str(tmp_path)) == str(tool)
    with pytest.raises(SpawnFailed):
        spawn.resolve_command("tool", path="bin:", cwd=str(tmp_path), absolute_dirs_only=True)
    assert os.path.isabs(spawn.resolve_command("sh", path=os.defpath, cwd=str(tmp_path)))
