"""The sandbox hook and the bubblewrap reference, with real bwrap under real PTYs: the pid the
manager holds is still the session leader, writes outside the workdir fail with EROFS, there
is no network, no host Unix socket in /run, /var/run or /tmp/.X11-unix, the manager is
invisible, Ctrl-C and job control work, and teardown through the PID namespace leaves nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path

import pytest
import trio

import trio_pty
from trio_pty.manager import Manager
from trio_pty.posix import proc, reap, spawn
from trio_pty.posix.sandbox import BubblewrapSandbox

from .helpers import alive, comm, poll_until, tagged_processes, wait_for_status, wait_for_text
from .rpc_support import open_ws, rpc, start_server

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("CI"),
    reason="bubblewrap is not installed (CI installs it and runs these)",
)

FAST = trio_pty.Limits(terminate_grace=0.3)


# The real interpreter: a venv's may live under /tmp, which the sandbox replaces.
REAL_PYTHON = os.path.realpath(sys.executable)


@asynccontextmanager
async def sandboxed(root: Path, **options: object) -> AsyncIterator[Manager]:
    sandbox = BubblewrapSandbox(**options)  # type: ignore[arg-type]
    async with trio_pty.open_manager(FAST, root=str(root), sandbox=sandbox) as manager:
        yield manager


async def run(manager: Manager, script: str, *, shell: str = "sh") -> str:
    """Run a script in the sandbox to its end; its output."""
    info = await manager.spawn(shell, ["-c", script + "; echo script-end"], description="probe")
    text = await wait_for_text(manager, info.id, "script-end")
    await wait_for_status(manager, info.id, "exited")
    return text


def in_foreground(pid: int) -> bool:
    """Whether `pid` runs in its terminal's foreground process group (pgrp == tpgid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in (b"T", b"Z") and fields[2] == fields[5]


async def wait_for_foreground(manager: Manager, session_id: str, name: str) -> None:
    """Until a process called `name` runs in the terminal's foreground group (a ^C sent
    before that reaches the shell instead)."""
    await poll_until(
        lambda: any(
            comm(pid) == name and in_foreground(pid)
            for pid in tagged_processes(manager, session_id)
        )
    )


