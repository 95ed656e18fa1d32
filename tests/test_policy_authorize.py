"""Authorization: the rules, the resources, and the workdir handle on real directories."""

from __future__ import annotations

import fnmatch
import gc
import os
import shlex
import stat
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty.errors import InvalidInput, PermissionDenied
from trio_pty.policy.authorize import (
    AllowAll,
    AuthorizationRequest,
    Authorizer,
    RulesAuthorizer,
    WorkdirHandle,
    authorize_spawn,
    authorize_write,
    directory_request,
    display_form,
    open_workdir,
    shell_request,
    shell_resource,
    write_request,
    write_resource,
)
from trio_pty.policy.validate import shell_quote

from .helpers import python_steps, site_dirs, unprivileged_prefix

chars = st.characters(codec="utf-8", exclude_characters="\0")


def shell(command: str, *args: str) -> AuthorizationRequest:
    return shell_request(command, args, owner="o")


# -- requests and resources --------------------------------------------------------------------


def test_resources() -> None:
    assert shell_resource("npm", ["run", "dev"]) == "'npm' 'run' 'dev'"
    assert write_resource("python3", "print('hi')\n") == "'python3' <stdin> 'print('\\''hi'\\'')\n'"
    assert write_resource("cat", b"\x03\xff") == "'cat' <stdin> '\x03\\xff'"
    request = write_request("cat", "x", owner="o", session_id="pty_1")
    assert request == AuthorizationRequest(
        permission="write", resource="'cat' <stdin> 'x'", owner="o", session_id="pty_1"
    )
    assert directory_request("/etc", owner="o").resource == "/etc"


def test_request_is_frozen_and_checked() -> None:
    request = shell("ls")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        request.resource = "rm"  # type: ignore[misc]
    with pytest.raises(ValueError, match="permission"):
        AuthorizationRequest(permission="root", resource="x", owner="o")  # type: ignore[arg-type]


words_lists = st.lists(st.text(chars, max_size=10), max_size=6)


@given(words=words_lists)
def test_display_form_is_valid_shell_for_the_same_words(words: list[str]) -> None:
    shown = display_form(shell_quote(words))
    assert shlex.split(shown) == words


@given(a=words_lists, b=words_lists)
def test_display_form_never_confuses_two_command_lines(a: list[str], b: list[str]) -> None:
    if a != b:
        assert display_form(shell_quote(a)) != display_form(shell_quote(b))


def test_display_form_examples() -> None:
    assert display_form("'npm' 'run' 'dev'") == "npm run dev"
    assert display_form("'sh' '-c' 'make test'") == "sh -c 'make test'"
    assert display_form("'it'\\''s' ''") == "'it'\\''s' ''"
    assert display_form(write_resource("cat", "hi")) == "cat <stdin> hi"
    assert display_form(write_resource("cat", "<stdin>")) == "cat <stdin> '<stdin>'"
    for verbatim in ("npm run dev", "cargo *", "/home/me/a b", "'unterminated", "a  b", "'a'b"):
        assert display_form(verbatim) == verbatim


# -- rules -------------------------------------------------------------------------------------


async def test_allow_all() -> None:
    await AllowAll().authorize(shell("rm", "-rf", "/"))


async def denied(authorizer: Authorizer, request: AuthorizationRequest) -> PermissionDenied:
    with pytest.raises(PermissionDenied) as info:
        await authorizer.authorize(request)
    assert info.value.kind == "permission_denied"
    return info.value


async def test_rules_allow_deny_ask_last_match_wins() -> None:
    rules = RulesAuthorizer(
        [
            ("*", "deny"),
            ("npm run dev", "allow"),
            ("cargo *", "allow"),
            ("cargo publish*", "ask"),
            ("git *", "allow"),
            ("git push *", "deny"),
        ]
    )
    await rules.authorize(shell("npm", "run", "dev"))
    await rules.authorize(shell("cargo", "build", "--release"))
    await rules.authorize(shell("git", "status"))
    error = await denied(rules, shell("cargo", "publish"))
    assert "says ask" in str(error)
    error = await denied(rules, shell("git", "push", "--force"))
    assert "denied by rule 'git push *'" in str(error)
    error = await denied(rules, shell("npm", "run", "build"))
    assert "denied by rule '*'" in str(error)
    assert error.details() == {"permission": "shell", "resource": "'npm' 'run' 'build'"}


