"""Where the server's tokens come from.

A token is the password of a remote shell, so it should reach the server through nothing
another local user can read. `/proc/PID/cmdline` (argv) is readable by every user, so
`--token` works but is warned about; a token file must belong to the server's user and be
readable by nobody else (`read_token_file`); a token in the environment (`TRIO_PTY_TOKEN`,
the `env` of a `[[tokens]]` entry) is taken out of `os.environ` once read (`take_env_token`),
so that nothing this process starts later inherits it. The environment block the process
was started with stays in `/proc/PID/environ`, which `harden_process` keeps from the
sessions (docs/security.md).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import MutableMapping
from typing import Final

import attrs

from trio_pty.rpc.scope import TokenScope

__all__ = [
    "ScopedToken",
    "TokenError",
    "TokenSource",
    "check_token",
    "generate_token",
    "read_token_file",
    "take_env_token",
]

# A token file holds one token; anything much longer is not one (and is not read whole).
_MAX_TOKEN_FILE_BYTES: Final = 4096


class TokenError(ValueError):
    """A token, or where it was to come from, is unusable; the message says why."""


def generate_token() -> str:
    """A new token (256 bits, URL-safe) that never starts with "-": one in 64 of
    `secrets.token_urlsafe` does, and `--token -abc` then reads as a missing value."""
    while (token := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return token


def check_token(token: str, where: str) -> str:
    """The token, if usable: visible ASCII only (a space or a line break would not survive an
    `Authorization` header, and other characters are compared as different bytes there)."""
    if not token:
        raise TokenError(f"{where}: the token is empty")
    if not all("!" <= char <= "~" for char in token):
        raise TokenError(f"{where}: a token may only hold visible ASCII characters")
    return token


def read_token_file(path: str) -> str:
    """The token in `path`: a regular file owned by this process's user, that no one else may
    read or write (mode 0600 or stricter). One final line break is not part of the token.
    Checked on the opened file, so the file checked is the file read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise TokenError(f"{path}: cannot open the token file: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenError(f"{path}: the token file is not a regular file")
        if info.st_uid != os.geteuid():
            raise TokenError(
                f"{path}: the token file belongs to uid {info.st_uid}, not to this server's "
                f"uid {os.geteuid()}"
            )
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise TokenError(
                f"{path}: the token file has mode {mode:04o}, so others may read or change "
                f"it; it must be 0600 or stricter (chmod 600 {path})"
            )
        data = os.read(fd, _MAX_TOKEN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_TOKEN_FILE_BYTES:
        raise TokenError(f"{path}: the token file is over {_MAX_TOKEN_FILE_BYTES} bytes")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise TokenError(f"{path}: a token may only hold visible ASCII characters") from None
    text = text.removesuffix("\n").removesuffix("\r")
    return check_token(text, path)


def take_env_token(name: str, environ: MutableMapping[str, str] | None = None) -> str | None:
    """The token in the environment variable `name`, removed from the environment (an empty
    value counts as none)."""
    environ = os.environ if environ is None else environ
    value = environ.pop(name, None)
    if not value:
        return None
    return check_token(value, name)


@attrs.frozen(kw_only=True)
class TokenSource:
    """Where a `[[tokens]]` entry's token comes from: a file or an environment variable
    (never the config file itself, nor argv)."""

    file: str | None = None
    env: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.file is None) == (self.env is None):
            raise ValueError("a token comes from exactly one of file or env")

    def read(self, environ: MutableMapping[str, str] | None = None) -> str:
        if self.file is not None:
            return read_token_file(self.file)
        assert self.env is not None
        token = take_env_token(self.env, environ)
        if token is None:
            raise TokenError(f"{self.env}: the environment variable is not set")
        return token


@attrs.frozen
class ScopedToken:
    """A token and what it may do."""

    token: str = attrs.field(repr=False)
    scope: TokenScope
