"""How a shell session starts: which shell, its arguments, and its private startup files.

The marks are injected without touching the user's dotfiles: bash gets a private
`--rcfile`, zsh a private `ZDOTDIR`, each a copy of a script shipped in shell/scripts/
below a header that holds this session's nonce and options. They live in a private
directory (mode 0700) that the manager deletes as soon as the first prompt is up, so the
nonce stays in the shell's memory only, not in its environment or on disk.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Mapping
from importlib import resources
from typing import Final

import attrs

from ..errors import InvalidInput

__all__ = ["SUPPORTED", "Launch", "prepare", "resolve"]

SUPPORTED: Final = ("bash", "zsh")


@attrs.frozen
class Launch:
    """What to spawn for one shell session, and the directory to delete at its first prompt."""

    name: str
    command: str
    args: list[str]
    env: dict[str, str]
    directory: str

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def resolve(shell: object, environ: Mapping[str, str]) -> tuple[str, str]:
    """(name, command) of the shell to start: `shell` ("bash", "zsh" or a path to one), or
    with None the user's $SHELL when it is one of those, else bash."""
    if shell is None:
        login_shell = environ.get("SHELL", "")
        if os.path.basename(login_shell) in SUPPORTED:
            return os.path.basename(login_shell), login_shell
        return "bash", "bash"
    if not isinstance(shell, str):
        raise InvalidInput("shell", f"must be a string or null, got {type(shell).__name__}")
    name = os.path.basename(shell)
    if name not in SUPPORTED:
        raise InvalidInput(
            "shell",
            f"{shell!r} is not supported: shell sessions run bash or zsh (their integration "
            "reports each command's end and exit code; sh, dash and others have none). "
            "Start other programs with spawn.",
        )
    return name, shell


@functools.cache
def _script(name: str) -> str:
    return (resources.files(__package__) / "scripts" / name).read_text("utf-8")


def _quote(value: str) -> str:
    """A word both bash and zsh read back exactly."""
    return "'" + value.replace("'", "'\\''") + "'"


def prepare(
    name: str,
    command: str,
    *,
    nonce: str,
    rc: bool,
    login: bool,
    environ: Mapping[str, str],
) -> Launch:
    """Write the session's startup files; `environ` is the environment the shell will get
    (its ZDOTDIR is the user's, restored by our files)."""
    directory = tempfile.mkdtemp(prefix="trio-pty-shell-")
    try:
        header = [
            f"__tp_nonce={nonce}",
            f"__tp_rc={int(rc)}",
            f"__tp_login={int(login)}",
        ]
        if name == "bash":
            rcfile = os.path.join(directory, "rc.bash")
            _write(rcfile, header, _script("bashrc.bash"))
            return Launch(name, command, ["--rcfile", rcfile, "-i"], {}, directory)
        zdotdir = environ.get("ZDOTDIR")
        header += [
            f"__tp_dir={_quote(directory)}",
            f"__tp_zdotdir={_quote(zdotdir or '')}",
            f"__tp_zdotdir_set={int(zdotdir is not None)}",
            f"__tp_zdotdir_export={int(zdotdir is not None)}",
        ]
        _write(os.path.join(directory, ".zshenv"), header, _script("zshenv.zsh"))
        for file in ("zprofile", "zshrc", "zlogin"):
            _write(os.path.join(directory, f".{file}"), [], _script(f"{file}.zsh"))
        args = ["-i", "-l"] if login else ["-i"]
        return Launch(name, command, args, {"ZDOTDIR": directory}, directory)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def _write(path: str, header: list[str], body: str) -> None:
    with open(path, "x", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in header) + body)
