"""Finding 3 of issue 17: a workdir whose *intermediate* component is swapped for a symlink to
outside the root (renameat2 RENAME_EXCHANGE) while spawning ran 313 of 10,001 spawns outside
the root on the old code, reported as inside. The race runs here as a bounded loop against a
real swapping process, through the same calls the manager makes (open the workdir, authorize,
re-check), on both resolvers (openat2 and the O_NOFOLLOW walk); then end to end through
manager.spawn, with the path and PWD a session reports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import trio_pty
import trio_pty.policy
from trio_pty.errors import InvalidInput, PermissionDenied
from trio_pty.policy.authorize import RulesAuthorizer, authorize_spawn, open_workdir
from trio_pty.posix import beneath

from .helpers import wait_for_text

# Swaps two names atomically as fast as it can, for at most 20 s (a bound of its own in case
# the test is interrupted before it ends it).
SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
AT_FDCWD, RENAME_EXCHANGE = -100, 2
deadline = time.monotonic() + 20
print("swapping", flush=True)
while time.monotonic() < deadline:
    for _ in range(1000):
        if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
            sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
"""

LOOP_SECONDS = 2.5
LOOP_MAX = 20_000


@pytest.fixture
def race_tree(tmp_path: Path) -> Path:
    """root/a/bin (a directory), root/swap -> outside (absolute symlink), outside/bin."""
    base = tmp_path.resolve()
    (base / "root" / "a" / "bin").mkdir(parents=True)
    (base / "outside" / "bin").mkdir(parents=True)
    (base / "root" / "swap").symlink_to(base / "outside")
    return base


@pytest.fixture
def swapping(race_tree: Path) -> Iterator[None]:
    """A separate process exchanging root/a and root/swap without pause (2 cores: it really
    runs alongside the loop)."""
    swapper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SWAPPER,
            str(race_tree / "root" / "a"),
            str(race_tree / "root" / "swap"),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert swapper.stdout is not None
        assert swapper.stdout.readline() == b"swapping\n"
        yield
    finally:
        swapper.kill()
        swapper.wait()
        assert swapper.stdout is not None
        swapper.stdout.close()


@pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "walk"])
async def test_no_spawn_starts_outside_the_root_while_a_component_is_swapped(
    race_tree: Path, swapping: None, use_openat2: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if use_openat2 and not beneath.openat2_supported():
        pytest.fail("this kernel has no openat2: the fallback walk is all there is")
    monkeypatch.setattr(beneath, "_HAS_OPENAT2", use_openat2)
    root = str(race_tree / "root")
    outside_bin = os.stat(race_tree / "outside" / "bin")
    outside = (outside_bin.st_dev, outside_bin.st_ino)
    # `external_directory` has no rule: a workdir outside the root is refused.
    authorizer = RulesAuthorizer({"shell": "allow"})
    outcomes: Counter[str] = Counter()
    escapes: list[str] = []
    started = time.monotonic()
    while time.monotonic() - started < LOOP_SECONDS and outcomes.total() < LOOP_MAX:
        try:
            with open_workdir("a/bin", root=root) as handle:
                await authorize_spawn(
                    authorizer, command="true", args=[], workdir=handle, owner="o"
                )
                st = os.fstat(handle.fd)
                if (st.st_dev, st.st_ino) == outside or not handle.path.startswith(root + "/"):
                    escapes.append(f"{handle.path} (descriptor at {beneath.real_path(handle.fd)})")
                outcomes["inside"] += 1
        except PermissionDenied:
            outcomes["refused"] += 1
        except InvalidInput:
            outcomes["invalid"] += 1  # a name vanished mid-swap: refused as well
    assert not escapes, f"{len(escapes)} of {outcomes.total()} started outside: {escapes[:3]}"
    # The race really ran: both the inside and the outside shape were seen many times.
    assert outcomes["inside"] > 50 and outcomes["refused"] > 50, outcomes


async def test_a_session_reports_where_it_really_starts(race_tree: Path) -> None:
    """With root/a a symlink to outside, `a/bin` is outside: asked about (here allowed), and
    SessionInfo.workdir and PWD name the real directory, not the inside-looking path."""
    root = race_tree / "root"
    (root / "a").rename(root / "a_dir")
    (root / "a").symlink_to(race_tree / "outside")
    seen: list[str] = []

    class Recording:
        async def authorize(self, request: trio_pty.policy.AuthorizationRequest) -> None:
            seen.append(f"{request.permission}:{request.resource}")

    with trio.fail_after(20):
        async with trio_pty.open_manager(
            trio_pty.Limits(terminate_grace=0.3), root=str(root), authorizer=Recording()
        ) as manager:
            info = await manager.spawn(
                "sh",
                ["-c", 'echo "pwd=$PWD real=$(pwd -P)"; sleep 100'],
                workdir="a/bin",
                description="where",
            )
            text = await wait_for_text(manager, info.id, "real=")
            real = str(race_tree / "outside" / "bin")
            assert info.workdir == real
            assert f"pwd={real} real={real}" in text
            assert f"external_directory:{real}" in seen


@pytest.fixture
def odd_tree(tmp_path: Path) -> Path:
    """Relative and absolute links, in and out, loops, a file, a magic link."""
    base = tmp_path.resolve()
    root = base / "root"
    (root / "a" / "b").mkdir(parents=True)
    (base / "outside").mkdir()
    (root / "file").write_text("x")
    (root / "rel_in").symlink_to("a/b")
    (root / "a" / "up").symlink_to("..")
    (root / "rel_out").symlink_to("../outside")
    (root / "abs_in").symlink_to(root / "a")
    (root / "abs_out").symlink_to(base / "outside")
    (root / "loop").symlink_to("loop")
    (root / "magic").symlink_to("/proc/self/cwd")
    return base


ODD_PATHS = [
    None,
    ".",
    "a/b",
    "rel_in",
    "rel_in/../b",
    "a/up/a/up/rel_in",
    "rel_out",
    "abs_in/b",
    "abs_out",
    "../root/a",
    "a/../../outside",
    "loop",
    "file",
    "file/x",
    "missing",
    "magic",
    "/",
]


@pytest.mark.parametrize("path", ODD_PATHS)
def test_both_resolvers_agree(
    odd_tree: Path, path: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(odd_tree / "root")
    results: list[tuple[str, bool | None]] = []
    for use_openat2 in (True, False):
        monkeypatch.setattr(beneath, "_HAS_OPENAT2", use_openat2)
        try:
            with open_workdir(path, root=root) as handle:
                results.append((handle.path, handle.inside_root))
        except InvalidInput as exc:
            results.append((str(exc), None))
    assert results[0] == results[1]
    if results[0][1] is not None:
        expected = os.path.realpath(os.path.join(root, path or "."))
        assert results[0][0] == expected
        assert results[0][1] == (os.path.commonpath([expected, root]) == root)
