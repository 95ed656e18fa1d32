"""The environment a session's child starts with.

A PTY service runs commands on behalf of a program that may not be trusted with the
operator's secrets (an AI agent, a remote IDE client). The server's own environment is full
of them (cloud keys, registry tokens, the server's own `TRIO_PTY_TOKEN`), so "inherit" mode
passes it on minus everything credential-shaped, and "fixed" mode passes on only the few
variables a login would set. This is a leak filter, not a sandbox: the child still runs as
the server's user and can read whatever files that user can.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal

from trio_pty.errors import PermissionDenied
from trio_pty.policy.validate import glob_match

__all__ = [
    "CREDENTIAL_NAMES",
    "CREDENTIAL_PREFIXES",
    "CREDENTIAL_SUBSTRINGS",
    "FIXED_FALLBACKS",
    "FIXED_NAMES",
    "RISKY_NAMES",
    "RISKY_PREFIXES",
    "STALE_NAMES",
    "EnvAllowList",
    "EnvMode",
    "child_environment",
    "deny_reason",
    "deny_rules",
    "risky_reason",
]

EnvMode = Literal["inherit", "fixed"]

#: A name containing one of these (case-insensitively) is taken to hold a credential.
CREDENTIAL_SUBSTRINGS: Final[tuple[str, ...]] = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "APIKEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
)

#: Whole families of credentials (AWS_ACCESS_KEY_ID, AWS_SESSION_TOKEN, AWS_PROFILE, ...).
CREDENTIAL_PREFIXES: Final[tuple[str, ...]] = ("AWS_",)

#: Common credential-bearing names that the substrings above miss (see docs/security.md).
CREDENTIAL_NAMES: Final[frozenset[str]] = frozenset(
    {
        # Sockets that sign or decrypt as the operator: no secret in the value, but
        # holding the variable is holding the keys.
        "SSH_AUTH_SOCK",
        "GPG_AGENT_INFO",
        # Connection strings that carry a password or key inside them.
        "DATABASE_URL",
        "REDIS_URL",
        "MONGODB_URI",
        "MONGO_URL",
        "AMQP_URL",
        "SENTRY_DSN",
        "AZURE_STORAGE_CONNECTION_STRING",
        # Passwords and keys under names without a telling word.
        "MYSQL_PWD",
        "GITHUB_PAT",
        "ARM_ACCESS_KEY",
        "AZURE_STORAGE_KEY",
        "DOCKER_AUTH_CONFIG",
        # The URL is the credential.
        "SLACK_WEBHOOK_URL",
    }
)

#: Inherit mode drops these: they describe the server's process and terminal, not the
#: child's PTY, and programs trust them over the truth (COLUMNS beats TIOCGWINSZ).
STALE_NAMES: Final[frozenset[str]] = frozenset(
    {
        "PWD",
        "OLDPWD",
        "LINES",
        "COLUMNS",
        "COLORTERM",
        "TERM_PROGRAM",
        "TERM_PROGRAM_VERSION",
        "TERM_SESSION_ID",
        "TMUX",
        "TMUX_PANE",
        "STY",
        "WINDOWID",
    }
)

#: Fixed mode takes only these from the base environment.
FIXED_NAMES: Final[tuple[str, ...]] = ("HOME", "LANG", "LOGNAME", "PATH", "SHELL", "TERM", "USER")

#: Used in fixed mode when the base environment lacks the variable. HOME, USER and LOGNAME
#: have no honest pure default (a wrong HOME is worse than none), so they are left out.
FIXED_FALLBACKS: Final[Mapping[str, str]] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "SHELL": "/bin/sh",
}

TERM_VALUE: Final = "xterm-256color"
LANG_DEFAULT: Final = "C.UTF-8"


def _url_with_userinfo(value: str) -> bool:
    """True when the value holds `scheme://user[:password]@host` anywhere in it.

    Scanned by hand: each `://` is followed only to the end of its authority, so the cost
    is linear even for a hostile value.
    """
    start = value.find("://")
    while start >= 0:
        cursor = start + 3
        while cursor < len(value) and value[cursor] not in "/?#\\ \t\r\n":
            if value[cursor] == "@":
                return True
            cursor += 1
        start = value.find("://", start + 3)
    return False


def deny_reason(name: str, value: str = "", extra_deny: Sequence[str] = ()) -> str | None:
    """Why inherit mode would drop this variable, or None when it passes on."""
    upper = name.upper()
    for word in CREDENTIAL_SUBSTRINGS:
        if word in upper:
            return f"name contains {word}"
    for prefix in CREDENTIAL_PREFIXES:
        if upper.startswith(prefix):
            return f"name starts with {prefix}"
    if upper in CREDENTIAL_NAMES:
        return "known credential variable"
    for pattern in extra_deny:
        if glob_match(pattern, name, ignore_case=True):
            return f"matches deny pattern {pattern!r}"
    if _url_with_userinfo(value):
        return "value is a URL with user information (a password or token)"
    if "PRIVATE KEY-----" in value:
        return "value is a PEM private key"
    if upper in STALE_NAMES:
        return "describes the server's own process or terminal"
    return None


def deny_rules(extra_deny: Sequence[str] = ()) -> dict[str, list[str]]:
    """The inherit-mode filter as JSON-friendly data, for `server.info` and the docs."""
    return {
        "name_substrings": list(CREDENTIAL_SUBSTRINGS),
        "name_prefixes": list(CREDENTIAL_PREFIXES),
        "names": sorted(CREDENTIAL_NAMES),
        "patterns": list(extra_deny),
        "values": [
            "a URL with user information (scheme://user:password@host)",
            "a PEM private key",
        ],
        "stale_names": sorted(STALE_NAMES),
    }


def filtered_base(
    base: Mapping[str, str], *, mode: EnvMode, extra_deny: Sequence[str] = ()
) -> dict[str, str]:
    """The part of the child's environment that is the same for every spawn: the manager's
    environment filtered (mode "inherit") or reduced to the fixed set (mode "fixed"), plus
    TERM and LANG. A manager computes it once; `child_environment` finishes it per spawn."""
    if mode == "inherit":
        child = {
            name: value
            for name, value in base.items()
            if deny_reason(name, value, extra_deny) is None
        }
    elif mode == "fixed":
        child = {}
        for name in FIXED_NAMES:
            value = base.get(name)
            if value is not None and deny_reason(name, value, extra_deny) is None:
                child[name] = value
            elif name in FIXED_FALLBACKS:
                child[name] = FIXED_FALLBACKS[name]
        if "USER" in child and "LOGNAME" not in child:
            child["LOGNAME"] = child["USER"]
        elif "LOGNAME" in child and "USER" not in child:
            child["USER"] = child["LOGNAME"]
    else:
        raise ValueError(f"environment mode must be 'inherit' or 'fixed', got {mode!r}")
    child["TERM"] = TERM_VALUE
    child.setdefault("LANG", LANG_DEFAULT)
    return child


def child_environment(
    base: Mapping[str, str],
    *,
    mode: EnvMode,
    overrides: Mapping[str, str] | None,
    extra_deny: Sequence[str] = (),
    tags: Mapping[str, str],
    workdir: str | None = None,
) -> dict[str, str]:
    """Build the child's environment: `filtered_base`, then `finish_environment`."""
    return finish_environment(
        filtered_base(base, mode=mode, extra_deny=extra_deny),
        overrides=overrides,
        tags=tags,
        workdir=workdir,
    )


