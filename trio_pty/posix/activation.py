"""Socket activation: serving on a listening socket that the init system holds.

systemd (`Accept=no`) passes its sockets from fd 3 on and says so in `LISTEN_PID` (the pid
they are meant for) and `LISTEN_FDS` (how many); `LISTEN_FDNAMES` names them. The port stays
bound across restarts of the server, so a client connecting meanwhile waits in the backlog.
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping
from typing import Final

__all__ = ["ACTIVATION_VARIABLES", "FIRST_FD", "forget_activation", "listening_socket"]

FIRST_FD: Final = 3  # SD_LISTEN_FDS_START
ACTIVATION_VARIABLES: Final = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def forget_activation(environ: MutableMapping[str, str]) -> None:
    """Take the activation variables out of `environ`, so that no session inherits them (a
    program that reads them would take our listening socket for its own)."""
    for name in ACTIVATION_VARIABLES:
        environ.pop(name, None)


def listening_socket(fd: int, environ: MutableMapping[str, str]) -> socket.socket:
    """The listening TCP socket at `fd`, made close-on-exec (no session inherits it), or
    ValueError saying why not. When `LISTEN_PID` is this process, `fd` must be one of the
    `LISTEN_FDS` passed to it."""
    if environ.get("LISTEN_PID") == str(os.getpid()):
        try:
            count = int(environ.get("LISTEN_FDS", ""))
        except ValueError:
            raise ValueError("LISTEN_FDS is not a number") from None
        if not FIRST_FD <= fd < FIRST_FD + count:
            raise ValueError(
                f"fd {fd} is not one of the {count} passed by the init system "
                f"(LISTEN_FDS: fds {FIRST_FD} to {FIRST_FD + count - 1})"
            )
    try:
        os.fstat(fd)
    except OSError as exc:
        raise ValueError(f"fd {fd} is not open: {exc.strerror}") from None
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ValueError(f"fd {fd} is not a socket: {exc.strerror}") from None
    try:
        kind = sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or kind != socket.SOCK_STREAM:
            raise ValueError(f"fd {fd} is not a TCP socket")
        if not listening:
            raise ValueError(f"fd {fd} is not listening (bound and listen() called)")
    except BaseException:
        sock.detach()  # not ours to close: leave the descriptor as it was
        raise
    os.set_inheritable(fd, False)  # close-on-exec
    return sock
