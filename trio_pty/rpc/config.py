"""The `trio-pty serve --config FILE` format: a TOML file, validated with errors that name
the offending key (see docs/protocol.md for the format).

What only the operator decides lives here and nowhere a client can reach: the command rules,
`env_allow`, the `[sandbox]` and the `[[tokens]]` with their scopes. A token itself is never
in the file: an entry says which file or environment variable holds it."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any, Final

import attrs

from trio_pty.limits import Limits
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.policy.environment import EnvAllowList, EnvMode
from trio_pty.posix.sandbox import BubblewrapSandbox
from trio_pty.rpc.scope import TokenScope
from trio_pty.rpc.tokens import TokenSource
from trio_pty.wire import InvalidParams, structure_request

__all__ = [
    "ConfigError",
    "SandboxConfig",
    "ServeConfig",
    "TokenEntry",
    "load_config",
    "parse_config",
]


class ConfigError(ValueError):
    """The config file is unreadable or malformed; the message says where and what."""


@attrs.frozen(kw_only=True)
class SandboxConfig:
    """The `[sandbox]` table: which sandbox wraps every command (`kind`, only "bubblewrap"
    for now) and its settings, as `BubblewrapSandbox` takes them."""

    kind: str = "bubblewrap"
    writable: tuple[str, ...] = ()
    network: bool = False
    extra_args: tuple[str, ...] = ()

    def build(self, *, hidden: tuple[str, ...] = ()) -> BubblewrapSandbox:
        """The sandbox, with `hidden` files (the server's token files) unreadable inside.
        ConfigError when it cannot work here (no bwrap, a writable path that is not a
        directory), so a misconfigured server fails at start, not per spawn."""
        try:
            return BubblewrapSandbox(
                writable=self.writable,
                network=self.network,
                extra_args=self.extra_args,
                hidden=hidden,
            )
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"[sandbox] {exc}") from None


@attrs.frozen(kw_only=True)
class TokenEntry:
    """One `[[tokens]]` entry: where its token comes from and what it may do."""

    source: TokenSource
    scope: TokenScope


@attrs.frozen(kw_only=True)
class ServeConfig:
    """What `--config FILE` may set. Command-line options win over the file."""

    limits: Limits = attrs.Factory(Limits)
    root: str | None = None
    env_mode: EnvMode = "inherit"
    env_deny: tuple[str, ...] = ()
    env_allow: tuple[str, ...] | None = None  # None: checked only under command rules
    authorizer: RulesAuthorizer | None = None
    sandbox: SandboxConfig | None = None
    tokens: tuple[TokenEntry, ...] = ()
    host: str | None = None
    port: int | None = None
    allow_origins: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()


_CONFIG_KEYS: Final = (
    "host",
    "port",
    "root",
    "env_mode",
    "env_deny",
    "env_allow",
    "allow_origins",
    "allow_hosts",
    "limits",
    "permissions",
    "sandbox",
    "tokens",
)
_SANDBOX_KEYS: Final = ("kind", "writable", "network", "extra_args")
_SANDBOX_KINDS: Final = ("bubblewrap",)
_TOKEN_KEYS: Final = ("name", "file", "env", "owners", "read_only")


def _strings(path: str, key: str, value: object) -> tuple[str, ...]:
    """An array of strings (`path` says where, for the message)."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{path}: {key} must be an array of strings")
    return tuple(value)