async def test_the_held_pid_leads_the_session_and_waits_for_bwrap(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with sandboxed(tmp_path) as manager:
            info = await manager.spawn("sleep", ["100"], description="leader")
            await poll_until(lambda: comm(info.pid) == "sh")
            assert os.getsid(info.pid) == info.pid  # the leader called setsid() before its exec
            assert os.getpgid(info.pid) == info.pid
            assert info.command == "sleep" and info.args == ["100"]

            # bwrap's parent is the held `sh`, a process that lives as long as the session,
            # not the trio worker thread that started it (PR_SET_PDEATHSIG fires when that
            # thread exits, 10 s idle).
            def children() -> list[str]:
                snapshot = reap.ProcessTable().snapshot()
                return [comm(pid) for pid in snapshot.children.get(info.pid, ())]

            await poll_until(lambda: children() == ["bwrap"])
            await manager.kill(info.id)


async def test_tty_is_the_controlling_terminal_inside(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with sandboxed(tmp_path) as manager:
            text = await run(manager, "tty; stty size; read -t 0 < /dev/tty && echo tty-ok")
            assert "/dev/console" in text  # bwrap's new /dev shows the PTY as the console
            assert "24 80" in text


async def test_writes_outside_the_workdir_fail_with_erofs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    extra = tmp_path / "extra"
    work.mkdir()
    extra.mkdir()
    script = (
        "echo a > /etc/trio-pty-probe; echo b > /var/tmp/trio-pty-probe; "
        "echo f > ../outside-probe && echo parent-in-tmpfs; "
        "echo c > inside-probe && echo inside-ok; "
        f"echo d > {extra}/extra-probe && echo extra-ok; "
        "echo e > /tmp/private-probe && echo tmp-ok"
    )
    with trio.fail_after(20):
        async with sandboxed(work, writable=[str(extra)]) as manager:
            text = await run(manager, script)
    assert text.count("Read-only file system") == 2, text
    assert "inside-ok" in text and "extra-ok" in text and "tmp-ok" in text
    assert (work / "inside-probe").read_text() == "c\n"
    assert (extra / "extra-probe").read_text() == "d\n"
    # tmp_path lies under /tmp, which is the sandbox's own tmpfs: its parent was writable
    # there, and nothing of it reached the real one.
    assert "parent-in-tmpfs" in text
    assert not (tmp_path / "outside-probe").exists()
    leaked = [
        Path(p) for p in ("/etc/trio-pty-probe", "/var/tmp/trio-pty-probe", "/tmp/private-probe")
    ]
    assert not any(path.exists() for path in leaked)


async def test_no_network_unless_asked(tmp_path: Path) -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    probe = f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo net=yes || echo net=no"
    try:
        with trio.fail_after(20):
            async with sandboxed(tmp_path) as manager:
                assert "net=no" in await run(manager, probe, shell="bash")
            async with sandboxed(tmp_path, network=True) as manager:
                assert "net=yes" in await run(manager, probe, shell="bash")
    finally:
        listener.close()


async def test_the_manager_is_invisible_inside(tmp_path: Path) -> None:
    """The PID namespace hides every outside process: /proc/$PPID is bwrap's, and no
    environment of the manager can be read (this is what protects a root server, where
    harden_process cannot)."""
    script = "echo ppid=$PPID; for p in /proc/[0-9]*; do echo comm=$(cat $p/comm); done"
    with trio.fail_after(20):
        async with sandboxed(tmp_path) as manager:
            text = await run(manager, script)
    comms = {line.split("=", 1)[1] for line in text.splitlines() if line.startswith("comm=")}
    assert "ppid=1" in text
    assert comms <= {"bwrap", "env", "sh", "cat"}, comms


async def test_exit_status_comes_through(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with sandboxed(tmp_path) as manager:
            info = await manager.spawn("sh", ["-c", "exit 3"], description="exit")
            await wait_for_status(manager, info.id, "exited")
            assert manager.get(info.id).exit_code == 3


async def test_ctrl_c_and_job_control_in_a_shell(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with sandboxed(tmp_path) as manager:
            info = await manager.spawn("bash", ["--norc", "--noprofile", "-i"], description="bash")
            await manager.write(info.id, "PS1='$ '; echo re''ady\n")  # the echo is not "ready"
            await wait_for_text(manager, info.id, "ready")
            await manager.write(info.id, "sleep 100\n")
            await wait_for_foreground(manager, info.id, "sleep")
            await manager.write(info.id, "\x03")
            await manager.write(info.id, "echo status=$((1 * $?))\n")
            await wait_for_text(manager, info.id, "status=130")
            await manager.write(info.id, "sleep 101\n")
            await wait_for_foreground(manager, info.id, "sleep")
            await manager.write(info.id, "\x1a")
            await wait_for_text(manager, info.id, "Stopped")
            await manager.write(info.id, "bg; echo bg=$((1 * $?))\n")
            await wait_for_text(manager, info.id, "bg=0")
            await manager.write(info.id, "fg\n")
            await wait_for_foreground(manager, info.id, "sleep")
            await manager.write(info.id, "\x03")
            await manager.write(info.id, "echo fg-status=$((1 * $?))\n")
            await wait_for_text(manager, info.id, "fg-status=130")
            assert manager.get(info.id).status == "running"


async def test_ctrl_c_reaches_a_program_that_keeps_the_leaders_group(tmp_path: Path) -> None:
    """A Python REPL does not take its own process group: ^C goes to the whole group,
    bwrap included. bwrap must survive it (else the sandbox dies) and Python must see it."""
    with trio.fail_after(30):
        async with sandboxed(tmp_path) as manager:
            info = await manager.spawn(REAL_PYTHON, ["-q"], description="repl")
            await manager.write(info.id, "import time; print('g' + 'o'); time.sleep(100)\n")
            await wait_for_text(manager, info.id, "go")
            await manager.write(info.id, "\x03")
            await wait_for_text(manager, info.id, "KeyboardInterrupt")
            await manager.write(info.id, "print(6 * 7)\n")  # 42 only in the answer
            await wait_for_text(manager, info.id, "42")
            assert manager.get(info.id).status == "running"


async def test_teardown_through_the_namespace_leaves_nothing(tmp_path: Path) -> None:
    script = (
        "sleep 200 & (sleep 201 &) ; setsid sh -c 'sleep 202 & sleep 203' & "
        "trap '' HUP TERM; echo started; wait"
    )
    with trio.fail_after(30):
        async with sandboxed(tmp_path) as manager:
            info = await manager.spawn("sh", ["-c", script], description="tree")
            await wait_for_text(manager, info.id, "started")
            await poll_until(
                lambda: sum(comm(p) == "sleep" for p in tagged_processes(manager, info.id)) >= 4
            )
            inside = tagged_processes(manager, info.id)
            await manager.kill(info.id)
            assert [pid for pid in inside if alive(pid)] == []
            assert tagged_processes(manager, info.id) == []


async def test_teardown_leaves_the_program_its_grace_period(tmp_path: Path) -> None:
    """The waiter and bwrap ignore the teardown's SIGHUP/SIGTERM: the program handles them in
    its grace period (bwrap dying of them would SIGKILL the namespace at once)."""
    script = "trap 'echo goodbye; exit 0' HUP TERM; echo ready; while :; do sleep 0.05; done"
    with trio.fail_after(20):
        async with sandboxed(tmp_path) as manager:
            info = await manager.spawn("sh", ["-c", script], description="trap")
            await wait_for_text(manager, info.id, "ready")
            await manager.kill(info.id)
            lines = [line.text for line in (await manager.read(info.id)).lines]
            assert lines[-1] == "goodbye"
            assert tagged_processes(manager, info.id) == []


async def test_the_wrappers_death_kills_everything_inside(tmp_path: Path) -> None:
    """kills_all, without the manager's teardown: SIGKILL to the held pid alone ends every
    process in the sandbox (sh's death kills bwrap, bwrap's the PID namespace)."""
    sandbox = BubblewrapSandbox()
    assert sandbox.kills_all
    tag = {proc.TAG_MANAGER: "sandbox-test", proc.TAG_SESSION: "kills-all"}
    argv, env = sandbox.wrap(
        ["sh", "-c", "sleep 300 & setsid sleep 301 & sleep 302"],
        {**os.environ, **tag},
        str(tmp_path),
    )
    master, slave = spawn.open_pty(24, 80)
    cwd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        process = spawn.start_child("sh", argv, slave=slave, env=env, cwd_fd=cwd)

        def sleepers() -> list[int]:
            snapshot = reap.ProcessTable().snapshot()
            return [
                entry.pid
                for entry in snapshot.with_tags_of("sandbox-test")
                if comm(entry.pid) == "sleep" and alive(entry.pid)
            ]

        with trio.fail_after(20):
            await poll_until(lambda: len(sleepers()) == 3)
            os.kill(process.pid, signal.SIGKILL)
            await process.wait()
            await poll_until(lambda: not sleepers(), timeout=5)
    finally:
        os.close(cwd)
        os.close(slave)
        os.close(master)


def test_wrap_keeps_the_command_and_the_environment() -> None:
    sandbox = BubblewrapSandbox(network=True)
    argv, env = sandbox.wrap(["git", "status"], {"A": "1"}, "/srv/work")
    assert argv[-2:] == ["git", "status"]
    assert env == {"A": "1"}
    assert "--new-session" not in argv  # it would cost the PTY as controlling tty
    assert "--unshare-net" not in argv
    assert "--unshare-net" in BubblewrapSandbox().wrap(["true"], {}, "/")[0]
    with pytest.raises(ValueError, match="not a directory"):
        BubblewrapSandbox(writable=["/nonexistent-trio-pty"])


async def test_hidden_files_cannot_be_read_inside(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("do-not-read\n")
    async with sandboxed(tmp_path, hidden=[str(secret)]) as manager:
        text = await run(manager, f"cat {secret}; echo cat=$?; ls {tmp_path}")
    assert "cat=1" in text and "do-not-read" not in text
    assert "token" in text.split("cat=1")[1]  # hidden, not removed: the directory is intact
    with pytest.raises(ValueError, match="not a file"):
        BubblewrapSandbox(hidden=[str(tmp_path)])


async def test_the_configs_sandbox_cannot_be_turned_off_by_a_client(tmp_path: Path) -> None:
    """`trio-pty serve` with `[sandbox]` and `env_allow` in its config: every RPC spawn runs
    sandboxed (no spawn parameter exists to say otherwise), the token file cannot be read
    inside, and server.info reports both."""
    token = "sandboxed-server-token"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    config = f"""
root = "{tmp_path}"
env_allow = ["APP_*"]

[limits]
terminate_grace = 0.3

[sandbox]
kind = "bubblewrap"
"""
    server = start_server(
        tmp_path, "--no-ui", "--token-file", str(token_file), config=config, token_in_output=False
    )
    probe = (
        f"cat {token_file}; echo cat=$?; "
        "touch /etc/trio-pty-probe 2>/dev/null; echo touch=$?; echo ppid=$PPID; echo probe-end"
    )
    try:
        with trio.fail_after(30):
            async with open_ws(server.url, [(b"Authorization", f"Bearer {token}".encode())]) as ws:
                info = (await rpc(ws, 1, "server.info"))["result"]
                assert info["environment"]["allow"] == ["APP_*"]
                assert info["sandbox"] == {
                    "kind": "bubblewrap",
                    "kills_all": True,
                    "writable": [],
                    "network": False,
                    "extra_args": 0,
                    "hidden": [str(token_file.resolve())],
                }
                spawn = {
                    "command": "sh",
                    "args": ["-c", probe],
                    "description": "probe",
                    "env": {"APP_MODE": "1"},
                    "ready": {"pattern": "probe-end", "timeout_ms": 20000},
                }
                reply = await rpc(ws, 2, "pty.spawn", spawn)
                text = "\n".join(line["text"] for line in reply["result"]["ready"]["lines"])
                assert "cat=1" in text and token not in text
                assert "touch=1" in text and "ppid=1" in text, text  # EROFS; PID namespace
                await rpc(ws, 3, "pty.kill", {"id": reply["result"]["id"], "cleanup": True})
                # No parameter turns the sandbox off; env is held to env_allow.
                unsandboxed = await rpc(ws, 4, "pty.spawn", {**spawn, "sandbox": False})
                assert unsandboxed["error"]["code"] == -32602
                assert "sandbox" in unsandboxed["error"]["message"]
                evil_path = await rpc(ws, 5, "pty.spawn", {**spawn, "env": {"PATH": "/tmp"}})
                assert evil_path["error"]["data"] == {
                    "kind": "permission_denied",
                    "permission": "env",
                    "resource": "PATH",
                }
    finally:
        server.stop()
    assert not (Path("/etc") / "trio-pty-probe").exists()


# --------------------------------------------------------------------------------------------
# Issue 30, finding 4: host Unix sockets

# Connects to each path given and says what happened, one line each.
_CONNECT_PROBE = """
import socket, sys
for path in sys.argv[1:]:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError as exc:
            print("unreachable", path, exc.strerror)
        else:
            print("reached", path)
"""


@contextmanager
def _listener(path: Path) -> Iterator[Path]:
    """A Unix socket listening at `path` (its directories made, and removed after, as far
    as they did not exist)."""
    made = [parent for parent in reversed(path.parents) if not parent.exists()]
    for parent in made:
        parent.mkdir()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        sock.listen()
        yield path
    finally:
        sock.close()
        path.unlink(missing_ok=True)
        for parent in reversed(made):
            parent.rmdir()


def _socket_places(tag: str) -> list[Path]:
    """Where host services listen, each as a path of its own for this test: /run and
    /run/user/UID (the session D-Bus), /var/run (a link to /run here, maybe a directory
    elsewhere) and /tmp/.X11-unix, where each is writable to us."""
    places = [
        Path("/run") / tag / "docker.sock",
        Path("/run/user") / str(os.getuid()) / f"{tag}-bus",
        Path("/var/run") / f"{tag}-agent.sock",
        Path("/tmp/.X11-unix") / f"X{tag}",
    ]
    return [path for path in places if os.access(_existing_parent(path), os.W_OK)]


def _existing_parent(path: Path) -> Path:
    return next(parent for parent in path.parents if parent.exists())


async def _reached(manager: Manager, paths: list[Path]) -> dict[str, str]:
    args = ["-c", _CONNECT_PROBE, *map(str, paths)]
    info = await manager.spawn(REAL_PYTHON, args, description="probe")
    await wait_for_status(manager, info.id, "exited")
    text = await wait_for_text(manager, info.id, str(paths[-1]))
    found = {}
    for line in text.splitlines():
        verdict, _, rest = line.strip().partition(" ")
        if verdict in ("reached", "unreachable"):
            found[rest.split(" ")[0]] = verdict
    return found


async def test_host_sockets_in_run_and_x11_are_unreachable_inside(tmp_path: Path) -> None:
    """A program in the sandbox connected to any host Unix socket on the read-only root
    (the kernel checks the socket's permission, not the mount's): a desktop's session
    D-Bus, the Docker socket, an agent's, the X server's. /run, /var/run and /tmp/.X11-unix
    are empty inside now; the same listeners answer outside (the control)."""
    tag = f"trio-pty-probe-{os.getpid()}"
    places = _socket_places(tag)
    if not places:
        pytest.skip("no socket directory is writable here")
    with ExitStack() as stack:
        for path in places:
            stack.enter_context(_listener(path))
        with trio.fail_after(30):
            control = await trio.run_process(
                [REAL_PYTHON, "-c", _CONNECT_PROBE, *map(str, places)], capture_stdout=True
            )
        outside = control.stdout.decode()
        assert outside.count("reached ") == len(places), outside
        work = tmp_path / "work"
        work.mkdir()
        with trio.fail_after(30):
            async with sandboxed(work) as manager:
                found = await _reached(manager, places)
                assert found == {str(path): "unreachable" for path in places}, found
                # Opened on purpose: one bound back with extra_args is reachable again.
            opened = str(places[0])
            async with sandboxed(work, extra_args=["--bind", opened, opened]) as manager:
                found = await _reached(manager, places)
                assert found[opened] == "reached", found
                assert list(found.values()).count("reached") == 1, found


async def test_a_host_socket_elsewhere_on_the_root_is_hidden_by_a_tmpfs(tmp_path: Path) -> None:
    """What stays reachable, as docs/security.md says: a socket file elsewhere on the
    read-only host root (here under /var/tmp), until its directory is hidden with
    `extra_args=["--tmpfs", DIR]`."""
    directory = Path("/var/tmp") / f"trio-pty-probe-{os.getpid()}"
    work = tmp_path / "work"
    work.mkdir()
    with _listener(directory / "agent.sock") as path, trio.fail_after(30):
        async with sandboxed(work) as manager:
            assert (await _reached(manager, [path]))[str(path)] == "reached"
        async with sandboxed(work, extra_args=["--tmpfs", str(directory)]) as manager:
            assert (await _reached(manager, [path]))[str(path)] == "unreachable"


def test_resolv_conf_is_bound_back_only_with_the_network() -> None:
    """Where /etc/resolv.conf is a link into /run (systemd-resolved), the tmpfs over /run
    would break name resolution: it is bound back, read-only, when the network is on."""
    args = BubblewrapSandbox(network=True).bwrap_args("/")
    resolv = os.path.realpath("/etc/resolv.conf")
    under_run = resolv.startswith(("/run/", "/var/run/"))
    assert (resolv in args) == under_run
    assert resolv not in BubblewrapSandbox().bwrap_args("/") or not under_run
    assert args.index("/run") < args.index("--chdir")  # before the binds it must not hide
