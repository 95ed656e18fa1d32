"""The `trio-pty serve --config FILE` format: a TOML file, structured into records by the
wire's strict converter, with errors that name the offending key (see docs/protocol.md).

What only the operator decides lives here and nowhere a client can reach: the command rules,
`env_allow`, the `[sandbox]` and the `[[tokens]]` with their scopes. A token itself is never
in the file: an entry says which file or environment variable holds it.

The file is read the way a request's params are (`trio_pty.wire.convert`): every value must
already have its declared type, unknown keys are refused, and every problem is reported
with where it is (`[limits] max_sessions must be an integer, got 2.5`), in TOML's words.
Then the command line goes over it by one rule (`with_flags`).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
import typing
from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple

import attrs

from trio_pty.limits import Limits
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.policy.environment import EnvAllowList, EnvMode
from trio_pty.posix.sandbox import BubblewrapSandbox
from trio_pty.rpc.scope import FULL_ACCESS, TokenScope
from trio_pty.rpc.tokens import TokenSource
from trio_pty.wire.convert import InvalidParams, ParamProblem, make_converter, structure_params

__all__ = [
    "ConfigError",
    "SandboxConfig",
    "ServeConfig",
    "ServeFlags",
    "TokenEntry",
    "load_config",
    "parse_config",
    "with_flags",
]


class ConfigError(ValueError):
    """The config file is unreadable or malformed; the message says where and what."""


def _expand_paths(paths: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(os.path.expanduser(path) for path in paths)


def _expand_path(path: str | None) -> str | None:
    return os.path.expanduser(path) if path is not None else None


def _non_empty(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not value:
        raise ValueError(f"{attribute.name} must be a non-empty string")


@attrs.frozen(kw_only=True)
class SandboxConfig:
    """The `[sandbox]` table: which sandbox wraps every command (`kind`, only "bubblewrap"
    for now, and always said) and its settings, as `BubblewrapSandbox` takes them."""

    kind: Literal["bubblewrap"]
    writable: tuple[str, ...] = attrs.field(default=(), converter=_expand_paths)
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
class _TokenTable:
    """One `[[tokens]]` entry as written (`token = ...` is refused before: see _refuse_tokens)."""

    name: str = attrs.field(validator=_non_empty)
    file: str | None = attrs.field(default=None, validator=_non_empty, converter=_expand_path)
    env: str | None = attrs.field(default=None, validator=_non_empty)
    owners: tuple[str, ...] = ()
    read_only: bool = False
    max_sessions: int | None = None
    max_connections: int | None = None

    def entry(self) -> TokenEntry:
        source = TokenSource(file=self.file, env=self.env)
        scope = TokenScope(
            name=self.name,
            owners=self.owners,
            read_only=self.read_only,
            max_sessions=self.max_sessions,
            max_connections=self.max_connections,
        )
        return TokenEntry(source=source, scope=scope)


def _port(instance: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and not 0 <= value <= 65535:
        raise ValueError("port must be an integer 0..65535")


def _directory(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not os.path.isdir(value):
        raise ValueError(f"root is not a directory: {value}")


def _env_allow(
    instance: object, attribute: attrs.Attribute[Any], value: tuple[str, ...] | None
) -> None:
    if value is not None:
        EnvAllowList(value)  # its ValueError names the entry


@attrs.frozen(kw_only=True)
class _File:
    """The whole file as written: every key, with its type and its default."""

    host: str | None = attrs.field(default=None, validator=_non_empty)
    port: int | None = attrs.field(default=None, validator=_port)
    root: str | None = attrs.field(default=None, converter=_expand_path, validator=_directory)
    env_mode: EnvMode = "inherit"
    env_deny: tuple[str, ...] = ()
    env_allow: tuple[str, ...] | None = attrs.field(default=None, validator=_env_allow)
    allow_origins: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    audit_log: str | None = attrs.field(default=None, converter=_expand_path, validator=_non_empty)
    limits: Limits = attrs.Factory(Limits)
    permissions: Any = None  # RulesAuthorizer's rules: checked by RulesAuthorizer.from_config
    sandbox: SandboxConfig | None = None
    tokens: tuple[_TokenTable, ...] = ()


@attrs.frozen(kw_only=True)
class ServeConfig:
    """What `serve` takes from the file: `_File`, with the rules and the token entries
    built. `with_flags` puts the command line over it."""

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
    audit_log: str | None = None  # the audit log's file (docs/security.md)


@attrs.frozen(kw_only=True)
class ServeFlags:
    """What `trio-pty serve`'s command line says; None (or an empty list) where it says
    nothing. `host`, `port`, `allow_origins` and `allow_hosts` are also keys of the file."""

    host: str | None = None
    port: int | None = None
    allow_origins: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    listen_fd: int | None = None
    node_id: str | None = None
    token_file: str | None = None
    state_dir: str | None = None
    audit_log: str | None = None


def with_flags(config: ServeConfig, flags: ServeFlags) -> ServeConfig:
    """The one precedence rule: a setting given on the command line replaces the file's
    (a repeatable option given once or more replaces the file's whole list); a setting it
    leaves out comes from the file, else it has its default."""
    return attrs.evolve(
        config,
        host=flags.host or config.host,
        port=flags.port if flags.port is not None else config.port,
        allow_origins=flags.allow_origins or config.allow_origins,
        allow_hosts=flags.allow_hosts or config.allow_hosts,
        audit_log=flags.audit_log or config.audit_log,
    )


# ------------------------------------------------------------------------------ reading


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


_CONVERTER: Final = make_converter()


def parse_config(data: Mapping[str, Any], *, source: str = "config") -> ServeConfig:
    """Validate an already parsed config table (see docs/protocol.md for the format)."""
    _refuse_tokens(data, source)
    try:
        file = structure_params(_CONVERTER, dict(data), _File)
    except InvalidParams as exc:
        raise ConfigError(f"{source}: {_describe(exc.problems, data)}") from None
    authorizer = None
    if file.permissions is not None:
        try:
            authorizer = RulesAuthorizer.from_config(file.permissions)
        except ValueError as exc:
            raise ConfigError(f"{source}: [permissions] {exc}") from None
    return ServeConfig(
        limits=file.limits,
        root=file.root,
        env_mode=file.env_mode,
        env_deny=file.env_deny,
        env_allow=file.env_allow,
        authorizer=authorizer,
        sandbox=file.sandbox,
        tokens=_token_entries(file.tokens, source),
        host=file.host,
        port=file.port,
        allow_origins=file.allow_origins,
        allow_hosts=file.allow_hosts,
        audit_log=file.audit_log,
    )


def _refuse_tokens(data: Mapping[str, Any], source: str) -> None:
    """A token written in the file is refused with its own message (not as an unknown
    key), and before anything could echo it."""
    entries = data.get("tokens")
    for number, table in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(table, dict) and "token" in table:
            raise ConfigError(
                f"{source}: [[tokens]] #{number + 1}: a token is never written in the config; "
                "name its file or env"
            )


def _token_entries(tables: tuple[_TokenTable, ...], source: str) -> tuple[TokenEntry, ...]:
    found: list[TokenEntry] = []
    for table in tables:
        where = f"{source}: [[tokens]] {table.name!r}"
        if any(entry.scope.name == table.name for entry in found):
            raise ConfigError(f"{where}: two entries have this name")
        if table.name == FULL_ACCESS.name:  # what is kept per token is kept by its name
            raise ConfigError(f"{where}: the name of the server's own token")
        try:
            found.append(table.entry())
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return tuple(found)


# ------------------------------------------------------------------------------ messages

_STEP: Final = re.compile(r'\.?([A-Za-z_]\w*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')
_MISSING: Final = object()
_KNOWN_SHOWN: Final = 16  # a table with more keys ([limits]) is not listed in full


def _steps(path: str) -> list[str | int]:
    """`tokens[0].read_only` -> ["tokens", 0, "read_only"] (the converter's paths)."""
    steps: list[str | int] = []
    for name, index, key in _STEP.findall(path):
        steps.append(name or (int(index) if index else json.loads(key)))
    return steps


def _inner(tp: Any) -> Any:
    """`X | None` -> X."""
    members = [arg for arg in typing.get_args(tp) if arg is not type(None)]
    if members and type(None) in typing.get_args(tp) and len(members) == 1:
        return members[0]
    return tp


class _Place(NamedTuple):
    """Where a converter path points: the declared type there, the value written there
    (_MISSING when none is) and how many of its steps name its table."""

    tp: Any
    value: Any
    table: int


def _follow(steps: list[str | int], data: Any) -> _Place:
    tp: Any = _File
    value, table = data, 0
    for number, step in enumerate(steps, start=1):
        tp = _inner(tp)
        if isinstance(step, str) and attrs.has(tp):
            tp = typing.get_type_hints(tp).get(step, Any)
        elif typing.get_origin(tp) is tuple:
            tp = typing.get_args(tp)[0]
        else:
            tp = Any
        if attrs.has(_inner(tp)):
            table = number
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            value = _MISSING
    return _Place(_inner(tp), value, table)


def _expected(tp: Any) -> str:
    """What a value of type `tp` is, in TOML's words."""
    words = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}
    if tp in words:
        return words[tp]
    if typing.get_origin(tp) is Literal:
        return " or ".join(json.dumps(value) for value in typing.get_args(tp))
    if typing.get_origin(tp) is tuple:
        element = typing.get_args(tp)[0]
        of = {str: " of strings"}.get(element, " of tables" if attrs.has(element) else "")
        return f"an array{of}"
    return "a table" if attrs.has(tp) or typing.get_origin(tp) is dict else "a value"


def _written(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(None if value is _MISSING else value)


def _table(steps: list[str | int]) -> str:
    """A table's name: "" (the top), "[limits] ", "[[tokens]] #2 "."""
    if not steps:
        return ""
    if isinstance(steps[-1], int):
        return f"[[{'.'.join(str(s) for s in steps[:-1])}]] #{steps[-1] + 1} "
    return f"[{'.'.join(str(s) for s in steps)}] "


def _where(steps: list[str | int], table: int) -> str:
    """A key's name: its table's, then its path in there (`env_deny[1]`)."""
    rest = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps[table:])
    return f"{_table(steps[:table])}{rest.removeprefix('.')}".strip()


def _describe(problems: tuple[ParamProblem, ...], data: Mapping[str, Any]) -> str:
    """The converter's problems in TOML's words: unknown keys by table (with the keys it
    knows, when they are few), then each key of the wrong type or missing, then what a
    table's own checks refused."""
    unknown: dict[tuple[str | int, ...], list[str]] = {}
    said: list[str] = []
    for problem in problems:
        steps = _steps(problem.path)
        if problem.problem == "unknown field":
            unknown.setdefault(tuple(steps[:-1]), []).append(str(steps[-1]))
        elif problem.problem.startswith(("expected ", "required ")):
            place = _follow(steps, data)
            where = _where(steps, place.table)
            said.append(f"{where} must be {_expected(place.tp)}, got {_written(place.value)}")
        else:
            said.append(f"{_table(steps)}{problem.problem}")
    for path, keys in reversed(unknown.items()):
        fields = [field.name for field in attrs.fields(_follow(list(path), data).tp)]
        known = f" (known: {', '.join(fields)})" if len(fields) <= _KNOWN_SHOWN else ""
        said.insert(0, f"{_table(list(path))}unknown key(s): {', '.join(sorted(keys))}{known}")
    return "; ".join(said)