def load_config(path: str) -> ServeConfig:
    """Read and validate a TOML config file; ConfigError names the offending key."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, source=path)


def parse_config(data: Mapping[str, Any], *, source: str = "config") -> ServeConfig:
    """Validate an already parsed config table (see docs/protocol.md for the format)."""
    unknown = sorted(set(data) - set(_CONFIG_KEYS))
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s): {', '.join(unknown)} (known: {', '.join(_CONFIG_KEYS)})"
        )
    fields: dict[str, Any] = {}
    if "limits" in data:
        table = data["limits"]
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: [limits] must be a table")
        try:
            fields["limits"] = structure_request(table, Limits)
        except InvalidParams as exc:
            raise ConfigError(f"{source}: [limits] {exc.message}") from None
    if "root" in data:
        root = data["root"]
        if not isinstance(root, str) or not root:
            raise ConfigError(f"{source}: root must be a non-empty string")
        root = os.path.expanduser(root)
        if not os.path.isdir(root):
            raise ConfigError(f"{source}: root is not a directory: {root}")
        fields["root"] = root
    if "env_mode" in data:
        mode = data["env_mode"]
        if mode not in ("inherit", "fixed"):
            raise ConfigError(f'{source}: env_mode must be "inherit" or "fixed", got {mode!r}')
        fields["env_mode"] = mode
    for key in ("env_deny", "allow_origins", "allow_hosts"):
        if key in data:
            fields[key] = _strings(source, key, data[key])
    if "host" in data:
        if not isinstance(data["host"], str) or not data["host"]:
            raise ConfigError(f"{source}: host must be a non-empty string")
        fields["host"] = data["host"]
    if "port" in data:
        port = data["port"]
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError(f"{source}: port must be an integer 0..65535")
        fields["port"] = port
    if "permissions" in data:
        try:
            fields["authorizer"] = RulesAuthorizer.from_config(data["permissions"])
        except ValueError as exc:
            raise ConfigError(f"{source}: [permissions] {exc}") from None
    if "env_allow" in data:
        names = _strings(source, "env_allow", data["env_allow"])
        try:
            EnvAllowList(names)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        fields["env_allow"] = names
    if "sandbox" in data:
        fields["sandbox"] = _sandbox(source, data["sandbox"])
    if "tokens" in data:
        fields["tokens"] = _tokens(source, data["tokens"])
    return ServeConfig(**fields)


def _unknown_keys(where: str, table: Mapping[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s): {', '.join(unknown)} (known: {', '.join(known)})"
        )


def _sandbox(source: str, table: object) -> SandboxConfig:
    where = f"{source}: [sandbox]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    _unknown_keys(where, table, _SANDBOX_KEYS)
    kind = table.get("kind")
    if kind not in _SANDBOX_KINDS:
        raise ConfigError(f'{where} kind must be "bubblewrap", got {kind!r}')
    network = table.get("network", False)
    if not isinstance(network, bool):
        raise ConfigError(f"{where} network must be true or false")
    writable = _strings(where, "writable", table.get("writable", []))
    return SandboxConfig(
        kind=kind,
        writable=tuple(os.path.expanduser(path) for path in writable),
        network=network,
        extra_args=_strings(where, "extra_args", table.get("extra_args", [])),
    )


def _tokens(source: str, entries: object) -> tuple[TokenEntry, ...]:
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ConfigError(f"{source}: tokens must be an array of tables ([[tokens]])")
    found: list[TokenEntry] = []
    for number, table in enumerate(entries):
        where = f"{source}: [[tokens]] #{number + 1}"
        if "token" in table:
            raise ConfigError(
                f"{where}: a token is never written in the config; name its file or env"
            )
        _unknown_keys(where, table, _TOKEN_KEYS)
        name = table.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: name must be a non-empty string")
        where = f"{source}: [[tokens]] {name!r}"
        if any(entry.scope.name == name for entry in found):
            raise ConfigError(f"{where}: two entries have this name")
        file, env = table.get("file"), table.get("env")
        for key, value in (("file", file), ("env", env)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"{where}: {key} must be a non-empty string")
        read_only = table.get("read_only", False)
        if not isinstance(read_only, bool):
            raise ConfigError(f"{where}: read_only must be true or false")
        try:
            token_source = TokenSource(
                file=os.path.expanduser(file) if file is not None else None, env=env
            )
            scope = TokenScope(
                name=name,
                owners=_strings(where, "owners", table.get("owners", [])),
                read_only=read_only,
            )
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        found.append(TokenEntry(source=token_source, scope=scope))
    return tuple(found)