async def test_no_match_denies() -> None:
    rules = RulesAuthorizer([("ls", "allow")])
    error = await denied(rules, shell("ls", "-l"))
    assert "no rule matches" in str(error)
    await rules.authorize(shell("ls"))
    await denied(RulesAuthorizer([]), shell("ls"))


async def test_word_boundaries_cannot_be_forged() -> None:
    rules = RulesAuthorizer([("npm run dev", "allow")])
    await rules.authorize(shell("npm", "run", "dev"))
    await denied(rules, shell("npm", "run dev"))
    await denied(rules, shell("npm run dev"))
    await denied(rules, shell("npm", "run", "dev", ""))


async def test_fully_quoted_patterns_work_too() -> None:
    rules = RulesAuthorizer({"shell": [("'npm' 'run' 'dev'", "allow")]})
    await rules.authorize(shell("npm", "run", "dev"))


async def test_quoted_words_in_patterns() -> None:
    rules = RulesAuthorizer({"shell": {"sh -c 'make test'": "allow", "echo *": "allow"}})
    await rules.authorize(shell("sh", "-c", "make test"))
    await denied(rules, shell("sh", "-c", "make test; rm -rf ~"))
    await rules.authorize(shell("echo", "hello world", "it's"))


async def test_rules_scoped_per_permission() -> None:
    rules = RulesAuthorizer(
        {
            "*": [("*", "deny")],
            "shell": {"ls *": "allow"},
            "external_directory": {"/srv/*": "allow", "/srv/secret*": "deny"},
            "write": "allow",
        }
    )
    await rules.authorize(shell("ls", "-l"))
    await denied(rules, shell("rm", "x"))
    await rules.authorize(directory_request("/srv/app", owner="o"))
    await denied(rules, directory_request("/srv/secrets", owner="o"))
    await denied(rules, directory_request("/etc", owner="o"))
    await rules.authorize(write_request("ls", "anything", owner="o", session_id="s"))
    assert rules.decide(shell("ls", "-l")).scope == "shell"
    assert rules.decide(shell("rm")).scope == "*"


async def test_rules_for_one_permission_leave_the_others_denied() -> None:
    rules = RulesAuthorizer({"shell": "allow"})
    await rules.authorize(shell("anything"))
    await denied(rules, write_request("cat", "x", owner="o", session_id="s"))


async def test_write_rules_see_the_input() -> None:
    rules = RulesAuthorizer({"write": {"*": "allow", "psql <stdin> *DROP*": "deny"}})
    await rules.authorize(write_request("psql", b"SELECT 1;\n", owner="o", session_id="s"))
    await denied(rules, write_request("psql", b"DROP TABLE x;\n", owner="o", session_id="s"))


async def test_long_resources_are_abbreviated_in_errors() -> None:
    rules = RulesAuthorizer([])
    error = await denied(rules, write_request("cat", "x" * 65_536, owner="o", session_id="s"))
    assert len(str(error)) < 400
    assert "more characters" in str(error)


