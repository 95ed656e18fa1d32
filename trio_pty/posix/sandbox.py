"""Run a session's command inside a sandbox: the `Sandbox` protocol and a bubblewrap reference.

The manager applies a sandbox last, after validation, authorization (which judges the user's
own command line, never the wrapper), the environment policy and PATH resolution: `wrap`
turns the command's argv into the argv the session's leader execs (after the spawn's setsid
and controlling-tty steps, `posix/child.py`). So the pid
the manager holds is still the session leader with the PTY as its controlling tty, whatever
runs inside, and `SessionInfo.command` stays the user's command.

`BubblewrapSandbox` is the reference (Debian `bubblewrap`). What each part is for, measured
here (tests/test_security_sandbox.py):

- `--ro-bind / /`, the workdir and the configured paths bound writable, `--tmpfs /tmp`, a new
  `/dev` and `/proc`, `--unshare-pid --unshare-ipc`, `--unshare-net` unless `network=True`,
  `--die-with-parent`, and `--cap-drop ALL` when we are root (bwrap keeps root's
  capabilities otherwise, and CAP_SYS_ADMIN could remount the root writable);
- an empty tmpfs over `/run` (and `/var/run` when it is not a link to it) and
  `/tmp/.X11-unix`: a read-only bind does not stop `connect()` on a Unix socket (the kernel
  checks the socket file's permission, not the mount's), and these are where a desktop's
  session D-Bus (`/run/user/UID/bus`), the Docker socket, ssh and gpg agents and the X
  server listen; from inside, any of them is a full escape. `/etc/resolv.conf` is bound
  back when it points into `/run` (systemd-resolved) and the network is on. What stays
  reachable: a socket file elsewhere on the host root (under a home directory, say; hide
  its directory with `extra_args=["--tmpfs", DIR]`), and with `network=True` the host's
  abstract sockets (`@name`, per network namespace). To open one on purpose, bind it back:
  `extra_args=["--bind", PATH, PATH]` (docs/security.md);
- never `--new-session`: it calls setsid() inside, so the command loses the PTY as its
  controlling tty (no job control, Ctrl-C does nothing);
- the workdir is bound from `/proc/self/cwd`, not from its path: the spawn starts the chain
  in the already opened workdir descriptor, so a path swapped meanwhile binds nothing else;
- a `sh` waits for bwrap instead of exec'ing it: `--die-with-parent` is PR_SET_PDEATHSIG,
  which fires when the parent *thread* exits, and trio started children from a worker
  thread that exits after 10 s idle (measured: bwrap exec'd directly was SIGKILLed then;
  children now start from the event loop's thread, but any thread may run it). The `sh`
  lives as long as the session, so its death (teardown) kills bwrap, and bwrap's death kills
  the PID namespace: everything inside (`kills_all`);
- that `sh` and bwrap ignore SIGINT, SIGQUIT, SIGHUP and SIGTERM, and the command gets
  default dispositions back inside (`env --default-signal`): Ctrl-C on a command that does
  not take its own process group (a Python REPL) reaches the whole leader's group, and bwrap
  dying of it killed the sandbox instead of interrupting the program; likewise a teardown's
  SIGHUP/SIGTERM killed bwrap, and the namespace with it, before the program could use its
  grace period.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

__all__ = ["BubblewrapSandbox", "Sandbox"]

# What the waiting sh and bwrap ignore (the command gets default handling back inside):
# INT and QUIT, so that ^C to the leader's group interrupts the program, not the sandbox;
# HUP and TERM, so that a teardown's signals give the program its grace period instead of
# killing the waiter, whose death takes the whole namespace down at once. SIGKILL at the end
# of the grace still ends everything.
_WAITER_IGNORES: Final = "INT QUIT HUP TERM"
# The waiter: ignores those (an ignored disposition survives fork and exec, so bwrap ignores
# them too), runs bwrap as its child and exits with its status. `exit` after it keeps dash
# from exec'ing bwrap in its place (it does so for the last command of -c).
_WAIT_SCRIPT: Final = f'trap \'\' {_WAITER_IGNORES}; "$@"; exit "$?"'
# Where host services keep their sockets: each is replaced by an empty tmpfs inside.
_SOCKET_DIRS: Final = ("/run", "/var/run", "/tmp/.X11-unix")


class Sandbox(Protocol):
    """Wraps a command so that it runs confined.

    `wrap(argv, env, cwd, readable=...)` gets the user's argv (argv[0] possibly resolved to a
    path), the child's final environment, the real path of the working directory (the process
    is started *in* that directory, from its open descriptor) and paths of the manager's that
    the program must be able to read (a shell session's startup files), and returns the argv
    and env the session's leader execs. `kills_all` says whether the wrapper's death kills
    everything started inside it (a PID namespace does).
    """

    kills_all: bool

    def wrap(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        *,
        readable: Sequence[str] = (),
    ) -> tuple[list[str], dict[str, str]]: ...


def _program(name: str, given: str | None) -> str:
    found = given or shutil.which(name)
    if found is None:
        raise RuntimeError(f"the sandbox needs `{name}`, which is not on PATH")
    return found


class BubblewrapSandbox:
    """Read-only root, writable workdir and `writable` paths, private /tmp, /dev and /proc,
    empty /run, /var/run and /tmp/.X11-unix (no host service's socket), own PID and IPC
    namespaces, no network unless `network=True` (see the module docstring for why each
    part is there). `hidden` files cannot be opened inside (the host's
    /dev/null is bound over each, after every other bind, and a bind carries no device
    access: opening it fails with EACCES): the server's token files, say. `extra_args` go to
    bwrap after every other option, before the command: for binds an operator needs, such
    as one host socket opened on purpose (`["--bind", "/run/user/1000/bus",
    "/run/user/1000/bus"]`), or a directory of sockets hidden (`["--tmpfs", DIR]`). Raises
    RuntimeError at construction when bwrap, sh or a GNU env with `--default-signal` is
    missing, so a misconfigured server fails at start, not per spawn."""

    kills_all: bool = True

    def __init__(
        self,
        *,
        writable: Sequence[str] = (),
        network: bool = False,
        extra_args: Sequence[str] = (),
        hidden: Sequence[str] = (),
        bwrap: str | None = None,
    ) -> None:
        self.bwrap = _program("bwrap", bwrap)
        self.sh = _program("sh", None)
        self.env = _program("env", None)
        self.network = network
        self.writable = tuple(os.path.realpath(path) for path in writable)
        for path in self.writable:
            if not os.path.isdir(path):
                raise ValueError(f"sandbox writable path is not a directory: {path}")
        self.extra_args = tuple(extra_args)
        self.hidden = tuple(os.path.realpath(path) for path in hidden)
        for path in self.hidden:
            if not os.path.isfile(path):
                raise ValueError(f"sandbox hidden path is not a file: {path}")
        probe = subprocess.run(
            [self.env, "--default-signal", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
        if probe.returncode != 0:
            raise RuntimeError("the sandbox needs GNU env with --default-signal (coreutils 8.31+)")

    def bwrap_args(self, cwd: str, readable: Sequence[str] = ()) -> list[str]:
        """The bwrap options for a command started in `cwd` that reads `readable`."""
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += ["--tmpfs", "/tmp"]  # before the binds: a workdir under /tmp stays visible
        args += _socket_dir_mounts(self.network)
        for path in readable:
            args += ["--ro-bind", path, path]
        for path in self.writable:
            args += ["--bind", path, path]
        args += ["--bind", "/proc/self/cwd", cwd, "--chdir", cwd]
        for path in self.hidden:
            args += ["--ro-bind", "/dev/null", path]
        args += ["--unshare-pid", "--unshare-ipc", "--die-with-parent"]
        if not self.network:
            args.append("--unshare-net")
        if os.geteuid() == 0:
            args += ["--cap-drop", "ALL"]
        return [*args, *self.extra_args]

    def wrap(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        *,
        readable: Sequence[str] = (),
    ) -> tuple[list[str], dict[str, str]]:
        waiter = [self.sh, "-c", _WAIT_SCRIPT]
        inside = [self.env, "--default-signal", "--", *argv]
        return [*waiter, "sh", *self.bwrap_args(cwd, readable), "--", *inside], dict(env)

    def __repr__(self) -> str:
        return (
            f"BubblewrapSandbox(writable={list(self.writable)!r}, network={self.network!r}, "
            f"extra_args={list(self.extra_args)!r}, hidden={list(self.hidden)!r})"
        )


def _socket_dir_mounts(network: bool) -> list[str]:
    """The bwrap options that empty the host's socket directories (`_SOCKET_DIRS`): a tmpfs
    over each real directory (a link to another one is covered by that one's, and bwrap
    would mount through it), created when absent only under /tmp (the sandbox's own); with
    the network on, /etc/resolv.conf bound back when it points into one of them."""
    args: list[str] = []
    for path in _SOCKET_DIRS:
        if path.startswith("/tmp/") or (os.path.isdir(path) and not os.path.islink(path)):
            args += ["--tmpfs", path]
    resolv = os.path.realpath("/etc/resolv.conf")
    inside = any(resolv.startswith(f"{path}/") for path in _SOCKET_DIRS)
    if network and inside and os.path.isfile(resolv):
        args += ["--ro-bind", resolv, resolv]
    return args
