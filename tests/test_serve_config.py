"""One serve configuration: the TOML structured by the wire's strict converter (every
problem named where it is), the command line over it by one rule, and the settings `serve`
runs composed from both (pure, no sockets: tests/test_rpc_server.py has the file's format,
tests/test_ops.py the real `serve`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty.rpc.config import ConfigError, ServeConfig, ServeFlags, parse_config, with_flags
from trio_pty.server.serve import compose

TOKEN = "server-token-0123456789"


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="s.toml")
    return str(raised.value)


def test_every_problem_is_named_where_it_is() -> None:
    """Like the wire's -32602: all the problems at once, each with its key's place."""
    message = refusal(
        {
            "colour": 1,
            "env_deny": ["A", 3],
            "limits": {"max_sessions": "many", "max_sesions": 1},
            "sandbox": {"kind": "bubblewrap", "network": 1},
            "tokens": [{"name": "ci", "file": "f", "owners": ["a"], "read_only": "no"}],
        }
    )
    assert message.startswith("s.toml: ")
    for part in (
        "unknown key(s): colour (known: host, port,",
        "[limits] unknown key(s): max_sesions",
        "env_deny[1] must be a string, got 3",
        "[limits] max_sessions must be an integer, got 'many'",
        "[sandbox] network must be true or false, got 1",
        "[[tokens]] #1 read_only must be true or false, got 'no'",
    ):
        assert part in message


def test_a_table_check_names_its_table() -> None:
    assert "[[tokens]] #2 file must be a non-empty string" in refusal(
        {"tokens": [{"name": "a", "env": "A", "owners": ["a"]}, {"name": "b", "file": ""}]}
    )
    assert refusal({"host": ""}) == "s.toml: host must be a non-empty string"


def test_paths_are_expanded(tmp_path: Path) -> None:
    config = parse_config(
        {"sandbox": {"kind": "bubblewrap", "writable": ["~/x"]}, "root": str(tmp_path)}
    )
    assert config.sandbox is not None
    assert config.sandbox.writable == (os.path.expanduser("~/x"),)


FILE = ServeConfig(
    host="0.0.0.0", port=9000, allow_origins=("http://file",), allow_hosts=("file.lan",)
)


def test_a_flag_replaces_the_files_setting() -> None:
    merged = with_flags(FILE, ServeFlags(port=0, allow_origins=("http://flag",)))
    assert (merged.host, merged.port) == ("0.0.0.0", 0)  # port 0 is given, not absent
    assert merged.allow_origins == ("http://flag",)  # the whole list, not added to
    assert merged.allow_hosts == ("file.lan",)
    assert with_flags(FILE, ServeFlags()) == FILE


@given(
    file_port=st.none() | st.integers(0, 65535),
    flag_port=st.none() | st.integers(0, 65535),
    file_hosts=st.lists(st.text(min_size=1), max_size=3).map(tuple),
    flag_hosts=st.lists(st.text(min_size=1), max_size=3).map(tuple),
)
def test_the_one_precedence_rule(
    file_port: int | None,
    flag_port: int | None,
    file_hosts: tuple[str, ...],
    flag_hosts: tuple[str, ...],
) -> None:
    merged = with_flags(
        ServeConfig(port=file_port, allow_hosts=file_hosts),
        ServeFlags(port=flag_port, allow_hosts=flag_hosts),
    )
    assert merged.port == (flag_port if flag_port is not None else file_port)
    assert merged.allow_hosts == (flag_hosts or file_hosts)


def test_compose_builds_what_serve_runs(tmp_path: Path) -> None:
    config = parse_config({"host": "127.0.0.2", "allow_hosts": ["a.lan"], "env_mode": "fixed"})
    flags = ServeFlags(port=0, node_id="east", state_dir=str(tmp_path / "state"))
    settings = compose(config, flags, token=TOKEN, environ={})
    assert (settings.server.host, settings.server.port) == ("127.0.0.2", 0)
    assert settings.server.allowed_hosts == frozenset({"a.lan"})
    assert settings.server.env_mode == "fixed" and settings.node_id == "east"
    assert settings.state_dir == str(tmp_path / "state") and (tmp_path / "state").is_dir()


@pytest.mark.parametrize(
    ("config", "flags", "message"),
    [
        ({}, ServeFlags(node_id="Not A Label"), "--node-id must be a DNS label"),
        ({"port": 1}, ServeFlags(listen_fd=3), "--listen-fd serves on that socket"),
        ({}, ServeFlags(port=70000), "--port must be 0..65535, got 70000"),
    ],
)
def test_compose_refuses_what_cannot_run(
    config: dict[str, Any], flags: ServeFlags, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        compose(parse_config(config), flags, token=TOKEN, environ={})


def test_compose_refuses_a_scoped_token_equal_to_the_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = parse_config({"tokens": [{"name": "x", "env": "SCOPED", "owners": ["a"]}]})
    monkeypatch.setenv("SCOPED", TOKEN)  # an env entry is read from (and leaves) os.environ
    with pytest.raises(ConfigError, match="two tokens are the same"):
        compose(config, ServeFlags(), token=TOKEN, environ={})
    assert "SCOPED" not in os.environ