def test_toml_config() -> None:
    config = tomllib.loads(
        """
        [authorization]
        write = "allow"
        external_directory = [["/tmp/*", "allow"], ["/tmp/keep*", "deny"]]

        [authorization.shell]
        "*" = "deny"
        "npm run dev" = "allow"
        "cargo *" = "allow"
        """
    )
    rules = RulesAuthorizer.from_config(config["authorization"])
    assert rules.rules == {
        "write": (("*", "allow"),),
        "external_directory": (("/tmp/*", "allow"), ("/tmp/keep*", "deny")),
        "shell": (("*", "deny"), ("npm run dev", "allow"), ("cargo *", "allow")),
    }
    assert rules.decide(shell("cargo", "test")).action == "allow"
    assert rules.decide(directory_request("/tmp/keep", owner="o")).action == "deny"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"root": "allow"}, "unknown permission"),
        ({"shell": "maybe"}, "action must be one of allow, deny, ask"),
        ({"shell": {"ls": "yes"}}, "action must be one of"),
        ({"shell": [["ls"]]}, "pair"),
        ({"shell": [("ls", "allow", "x")]}, "pair"),
        ({"shell": [[1, "allow"]]}, "patterns must be strings"),
        ({"shell": 3}, "expected an action"),
        ("allow all", "table or a list"),
        (3, "table or a list"),
    ],
)
def test_bad_config_is_refused(config: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RulesAuthorizer.from_config(config)


paths = st.text("ab/", max_size=8)
patterns = st.text("ab/*?", max_size=5)
actions = st.sampled_from(["allow", "deny", "ask"])


@given(rules=st.lists(st.tuples(patterns, actions), max_size=6), resource=paths)
def test_decision_is_the_last_matching_rule(rules: list[tuple[str, str]], resource: str) -> None:
    authorizer = RulesAuthorizer({"external_directory": rules})  # type: ignore[dict-item]
    expected = "deny"
    for pattern, action in rules:
        if fnmatch.fnmatchcase(resource, pattern):
            expected = action
    decision = authorizer.decide(directory_request(resource, owner="o"))
    assert decision.action == expected


def test_hostile_patterns_and_resources_stay_fast() -> None:
    """The glob pieces are found by linear regex scans, leftmost first, never by
    backtracking across pieces: the Python work does not grow with the resource."""
    rules = RulesAuthorizer({"write": [("*a" * 30 + "*b", "allow"), ("*?*?*?*?*?*c", "allow")]})

    def decide(size: int) -> None:
        request = write_request("cat", "a" * size, owner="o", session_id="s")
        assert rules.decide(request).action == "deny"

    decide(10)  # the patterns compiled once
    assert python_steps(lambda: decide(120_000)) == python_steps(lambda: decide(60_000))


# -- the workdir handle ------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/ (with a/, a file, a link inside and a link out), rootx/ and outside/ next to it."""
    base = tmp_path.resolve()
    (base / "root" / "a" / "b").mkdir(parents=True)
    (base / "root" / "file.txt").write_text("x")
    (base / "rootx").mkdir()
    (base / "outside").mkdir()
    (base / "root" / "link_in").symlink_to(base / "root" / "a")
    (base / "root" / "link_out").symlink_to(base / "outside")
    return base


def test_none_means_root(tree: Path) -> None:
    with open_workdir(None, root=str(tree / "root")) as handle:
        assert handle.path == str(tree / "root")
        assert handle.inside_root
        handle.verify_unchanged()


def test_relative_and_absolute_paths(tree: Path) -> None:
    root = str(tree / "root")
    with open_workdir("a/b", root=root) as handle:
        assert handle.path == str(tree / "root" / "a" / "b")
        assert handle.inside_root
    with open_workdir(str(tree / "outside"), root=root) as handle:
        assert handle.path == str(tree / "outside")
        assert not handle.inside_root


def test_symlink_is_resolved_to_its_target(tree: Path) -> None:
    root = str(tree / "root")
    with open_workdir("link_in", root=root) as handle:
        assert handle.path == str(tree / "root" / "a")
        assert handle.inside_root
        handle.verify_unchanged()
    with open_workdir("link_out", root=root) as handle:
        assert handle.path == str(tree / "outside")
        assert not handle.inside_root


def test_root_given_through_a_symlink(tree: Path) -> None:
    (tree / "root_link").symlink_to(tree / "root")
    with open_workdir("a", root=str(tree / "root_link")) as handle:
        assert handle.root == str(tree / "root")
        assert handle.inside_root


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("a/../a/b", True),
        ("../rootx", False),
        ("a/b/../../../outside", False),
        ("link_in/../a/b", True),  # .. applies to the link's target: root/a/.. is root
        ("link_out/../root", True),  # outside/.. is the common parent, then back into root
        ("link_out/../rootx", False),
        ("../root/a", True),
        (".", True),
    ],
)
def test_dot_dot_tricks(tree: Path, path: str, inside: bool) -> None:
    with open_workdir(path, root=str(tree / "root")) as handle:
        assert handle.path == os.path.realpath(os.path.join(tree / "root", path))
        assert handle.inside_root is inside


