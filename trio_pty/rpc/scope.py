"""What a token may do: which owners it may use, and whether it may change anything.

Pure (no trio, no manager). `TokenScope.refusal` is the one decision, made by
`RpcConnection.receive` for every call before it starts, on the call's structured params:

- a read-only token may call only `READ_ONLY_METHODS` (and attach without `driver`, which
  would stop the session from answering the program's terminal queries; and read without a
  named `reader`, which would move a cursor another client keeps);
- a call that names an owner (every `pty.*` method, `owner.delete`) must name one of the
  token's owner patterns. A call on a session of another owner is answered exactly as a
  session that does not exist (`session_not_found` with the id it named); a call on another
  owner as such (`pty.spawn`, `pty.list`, `owner.delete`) is `permission_denied` for
  `owner`, whether or not that owner has sessions;
- a method that names no owner (server-wide, such as a future drain) needs a token for every
  owner, except `server.info`, whose counts the handler limits to what the token sees.

New methods are covered by default: a params record with an `owner` field is checked, one
without is server-wide, and a read-only token may call a method only once it is listed here.
`pty.list` with `all_owners` passes; its handler lists only what `sees` allows.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from trio_pty.errors import PermissionDenied, PtyError, SessionNotFound
from trio_pty.policy.validate import glob_match
from trio_pty.wire import DEFAULT_OWNER, AttachParams, ListParams, MethodSpec, ReadParams

__all__ = ["FULL_ACCESS", "READ_ONLY_METHODS", "TokenScope"]

#: What a read-only token may call: methods that change nothing a session does (`pty.run`,
#: `pty.signal`, `pty.spawn_shell` change it, so they are not here).
READ_ONLY_METHODS: Final = frozenset(
    {"pty.read", "pty.read_raw", "pty.attach", "pty.detach", "pty.screen", "pty.list"}
    | {"pty.commands", "pty.get", "server.info", "pty.record"}
)
# Server-wide methods (no owner) that a token limited to some owners may call too.
_SCOPED_SERVER_METHODS: Final = frozenset({"server.info"})
_EVERY_OWNER: Final = "*"


def _owners(value: tuple[str, ...]) -> tuple[str, ...]:
    if not value or not all(isinstance(entry, str) and entry for entry in value):
        raise ValueError("owners must be a non-empty list of non-empty patterns")
    return tuple(value)


def _quota(instance: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"{attribute.name} must be a positive whole number")


@attrs.frozen(kw_only=True)
class TokenScope:
    """A token's rights: `owners` are exact names or globs (`*`, `?`, case-sensitive; `*`
    alone is every owner), `read_only` limits it to `READ_ONLY_METHODS`. `name` labels it
    in logs and errors (never the token itself), and keys what is kept per token: its
    remembered owner deletions, its named read cursors.

    Its share of the server: `max_sessions` bounds the sessions of the owners it sees (live
    or ended and not yet removed, whoever started them), `max_connections` its open
    connections; None leaves only the server's own limits."""

    name: str
    owners: tuple[str, ...] = attrs.field(default=(_EVERY_OWNER,), converter=_owners)
    read_only: bool = False
    max_sessions: int | None = attrs.field(default=None, validator=_quota)
    max_connections: int | None = attrs.field(default=None, validator=_quota)

    @property
    def every_owner(self) -> bool:
        return _EVERY_OWNER in self.owners

    def sees(self, owner: str) -> bool:
        """Whether this token may use `owner` (and see its sessions)."""
        return any(glob_match(pattern, owner) for pattern in self.owners)

    def refusal(self, spec: MethodSpec[Any, Any], params: object) -> PtyError | None:
        """Why this token may not make this call, or None when it may."""
        method = spec.name
        if self.read_only:
            if method not in READ_ONLY_METHODS:
                return PermissionDenied("method", method, f"token {self.name!r} is read-only")
            if isinstance(params, AttachParams) and params.driver:
                return PermissionDenied(
                    "method", "pty.attach driver", f"token {self.name!r} is read-only"
                )
            if isinstance(params, ReadParams) and params.reader is not None:
                return PermissionDenied(
                    "method", "pty.read reader", f"token {self.name!r} is read-only"
                )
        if not _names_an_owner(params):
            if self.every_owner or method in _SCOPED_SERVER_METHODS:
                return None
            return PermissionDenied("method", method, "needs a token for every owner")
        owner = _addressed_owner(params)
        if owner is None or self.sees(owner):
            return None
        session_id = getattr(params, "id", None)
        if isinstance(session_id, str):
            return SessionNotFound(session_id)  # exactly what a missing session gives
        return PermissionDenied("owner", owner, f"not an owner of token {self.name!r}")


def _names_an_owner(params: object) -> bool:
    record = type(params)
    return attrs.has(record) and "owner" in attrs.fields_dict(record)


def _addressed_owner(params: object) -> str | None:
    """The owner a call acts on; None for `pty.list` of every owner (filtered later)."""
    if isinstance(params, ListParams):
        if params.all_owners:
            return None
        return DEFAULT_OWNER if params.owner is None else params.owner
    owner: str = getattr(params, "owner")  # noqa: B009 - checked by _names_an_owner
    return owner


#: The server's own token (`--token-file`, `TRIO_PTY_TOKEN`, `--token`): everything.
FULL_ACCESS: Final = TokenScope(name="server")