def finish_environment(
    prepared: Mapping[str, str],
    *,
    overrides: Mapping[str, str] | None,
    tags: Mapping[str, str],
    workdir: str | None = None,
) -> dict[str, str]:
    """One spawn's environment from a `filtered_base`.

    Order, each step winning over the previous: the filtered base; PWD when the workdir is
    known; the caller's validated `overrides` (they are the caller's own values, so nothing
    can leak through them and they are not filtered); the manager's `tags`, which always
    win so that a session can always be identified.
    """
    child = dict(prepared)
    if workdir is not None:
        child["PWD"] = workdir
    if overrides:
        child.update(overrides)
    child.update(tags)
    return child


# -- what a client may set under command rules ---------------------------------------------

#: Variables that decide which program runs, what it loads or which commands it runs on its
#: own: a client that may set one can run anything through an allowed command (`PATH` makes
#: `git` a program of the client's; `GIT_CONFIG_COUNT/KEY/VALUE` set `core.fsmonitor` to any
#: command; `HOME` or `XDG_CONFIG_HOME` point git at a config of the client's). Not
#: exhaustive: the default is that no variable may be set at all.
RISKY_NAMES: Final[frozenset[str]] = frozenset(
    {
        "PATH",
        "HOME",
        "XDG_CONFIG_HOME",
        "XDG_CONFIG_DIRS",
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "PS0",
        "PS1",
        "PS4",
        "IFS",
        "CDPATH",
        "SHELLOPTS",
        "BASHOPTS",
        "GLOBIGNORE",
        "ZDOTDIR",
        "SHELL",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "MANPAGER",
        "BROWSER",
        "LESSOPEN",
        "LESSCLOSE",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "GCONV_PATH",
        "HOSTALIASES",
        "LOCPATH",
        "NLSPATH",
        "TMPDIR",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "CLASSPATH",
        "GOFLAGS",
        "CARGO_HOME",
        "RUSTC_WRAPPER",
        "CC",
        "CXX",
        "MAKEFLAGS",
    }
)