def test_prefix_is_not_containment(tree: Path) -> None:
    with open_workdir(str(tree / "rootx"), root=str(tree / "root")) as handle:
        assert not handle.inside_root
    with open_workdir("/", root="/") as handle:
        assert handle.inside_root
    with open_workdir(str(tree), root="/") as handle:
        assert handle.inside_root


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("missing", "No such file or directory"),
        ("a/missing/deeper", "No such file or directory"),
        ("file.txt", "Not a directory"),
        ("file.txt/sub", "Not a directory"),
    ],
)
def test_bad_workdirs_are_invalid_input(tree: Path, path: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as info:
        open_workdir(path, root=str(tree / "root"))
    assert info.value.field == "workdir"
    assert str(info.value) == f"workdir: {reason}: {os.path.realpath(tree / 'root' / path)}"


def test_dangling_and_looping_links(tree: Path) -> None:
    root = tree / "root"
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "loop").symlink_to(root / "loop")
    with pytest.raises(InvalidInput, match="No such file or directory"):
        open_workdir("dangling", root=str(root))
    with pytest.raises(InvalidInput) as info:
        open_workdir("loop", root=str(root))
    assert info.value.field == "workdir"


def test_nul_in_path_is_invalid_input(tree: Path) -> None:
    with pytest.raises(InvalidInput):
        open_workdir("a\0b", root=str(tree / "root"))


UNREADABLE_PROBE = """
import sys
from trio_pty.errors import InvalidInput
from trio_pty.policy.authorize import open_workdir
try:
    open_workdir("locked", root=sys.argv[1]).close()
except InvalidInput as refusal:
    print(refusal)
else:
    print("opened")
"""


def test_unreadable_directory(tree: Path) -> None:
    """In a child that cannot override file modes (as root, as in CI, it drops the
    capabilities that would let it open any directory)."""
    locked = tree / "root" / "locked"
    locked.mkdir(mode=0)
    try:
        probe = subprocess.run(
            [*unprivileged_prefix(file_modes=True), "-c", UNREADABLE_PROBE, str(tree / "root")],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(site_dirs())},
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert "Permission denied" in probe.stdout, probe
        assert probe.stdout.startswith("workdir"), probe
    finally:
        locked.chmod(0o700)


def changed_message(handle: WorkdirHandle) -> str:
    return f"Working directory changed during permission approval: {handle.path}"


def expect_changed(handle: WorkdirHandle) -> None:
    with pytest.raises(PermissionDenied) as info:
        handle.verify_unchanged()
    assert changed_message(handle) in str(info.value)
    assert info.value.kind == "permission_denied"


def test_swapped_for_a_symlink_after_open(tree: Path) -> None:
    target = tree / "root" / "a"
    with open_workdir("a", root=str(tree / "root")) as handle:
        handle.verify_unchanged()
        target.rename(tree / "root" / "a_moved")
        target.symlink_to(tree / "outside")
        expect_changed(handle)


def test_swapped_for_a_symlink_to_the_same_directory(tree: Path) -> None:
    target = tree / "root" / "a"
    with open_workdir("a", root=str(tree / "root")) as handle:
        target.rename(tree / "outside" / "a")
        target.symlink_to(tree / "outside" / "a")
        expect_changed(handle)  # same inode, but the path now leads outside the root


def test_symlink_retargeted_after_open(tree: Path) -> None:
    link = tree / "root" / "link_in"
    with open_workdir("link_in", root=str(tree / "root")) as handle:
        link.unlink()
        link.symlink_to(tree / "outside")
        expect_changed(handle)


def test_replaced_by_another_directory(tree: Path) -> None:
    target = tree / "root" / "a"
    with open_workdir("a", root=str(tree / "root")) as handle:
        target.rename(tree / "root" / "old")
        target.mkdir()
        expect_changed(handle)


def test_removed_after_open(tree: Path) -> None:
    target = tree / "root" / "a" / "b"
    with open_workdir("a/b", root=str(tree / "root")) as handle:
        target.rmdir()
        expect_changed(handle)


def test_handle_is_a_close_on_exec_directory_descriptor(tree: Path) -> None:
    with open_workdir("a", root=str(tree / "root")) as handle:
        assert stat.S_ISDIR(os.fstat(handle.fd).st_mode)
        assert not os.get_inheritable(handle.fd)


