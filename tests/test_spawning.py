"""spawning.py: the options a spawn asked for, checked once (pure), and the Spawner's argv
and environment; then that a session is built from the checked record."""

from __future__ import annotations

import os

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from trio_pty import errors, open_manager
from trio_pty.limits import Limits
from trio_pty.policy.authorize import AllowAll
from trio_pty.policy.environment import EnvAllowList
from trio_pty.spawning import Spawner, SpawnOptions

LIMITS = Limits()


def options(**changes: object) -> SpawnOptions:
    fields: dict[str, object] = {"owner": "o", "command": "true", "description": "d"}
    fields.update(changes)
    return SpawnOptions(**fields)  # type: ignore[arg-type]


def test_checked_fills_the_defaults_and_keeps_what_was_asked() -> None:
    checked = options(args=["a", "b"], env={"X": "1"}, timeout=5, title="t").checked(LIMITS)
    assert checked.args == ("a", "b")
    assert checked.idle_timeout == LIMITS.idle_timeout
    assert (checked.timeout, checked.title, checked.env) == (5, "t", {"X": "1"})
    assert options(idle_timeout=3).checked(LIMITS).idle_timeout == 3
    assert checked.checked(LIMITS) == checked  # checking again changes nothing


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("owner", {"owner": ""}),
        ("command", {"command": ""}),
        ("args", {"args": "not a list"}),
        ("workdir", {"workdir": "a\0b"}),
        ("timeout", {"timeout": -1}),
        ("idle_timeout", {"idle_timeout": 0}),
        ("env", {"env": {"1BAD": "x"}}),
        ("rows", {"rows": 0}),
        ("cols", {"cols": LIMITS.max_cols + 1}),
    ],
)
def test_a_wrong_option_is_named(field: str, changes: dict[str, object]) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        options(**changes).checked(LIMITS)
    assert caught.value.field == field


@given(st.integers(-3, 600), st.integers(-3, 600))
def test_a_window_is_checked_once_and_kept(rows: int, cols: int) -> None:
    try:
        checked = options(rows=rows, cols=cols).checked(LIMITS)
    except errors.InvalidInput as exc:
        assert exc.field in ("rows", "cols")
        assert not (1 <= rows <= LIMITS.max_rows and 1 <= cols <= LIMITS.max_cols)
        return
    assert (checked.rows, checked.cols) == (rows, cols)


def spawner(env_allow: EnvAllowList | None = None) -> Spawner:
    return Spawner(
        LIMITS,
        manager_id="m1",
        base_env={"PATH": os.environ.get("PATH", os.defpath)},
        root="/",
        authorizer=AllowAll(),
        env_allow=env_allow,
        sandbox=None,
    )


def test_launch_tags_the_environment_and_keeps_argv_as_given() -> None:
    env, argv = spawner().launch(options(args=("x",)).checked(LIMITS), "pty_1", "/", None)
    assert argv == ["true", "x"]
    assert env["PWD"] == "/"
    assert "m1" in env.values() and "pty_1" in env.values()


def test_under_rules_the_command_is_resolved_with_our_path() -> None:
    argv = spawner(EnvAllowList()).program("true", (), {"PATH": "/nowhere"}, "/")
    assert os.path.isabs(argv[0]) and argv[0].endswith("/true")
    with pytest.raises(errors.PtyError):
        spawner().program("true", (), {"PATH": "/nowhere"}, "/")  # the child's own PATH
    with pytest.raises(errors.PermissionDenied):
        spawner(EnvAllowList()).check_env(options(env={"X": "1"}).checked(LIMITS))


def test_a_shell_flag_must_be_a_bool() -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        spawner().shell("bash", {}, login="yes", rc=True)  # type: ignore[arg-type]
    assert caught.value.field == "login"


def subdirectory(root: os.PathLike[str]) -> str:
    """A directory `sub` below `root`, by its real path."""
    path = os.path.join(os.path.realpath(root), "sub")
    os.mkdir(path)
    return path


async def test_the_session_is_built_from_the_checked_options(tmp_path: os.PathLike[str]) -> None:
    where = subdirectory(tmp_path)
    with trio.fail_after(20):
        async with open_manager(root=os.fspath(tmp_path)) as manager:
            info = await manager.spawn(
                "true",
                ["x"],
                owner="o",
                description="d",
                workdir="sub",
                title="t",
                notify_on_exit=True,
                timeout=30,
                rows=30,
                cols=100,
            )
            assert (info.owner, info.command, info.args) == ("o", "true", ["x"])
            assert info.workdir == where
            assert (info.title, info.notify_on_exit, info.rows, info.cols) == ("t", True, 30, 100)
            assert info.idle_timeout == LIMITS.idle_timeout
            await manager.wait_exit(info.id, owner="o")
