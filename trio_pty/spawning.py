"""Starting a session: what a spawn asked for, checked once (`SpawnOptions`), and what every
spawn of one manager shares (`Spawner`: the filtered environment, the command rules, the
sandbox, the root, a shell session's startup files).

It drives a Session, so it sits above session.py (which names `SpawnOptions` for its
annotations only). The registry, the quotas and the reservations stay the manager's: the
manager takes a slot, asks the Spawner for the workdir, the environment and the argv, and
starts the session's task in its nursery.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final

import attrs
import trio

from . import errors
from .limits import Limits
from .model import SessionInfo, Wait
from .output.buffer import OutputBuffer
from .output.search import CompiledPattern
from .policy import validate
from .policy.authorize import Authorizer, WorkdirHandle, authorize_spawn, open_workdir
from .policy.environment import EnvAllowList, finish_environment
from .posix import proc, spawn
from .posix.sandbox import Sandbox
from .session import Session
from .shell import launch
from .shell.history import ShellTracker

__all__ = ["ShellStart", "SpawnOptions", "Spawner", "until_first_prompt", "until_ready"]


@attrs.frozen(kw_only=True)
class SpawnOptions:
    """What a spawn asked for, as `Manager.spawn` takes it (see there). `checked` validates
    it once and fills in the defaults; the session is built from the checked record."""

    owner: str
    command: str
    args: Sequence[str] = ()
    description: str
    workdir: str | None = None  # as asked (relative to the root); the session's is resolved
    title: str | None = None
    notify_on_exit: bool = False
    timeout: float | None = None
    idle_timeout: float | None = None  # checked: limits.idle_timeout when not given
    env: Mapping[str, str] | None = None  # the client's variables (checked: not env_allow's)
    # Defaults of the manager's own (a one-shot command's pagers off), not the client's: so
    # never checked against env_allow; the client's `env` overrides them.
    defaults_env: Mapping[str, str] | None = None
    rows: int = 24
    cols: int = 80
    name: str | None = None  # unique among the owner's running sessions (the manager's check)

    def checked(self, limits: Limits) -> SpawnOptions:
        """Every field validated (InvalidInput names the first wrong one), in this order."""
        validate.owner(self.owner, limits)
        validate.command(self.command, limits)
        args = tuple(validate.args(self.args, limits))
        validate.description(self.description, limits)
        if self.workdir is not None:
            validate.workdir(self.workdir, limits)
        title = validate.title(self.title, limits)
        timeout = validate.timeout(self.timeout, limits)
        idle_timeout = validate.timeout(self.idle_timeout, limits, field="idle_timeout")
        env = validate.env(self.env, limits)
        rows, cols = validate.window(self.rows, self.cols, limits)
        return attrs.evolve(
            self,
            name=checked_name(self.name),
            args=args,
            title=title,
            rows=rows,
            cols=cols,
            timeout=timeout,
            idle_timeout=limits.idle_timeout if idle_timeout is None else idle_timeout,
            env=env,
        )


#: A session's name: what a person types (`attach build`), never taken for an id (`pty_...`).
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def checked_name(name: object) -> str | None:
    """A session's name, validated: 1-64 letters, digits, `.`, `_`, `-` (the first a letter
    or digit), not starting with `pty_` (ids do)."""
    if name is None:
        return None
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise errors.InvalidInput(
            "name", "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if name.startswith("pty_"):
        raise errors.InvalidInput("name", "must not start with 'pty_' (session ids do)")
    return name


@attrs.frozen
class ShellStart:
    """What a shell session runs besides the shell asked for: its startup files (`setup`:
    their arguments, the environment they need, ours and not the client's, so never checked
    against env_allow, and their directory, which a sandbox must let it read), and the
    tracker its reader feeds from the first byte."""

    setup: launch.Launch
    nonce: str
    limits: Limits

    def tracker(self, output: OutputBuffer) -> ShellTracker:
        return ShellTracker(
            self.setup.name,
            self.nonce,
            output,
            history=self.limits.command_history,
            max_line_length=self.limits.max_line_length,
            max_escape_length=self.limits.max_escape_length,
        )


class Spawner:
    """What every spawn of one manager shares: the environment filtered once, the command
    rules (`authorizer`, `env_allow`), the sandbox and the root workdirs are relative to
    (`root`, kept by its real path)."""

    def __init__(
        self,
        limits: Limits,
        *,
        manager_id: str,
        base_env: dict[str, str],
        root: str,
        authorizer: Authorizer,
        env_allow: EnvAllowList | None,
        sandbox: Sandbox | None,
    ) -> None:
        self.limits = limits
        self.manager_id = manager_id
        self.base_env = base_env
        self.root = os.path.realpath(root)
        self.authorizer = authorizer
        # Under command rules the client's env is checked against the operator's allow-list
        # and the command is resolved with our PATH: a rule judges a command line, and the
        # environment decides what that command line runs. None: no rules, no checks.
        self.env_allow = env_allow
        self.sandbox = sandbox

    def check_env(self, options: SpawnOptions) -> None:
        """The client's variables against env_allow (a shell's own are ours: not checked)."""
        if self.env_allow is not None:
            self.env_allow.check(options.env)

    @asynccontextmanager
    async def workdir(self, options: SpawnOptions) -> AsyncIterator[WorkdirHandle]:
        """The workdir opened (pinned) and the spawn authorized in it; spawn in its fd."""
        with open_workdir(options.workdir, root=self.root) as handle:
            await authorize_spawn(
                self.authorizer,
                command=options.command,
                args=options.args,
                workdir=handle,
                owner=options.owner,
            )
            yield handle

    def launch(
        self, options: SpawnOptions, session_id: str, workdir: str, shell: ShellStart | None
    ) -> tuple[dict[str, str], list[str]]:
        """The child's environment and what its leader execs (for a shell session, with
        our startup files)."""
        overrides = {
            **(options.defaults_env or {}),
            **(options.env or {}),
            **(shell.setup.env if shell is not None else {}),
        }
        child_env = finish_environment(
            self.base_env,
            overrides=overrides,
            tags={proc.TAG_MANAGER: self.manager_id, proc.TAG_SESSION: session_id},
            workdir=workdir,
        )
        if shell is None:
            argv = self.program(options.command, options.args, child_env, workdir)
        else:
            argv = self.program(
                options.command,
                shell.setup.args,
                child_env,
                workdir,
                readable=(shell.setup.directory,),
            )
        return child_env, argv

    def program(
        self,
        command: str,
        args: Sequence[str],
        child_env: dict[str, str],
        workdir: str,
        *,
        readable: Sequence[str] = (),
    ) -> list[str]:
        """What the session's leader execs; may replace `child_env`'s content (sandbox).
        `readable` names paths of ours the program must read (a shell's startup files).

        Without command rules the command is looked up in the child's own PATH (a client may
        set PATH), here once so that a bad command fails with its reason, then again by
        `spawn.start_child` (in the opened workdir) so the program sees argv[0] as given.
        Under rules it is resolved with our PATH, absolute entries only, and that path is
        what runs. Then the sandbox wraps it.
        """
        if self.env_allow is None:
            spawn.resolve_command(command, path=child_env.get("PATH", os.defpath), cwd=workdir)
            argv = [command, *args]
        else:
            path = self.base_env.get("PATH", os.defpath)
            resolved = spawn.resolve_command(
                command, path=path, cwd=workdir, absolute_dirs_only=True
            )
            argv = [resolved, *args]
        if self.sandbox is not None:
            argv, wrapped_env = self.sandbox.wrap(argv, child_env, workdir, readable=readable)
            child_env.clear()
            child_env.update(wrapped_env)
        return argv

    def shell(
        self, shell: str | None, env: Mapping[str, str], *, login: bool, rc: bool
    ) -> ShellStart:
        """Which shell (`Manager.spawn_shell` says how it is chosen) and its startup files,
        written to a private directory: remove them (`setup.remove()`) once it prompted."""
        for field, flag in (("login", login), ("rc", rc)):
            if not isinstance(flag, bool):
                raise errors.InvalidInput(field, f"must be true or false, got {flag!r}")
        environ = {**self.base_env, **env}
        name, command = launch.resolve(shell, environ)
        nonce = secrets.token_hex(8)
        setup = launch.prepare(name, command, nonce=nonce, rc=rc, login=login, environ=environ)
        return ShellStart(setup, nonce, self.limits)


async def until_ready(
    session: Session, ready: Wait | None, pattern: CompiledPattern | None, limits: Limits
) -> SessionInfo:
    """A started session's info; with `ready`, once the wait is over, with the output so far
    and the reason in `SessionInfo.ready`."""
    if ready is None:
        return session.info()
    reason = await session.wait(
        ready,
        pattern=pattern,
        start_line=0,
        has_output=lambda: session.output.end_offset > 0,
    )
    page = session.output.read(0, limits.default_read_limit)
    return attrs.evolve(session.info(), ready=attrs.evolve(page, reason=reason))


async def until_first_prompt(
    session: Session, start: ShellStart, deadline: float
) -> errors.SpawnFailed | None:
    """Wait for a shell session's first prompt until `deadline`. None once it is up; else
    the session is killed, and the error says why (its startup files failed, asked
    something, or took too long), for the caller to raise once it removed the session."""
    marks = session.shell
    assert marks is not None
    with trio.move_on_at(deadline):
        await session.wait_until(lambda: marks.prompts > 0)
    if marks.prompts > 0:
        return None
    last = session.output.last_nonblank_line()
    await session.kill()
    name = start.setup.name
    how = (
        f"exited with code {session.exit_code} before its first prompt"
        if session.exit_code is not None
        else f"showed no prompt within spawn_timeout ({start.limits.spawn_timeout:g} s)"
    )
    return errors.SpawnFailed(
        f"{name} {how}; its last output: {last!r}" if last else f"{name} {how}",
        command=start.setup.command,
    )
