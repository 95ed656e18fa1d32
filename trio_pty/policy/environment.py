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

from trio_pty.policy.validate import glob_match

__all__ = [
    "CREDENTIAL_NAMES",
    "CREDENTIAL_PREFIXES",
    "CREDENTIAL_SUBSTRINGS",
    "FIXED_FALLBACKS",
    "FIXED_NAMES",
    "STALE_NAMES",
    "EnvMode",
    "child_environment",
    "deny_reason",
    "deny_rules",
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