#: Whole families: the dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT), git, the
#: interpreters' startup hooks and module paths, exported bash functions, npm and pip config.
RISKY_PREFIXES: Final[tuple[str, ...]] = (
    "LD_",
    "DYLD_",
    "GIT_",
    "PYTHON",
    "PERL",
    "RUBY",
    "NODE_",
    "NPM_CONFIG_",
    "PIP_",
    "LUA_",
    "BASH_FUNC_",
    "GEM_",
    "BUNDLE_",
)


def risky_reason(name: str) -> str | None:
    """Why a client setting `name` could change what an allowed command does, or None."""
    upper = name.upper()
    if upper in RISKY_NAMES:
        return "can change which program runs or what it runs"
    for prefix in RISKY_PREFIXES:
        if upper.startswith(prefix):
            return f"starts with {prefix}, which can change what a program loads or runs"
    return None


class EnvAllowList:
    """The variables a client may set per spawn (`env`) when command rules are in place.

    A command rule judges a command line; the environment decides what that command line
    does (`env={"PATH": evil}` turns an allowed `git status` into the client's program). So
    under rules a client's `env` may only name variables the operator allowed. Entries are
    exact names or globs (`*`, `?`, case-sensitive). The default, no entries, refuses every
    variable. A risky variable (`risky_reason`: PATH, HOME, LD_*, GIT_*, PYTHON*, BASH_ENV,
    ENV, PROMPT_COMMAND, ...) is allowed only by an entry that is exactly its name: a glob
    such as `*` never unlocks one.
    """

    def __init__(self, names: Sequence[str] = ()) -> None:
        for entry in names:
            if not isinstance(entry, str) or not entry:
                raise ValueError(f"env_allow entries must be non-empty strings, got {entry!r}")
        self.names: tuple[str, ...] = tuple(names)

    def refusal(self, name: str) -> str | None:
        """Why a client may not set `name`, or None when it may."""
        risky = risky_reason(name)
        for entry in self.names:
            if entry == name or (risky is None and glob_match(entry, name)):
                return None
        if risky is not None:
            return f"{risky}; only an exact env_allow entry permits it"
        return "not in env_allow"

    def check(self, env: Mapping[str, str] | None) -> None:
        """Raise PermissionDenied naming the first variable the client may not set."""
        for name in env or ():
            reason = self.refusal(name)
            if reason is not None:
                raise PermissionDenied("env", name, reason)

    def __repr__(self) -> str:
        return f"EnvAllowList({list(self.names)!r})"