def test_child_can_start_in_the_handle(tree: Path) -> None:
    """The spawn contract: cwd=/proc/self/fd/N lands in the opened directory even after a swap."""
    target = tree / "root" / "a"
    with open_workdir("a", root=str(tree / "root")) as handle:
        target.rename(tree / "root" / "moved")
        target.symlink_to(tree / "outside")
        done = subprocess.run(
            ["/bin/pwd", "-P"], cwd=f"/proc/self/fd/{handle.fd}", capture_output=True, check=True
        )
        assert done.stdout.decode().strip() == str(tree / "root" / "moved")


def test_close_is_idempotent_and_final(tree: Path) -> None:
    handle = open_workdir(None, root=str(tree))
    fd = handle.fd
    handle.close()
    handle.close()
    assert handle.closed
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(ValueError, match="closed"):
        _ = handle.fd
    with pytest.raises(ValueError, match="closed"):
        handle.verify_unchanged()
    assert "closed" in repr(handle)


def test_context_manager_closes_on_error(tree: Path) -> None:
    with pytest.raises(RuntimeError), open_workdir(None, root=str(tree)) as handle:
        raise RuntimeError("boom")
    assert handle.closed


def test_leaked_handle_warns(tree: Path) -> None:
    handle = open_workdir(None, root=str(tree))
    fd = handle.fd
    with pytest.warns(ResourceWarning, match="unclosed workdir handle"):
        del handle
        gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


# -- the flows ---------------------------------------------------------------------------------


@attrs.define
class Recorder:
    """Records requests; optionally does something while 'a human thinks'."""

    during: Callable[[AuthorizationRequest], None] | None = None
    refuse: str | None = None
    seen: list[AuthorizationRequest] = attrs.field(factory=list)

    async def authorize(self, request: AuthorizationRequest) -> None:
        self.seen.append(request)
        if self.during is not None:
            self.during(request)
        if request.permission == self.refuse:
            raise PermissionDenied(request.permission, request.resource)


async def test_spawn_inside_root_asks_only_shell(tree: Path) -> None:
    recorder = Recorder()
    with open_workdir("a", root=str(tree / "root")) as handle:
        await authorize_spawn(
            recorder, command="ls", args=["-l"], workdir=handle, owner="o", session_id="pty_1"
        )
    assert recorder.seen == [
        AuthorizationRequest(
            permission="shell", resource="'ls' '-l'", owner="o", session_id="pty_1"
        )
    ]


async def test_spawn_outside_root_asks_for_the_directory_too(tree: Path) -> None:
    recorder = Recorder()
    with open_workdir("link_out", root=str(tree / "root")) as handle:
        await authorize_spawn(recorder, command="ls", args=[], workdir=handle, owner="o")
    assert [r.permission for r in recorder.seen] == ["shell", "external_directory"]
    assert recorder.seen[1].resource == str(tree / "outside")


async def test_spawn_refused(tree: Path) -> None:
    with (
        open_workdir("link_out", root=str(tree / "root")) as handle,
        pytest.raises(PermissionDenied),
    ):
        await authorize_spawn(
            Recorder(refuse="external_directory"),
            command="ls",
            args=[],
            workdir=handle,
            owner="o",
        )


async def test_swap_during_approval_is_caught(tree: Path) -> None:
    target = tree / "root" / "a"

    def swap(request: AuthorizationRequest) -> None:
        target.rename(tree / "root" / "a_moved")
        target.symlink_to(tree / "outside")

    with open_workdir("a", root=str(tree / "root")) as handle:
        with pytest.raises(PermissionDenied) as info:
            await authorize_spawn(
                Recorder(during=swap), command="ls", args=[], workdir=handle, owner="o"
            )
        assert changed_message(handle) in str(info.value)


async def test_write_flow() -> None:
    recorder = Recorder()
    await authorize_write(recorder, command="cat", data=b"hi\n", owner="o", session_id="pty_1")
    assert recorder.seen[0].resource == "'cat' <stdin> 'hi\n'"
    assert recorder.seen[0].session_id == "pty_1"
