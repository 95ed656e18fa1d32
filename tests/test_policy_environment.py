"""The child environment: what is filtered, what is fixed, who wins."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty.policy.environment import (
    CREDENTIAL_NAMES,
    CREDENTIAL_SUBSTRINGS,
    FIXED_NAMES,
    STALE_NAMES,
    EnvMode,
    child_environment,
    deny_reason,
    deny_rules,
)

from .helpers import python_steps

TAGS = {"TRIO_PTY_MANAGER": "m1", "TRIO_PTY_SESSION": "pty_1"}

BASE = {
    "HOME": "/home/me",
    "USER": "me",
    "LOGNAME": "me",
    "PATH": "/opt/bin:/usr/bin",
    "SHELL": "/bin/zsh",
    "TERM": "screen",
    "LANG": "fr_FR.UTF-8",
    "EDITOR": "vim",
    "GITHUB_TOKEN": "ghp_x",
    "TRIO_PTY_TOKEN": "server-secret",
    "my_api_key": "k",
    "DB_PASSWORD": "p",
    "AWS_PROFILE": "prod",
    "SSH_AUTH_SOCK": "/tmp/ssh-1/agent.1",
    "DATABASE_URL": "postgres://app:hunter2@db/app",
    "PWD": "/srv/trio-pty",
    "COLUMNS": "200",
}

names = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,15}\Z")
values = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=12)
envs = st.dictionaries(names, values, max_size=10)


def inherit(base: dict[str, str], **kwargs: object) -> dict[str, str]:
    options: dict[str, object] = {"overrides": None, "tags": TAGS, **kwargs}
    return child_environment(base, mode="inherit", **options)  # type: ignore[arg-type]


def test_inherit_drops_credentials_and_stale_values() -> None:
    child = inherit(BASE)
    assert child == {
        "HOME": "/home/me",
        "USER": "me",
        "LOGNAME": "me",
        "PATH": "/opt/bin:/usr/bin",
        "SHELL": "/bin/zsh",
        "TERM": "xterm-256color",
        "LANG": "fr_FR.UTF-8",
        "EDITOR": "vim",
        **TAGS,
    }


def test_fixed_takes_only_login_variables() -> None:
    child = child_environment(BASE, mode="fixed", overrides=None, tags=TAGS)
    assert child == {
        "HOME": "/home/me",
        "USER": "me",
        "LOGNAME": "me",
        "PATH": "/opt/bin:/usr/bin",
        "SHELL": "/bin/zsh",
        "TERM": "xterm-256color",
        "LANG": "fr_FR.UTF-8",
        **TAGS,
    }


def test_fixed_fallbacks() -> None:
    assert child_environment({}, mode="fixed", overrides=None, tags={}) == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "SHELL": "/bin/sh",
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
    }
    child = child_environment({"LOGNAME": "me"}, mode="fixed", overrides=None, tags={})
    assert child["USER"] == child["LOGNAME"] == "me"
    child = child_environment({"USER": "me"}, mode="fixed", overrides=None, tags={})
    assert child["USER"] == child["LOGNAME"] == "me"


def test_lang_is_set_only_when_missing() -> None:
    assert inherit({})["LANG"] == "C.UTF-8"
    assert inherit({"LANG": "de_DE.UTF-8"})["LANG"] == "de_DE.UTF-8"


def test_order_overrides_then_tags() -> None:
    child = inherit(
        BASE,
        overrides={"TERM": "dumb", "EDITOR": "nano", "TRIO_PTY_SESSION": "forged", "X": "1"},
    )
    assert child["TERM"] == "dumb"
    assert child["EDITOR"] == "nano"
    assert child["X"] == "1"
    assert child["TRIO_PTY_SESSION"] == "pty_1"


def test_overrides_are_the_callers_own_and_not_filtered() -> None:
    assert inherit({}, overrides={"NPM_TOKEN": "mine"})["NPM_TOKEN"] == "mine"


def test_workdir_sets_pwd() -> None:
    assert inherit(BASE, workdir="/work/x")["PWD"] == "/work/x"
    assert "PWD" not in inherit(BASE)


def test_extra_deny_patterns_are_case_insensitive_globs() -> None:
    base = {"CORP_VAULT_ADDR": "x", "corp_thing": "y", "OTHER": "z", "HOME": "/h"}
    child = inherit(base, extra_deny=["CORP_*", "othe?"])
    assert set(child) == {"HOME", "TERM", "LANG", *TAGS}
    fixed = child_environment(base, mode="fixed", overrides=None, extra_deny=["home"], tags={})
    assert "HOME" not in fixed


@pytest.mark.parametrize(
    "name",
    [
        "GITHUB_TOKEN",
        "gh_token",
        "NPM_TOKEN",
        "TRIO_PTY_TOKEN",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "Stripe_Secret_Key",
        "PGPASSWORD",
        "SMTP_PASSWD",
        "MAPS_APIKEY",
        "DEPLOY_PRIVATE_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AWS_ACCESS_KEY_ID",
        "aws_region",
        *sorted(CREDENTIAL_NAMES),
        "ssh_auth_sock",
    ],
)
def test_credential_names_are_denied(name: str) -> None:
    assert deny_reason(name, "harmless") is not None
    assert name not in inherit({name: "harmless"})


@pytest.mark.parametrize(
    "value",
    [
        "postgres://app:hunter2@db:5432/app",
        "https://x-access-token:ghp_abc@github.com/org/repo.git",
        "https://ghp_abc@github.com/org/repo.git",
        "primary=redis://h1 backup=redis://:pw@h2",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...\n-----END OPENSSH PRIVATE KEY-----",
    ],
)
def test_credential_values_are_denied(value: str) -> None:
    assert deny_reason("MY_SETTING", value) is not None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("EDITOR", "vim"),
        ("PATH", "/usr/bin:/bin"),
        ("HOMEPAGE", "https://example.com/a@b"),
        ("MAIL", "me@example.com"),
        ("GIT_REMOTE", "git@github.com:org/repo.git"),
        ("KEYBOARD", "us"),
        ("PYTHONPATH", "/src"),
    ],
)
def test_ordinary_variables_pass(name: str, value: str) -> None:
    assert deny_reason(name, value) is None


@given(base=envs, name=names, secret=values)
def test_a_credential_never_reaches_the_child(base: dict[str, str], name: str, secret: str) -> None:
    for word in CREDENTIAL_SUBSTRINGS:
        leaked = f"{name}_{word.lower()}"
        child = inherit({**base, leaked: secret})
        assert leaked not in child


@given(base=envs)
def test_inherit_is_base_minus_denied_plus_fixed_values(base: dict[str, str]) -> None:
    child = inherit(base)
    assert child["TERM"] == "xterm-256color"
    for name, value in base.items():
        if name in TAGS or name in {"TERM", "LANG"}:
            continue
        if deny_reason(name, value) is None:
            assert child[name] == value
        else:
            assert name not in child
    extra = set(child) - set(base) - set(TAGS) - {"TERM", "LANG"}
    assert not extra
    for name in child:
        assert name.upper() not in STALE_NAMES


@given(base=envs, overrides=envs, tags=envs)
def test_tags_always_win_then_overrides(
    base: dict[str, str], overrides: dict[str, str], tags: dict[str, str]
) -> None:
    modes: tuple[EnvMode, ...] = ("inherit", "fixed")
    for mode in modes:
        child = child_environment(base, mode=mode, overrides=overrides, tags=tags)
        for name, value in overrides.items():
            assert child[name] == tags.get(name, value)
        for name, value in tags.items():
            assert child[name] == value
        if mode == "fixed":
            allowed = set(FIXED_NAMES) | set(overrides) | set(tags)
            assert set(child) <= allowed


def test_value_scan_is_linear() -> None:
    def scan(size: int) -> None:
        assert deny_reason("V", "://" * size + "x" * size) is None
        assert deny_reason("V", "a://" + "b" * size) is None

    # Twice the value, twice the work (counted in lines of Python run, not in seconds).
    assert python_steps(lambda: scan(100_000)) <= 2.05 * python_steps(lambda: scan(50_000))


def test_deny_rules_are_exported_for_display() -> None:
    rules = deny_rules(["CORP_*"])
    assert rules["name_substrings"] == list(CREDENTIAL_SUBSTRINGS)
    assert rules["name_prefixes"] == ["AWS_"]
    assert "SSH_AUTH_SOCK" in rules["names"]
    assert rules["patterns"] == ["CORP_*"]
    assert rules["values"]


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="inherit"):
        child_environment({}, mode="everything", overrides=None, tags={})  # type: ignore[arg-type]
