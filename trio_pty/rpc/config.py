"""The `trio-pty serve --config FILE` format: a TOML file, validated with errors that name
the offending key (see docs/protocol.md for the format)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any, Final

import attrs

from trio_pty.limits import Limits
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.policy.environment import EnvMode
from trio_pty.wire import InvalidParams, structure_request

__all__ = ["ConfigError", "ServeConfig", "load_config", "parse_config"]


class ConfigError(ValueError):
    """The config file is unreadable or malformed; the message says where and what."""


@attrs.frozen(kw_only=True)
class ServeConfig:
    """What `--config FILE` may set. Command-line options win over the file."""

    limits: Limits = attrs.Factory(Limits)
    root: str | None = None
    env_mode: EnvMode = "inherit"
    env_deny: tuple[str, ...] = ()
    authorizer: RulesAuthorizer | None = None
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
    "allow_origins",
    "allow_hosts",
    "limits",
    "permissions",
)


def _strings(path: str, key: str, value: object) -> tuple[str, ...]:
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
    return ServeConfig(**fields)
