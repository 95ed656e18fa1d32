"""Who may run what, where: authorization requests, rule-based decisions, the workdir handle.

The flow the manager follows (docs/security.md has the full story):

1. validate, then `open_workdir` opens the directory beneath the root's descriptor (openat2
   RESOLVE_BENEATH, or an O_NOFOLLOW walk: no swapped component leads out), so the
   directory is pinned, and judged from the descriptor, before anyone is asked about it;
2. authorize `shell` (the quoted command line) and, when the directory lies outside the
   manager's root, `external_directory` (its resolved path); an authorizer may take as long
   as a human needs;
3. `verify_unchanged` proves the path still names the very directory that was opened and
   approved (a symlink swapped in meanwhile is refused);
4. the child is spawned with `cwd=f"/proc/self/fd/{handle.fd}"`: the kernel follows the
   descriptor, never the path, so the child starts in the approved directory even if the
   path changes after the check.

Writes authorize `write` with `<command> <stdin> <input>` before the bytes go in.
The only I/O in policy/ lives here: plain `os` calls on the workdir, no trio.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Final, Literal, Protocol, TypeAlias, get_args

import attrs

from trio_pty.errors import OUT_OF_RESOURCES, InvalidInput, PermissionDenied
from trio_pty.policy.validate import glob_match, shell_quote
from trio_pty.posix.beneath import EscapesRoot, open_beneath, real_path

__all__ = [
    "ACTIONS",
    "PERMISSIONS",
    "Action",
    "AllowAll",
    "AuthorizationRequest",
    "Authorizer",
    "Decision",
    "Permission",
    "Rule",
    "RulesAuthorizer",
    "WorkdirHandle",
    "authorize_spawn",
    "authorize_write",
    "directory_request",
    "display_form",
    "open_workdir",
    "shell_request",
    "shell_resource",
    "write_request",
    "write_resource",
]

Permission: TypeAlias = Literal["shell", "external_directory", "write"]
Action: TypeAlias = Literal["allow", "deny", "ask"]
Rule: TypeAlias = tuple[str, Action]

PERMISSIONS: Final[tuple[Permission, ...]] = get_args(Permission)
ACTIONS: Final[tuple[Action, ...]] = get_args(Action)
ALL_PERMISSIONS: Final = "*"
STDIN_MARKER: Final = "<stdin>"
WORKDIR_CHANGED: Final = "Working directory changed during permission approval: {}"

_REASON_RESOURCE_CHARS: Final = 200


@attrs.frozen(kw_only=True)
class AuthorizationRequest:
    """One question for an authorizer: may `owner` use `permission` on `resource`?"""

    permission: Permission = attrs.field(validator=attrs.validators.in_(PERMISSIONS))
    resource: str
    owner: str
    session_id: str | None = None


class Authorizer(Protocol):
    """Decides requests. Async because an embedding app may ask a human and wait."""

    async def authorize(self, request: AuthorizationRequest) -> None:
        """Return to allow; raise `PermissionDenied` to refuse."""
        ...


class AllowAll:
    """The default authorizer: the caller is trusted (a local, token-authenticated client)."""

    async def authorize(self, request: AuthorizationRequest) -> None:
        """Allow everything."""


# -- resources ---------------------------------------------------------------------------------


def shell_resource(command: str, args: Sequence[str]) -> str:
    """The command line as an authorizer sees it: every word single-quoted."""
    return shell_quote([command, *args])


def write_resource(command: str, data: str | bytes) -> str:
    """`'command' <stdin> 'input'`: what a write sends to which program.

    Pass the bytes after escape decoding (what really reaches the terminal), so a rule
    cannot be dodged by spelling input with escapes; bytes that are not UTF-8 show as
    `\\xNN`.
    """
    text = data.decode("utf-8", "backslashreplace") if isinstance(data, bytes) else data
    return f"{shell_quote([command])} {STDIN_MARKER} {shell_quote([text])}"


def shell_request(
    command: str, args: Sequence[str], *, owner: str, session_id: str | None = None
) -> AuthorizationRequest:
    """The `shell` request for a spawn."""
    return AuthorizationRequest(
        permission="shell",
        resource=shell_resource(command, args),
        owner=owner,
        session_id=session_id,
    )


def directory_request(
    path: str, *, owner: str, session_id: str | None = None
) -> AuthorizationRequest:
    """The `external_directory` request for a resolved workdir outside the root."""
    return AuthorizationRequest(
        permission="external_directory", resource=path, owner=owner, session_id=session_id
    )


def write_request(
    command: str, data: str | bytes, *, owner: str, session_id: str | None
) -> AuthorizationRequest:
    """The `write` request for input sent to a session running `command`."""
    return AuthorizationRequest(
        permission="write",
        resource=write_resource(command, data),
        owner=owner,
        session_id=session_id,
    )


# -- rules -------------------------------------------------------------------------------------

_SAFE_WORD_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-"
)


def _parse_quoted(text: str) -> list[tuple[bool, str]] | None:
    """Split `shell_quote` output (plus bare tokens like `<stdin>`) into (quoted, word) pairs.

    Returns None when the text is not in that exact form (single spaces between tokens,
    quoted words as `shell_quote` writes them).
    """
    tokens: list[tuple[bool, str]] = []
    position = 0
    length = len(text)
    while True:
        if position < length and text[position] == "'":
            parts: list[str] = []
            while True:
                close = text.find("'", position + 1)
                if close < 0:
                    return None
                parts.append(text[position + 1 : close])
                position = close + 1
                if text.startswith("\\''", position):
                    parts.append("'")
                    position += 2
                    continue
                break
            tokens.append((True, "".join(parts)))
        else:
            space = text.find(" ", position)
            end = length if space < 0 else space
            bare = text[position:end]
            if not bare or "'" in bare:
                return None
            tokens.append((False, bare))
            position = end
        if position == length:
            return tokens
        if text[position] != " ":
            return None
        position += 1


def _display_word(word: str) -> str:
    if word and _SAFE_WORD_CHARS.issuperset(word):
        return word
    return shell_quote([word])


def display_form(text: str) -> str:
    """Rewrite a quoted command line with quotes only where needed: `'npm' 'run' 'dev'`
    becomes `npm run dev`, `'sh' '-c' 'make test'` becomes `sh -c 'make test'`.

    Rules are written and matched in this form, so people write patterns the way they type
    commands, and word boundaries stay unambiguous (a word with a space is still quoted).
    Text that is not a quoted command line (a path, a hand-written pattern) comes back as is.
    """
    tokens = _parse_quoted(text)
    if tokens is None:
        return text
    return " ".join(_display_word(word) if quoted else word for quoted, word in tokens)


@attrs.frozen
class Decision:
    """What the rules say about one request, and which rule said it (None: nothing matched)."""

    action: Action
    rule: Rule | None
    scope: str | None


RulesConfig: TypeAlias = (
    Sequence[Rule] | Mapping[str, Sequence[Rule] | Mapping[str, Action] | Action]
)

# Resources of these permissions are quoted command lines; the others are taken verbatim.
_COMMAND_LINE_SCOPES: Final = frozenset({"shell", "write"})


def _action(value: object, where: str) -> Action:
    for action in ACTIONS:
        if value == action:
            return action
    raise ValueError(f"{where}: action must be one of {', '.join(ACTIONS)}, got {value!r}")


def _rule_list(value: object, where: str, *, command_lines: bool) -> tuple[Rule, ...]:
    """Accept the three spellings of a rule list (see RulesAuthorizer)."""
    if isinstance(value, str):
        return (("*", _action(value, where)),)
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, Sequence):
        items = []
        for index, pair in enumerate(value):
            if not (isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2):
                raise ValueError(f"{where}[{index}]: a rule is a [pattern, action] pair")
            items.append((pair[0], pair[1]))
    else:
        raise ValueError(f"{where}: expected an action, a table or a list of rules")
    rules: list[Rule] = []
    for pattern, action in items:
        if not isinstance(pattern, str):
            raise ValueError(f"{where}: patterns must be strings, got {pattern!r}")
        if command_lines:
            pattern = display_form(pattern)
        rules.append((pattern, _action(action, f"{where}[{pattern!r}]")))
    return tuple(rules)


class RulesAuthorizer:
    """Ordered glob rules; the last matching rule wins; no match and `ask` both deny.

    `rules` is either a list of `(pattern, action)` pairs that applies to every permission,
    or a mapping from a permission (or `"*"` for all of them) to its rules, each given as a
    list of pairs, a pattern -> action table (in document order), or one action as
    shorthand for `[("*", action)]`. For a request, the `"*"` rules come first and the
    permission's own rules after them, so the specific rules win. This is what TOML
    expresses directly:

        [permissions]
        write = "allow"
        [permissions.shell]
        "*" = "deny"
        "npm run dev" = "allow"
        "cargo *" = "allow"

    Patterns use `*` (any text, spaces and `/` included) and `?` (one character), matched
    against the whole resource in `display_form`, case-sensitively. `ask` denies because no
    one can be asked here; an embedding app that can ask a person wraps `decide`.
    """

    def __init__(self, rules: RulesConfig) -> None:
        self._rules: dict[str, tuple[Rule, ...]] = {}
        if isinstance(rules, Mapping):
            for scope, value in rules.items():
                if scope != ALL_PERMISSIONS and scope not in PERMISSIONS:
                    raise ValueError(
                        f"unknown permission {scope!r}: expected one of "
                        f"{', '.join((ALL_PERMISSIONS, *PERMISSIONS))}"
                    )
                self._rules[scope] = _rule_list(
                    value, scope, command_lines=scope in _COMMAND_LINE_SCOPES
                )
        else:
            self._rules[ALL_PERMISSIONS] = _rule_list(rules, "rules", command_lines=False)

    @classmethod
    def from_config(cls, config: object) -> RulesAuthorizer:
        """Build from loosely typed data (a parsed TOML or JSON table); ValueError if malformed."""
        if not isinstance(config, Mapping | list | tuple):
            raise ValueError("authorization rules must be a table or a list of rules")
        return cls(config)  # checked field by field in __init__

    @property
    def rules(self) -> Mapping[str, tuple[Rule, ...]]:
        """The normalized rules by scope, for display."""
        return dict(self._rules)

    def decide(self, request: AuthorizationRequest) -> Decision:
        """The action of the last rule that matches, or deny when none does."""
        target = request.resource
        if request.permission in _COMMAND_LINE_SCOPES:
            target = display_form(target)
        decision = Decision("deny", None, None)
        for scope in (ALL_PERMISSIONS, request.permission):
            for rule in self._rules.get(scope, ()):
                if glob_match(rule[0], target):
                    decision = Decision(rule[1], rule, scope)
        return decision

    async def authorize(self, request: AuthorizationRequest) -> None:
        """Allow or raise PermissionDenied saying which rule decided."""
        decision = self.decide(request)
        if decision.action == "allow":
            return
        if decision.rule is None:
            reason = "no rule matches"
        elif decision.action == "ask":
            reason = f"rule {decision.rule[0]!r} says ask, and no one can be asked"
        else:
            reason = f"denied by rule {decision.rule[0]!r}"
        raise PermissionDenied(request.permission, _abbreviate(request.resource), reason)


def _abbreviate(resource: str) -> str:
    """Keep error messages bounded: a write resource can carry 64 KiB of input."""
    if len(resource) <= _REASON_RESOURCE_CHARS:
        return resource
    hidden = len(resource) - _REASON_RESOURCE_CHARS
    return f"{resource[:_REASON_RESOURCE_CHARS]}… ({hidden} more characters)"


# -- the workdir handle ------------------------------------------------------------------------

# Outside the root a path may follow symlinks: wherever it leads, `external_directory` is
# asked about the directory the descriptor really is.
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_ROOT_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _inside(path: str, root: str) -> bool:
    """Compare whole path components: /rootx is not inside /root."""
    return os.path.commonpath([path, root]) == root


def _below(path: str, root: str) -> str | None:
    """`path` relative to `root` when it is spelled below it (not yet resolved), else None."""
    if path == root:
        return "."
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


class WorkdirHandle:
    """An open descriptor on the working directory, pinned before authorization.

    Close it on every path (it is a context manager; `close` is idempotent). The spawn code
    starts the child with `cwd=f"/proc/self/fd/{handle.fd}"` so that the child lands in
    this directory, not in whatever the path names by then.
    """

    def __init__(self, *, requested: str, path: str, root: str, fd: int, inside_root: bool) -> None:
        self._requested = requested
        self._fd = fd
        self.path = path
        """Where the opened directory really is (the kernel's name for the descriptor)."""
        self.root = root
        """The resolved root it was compared with."""
        self.inside_root = inside_root
        """Whether the directory was reached beneath the root (else `external_directory`
        applies): decided from the descriptor, never from the name asked for."""
        self._identity = _identity(os.fstat(fd))

    @property
    def fd(self) -> int:
        """The open descriptor; an error once closed, so a stale number is never used."""
        if self._fd < 0:
            raise ValueError("the workdir handle is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def verify_unchanged(self) -> None:
        """Refuse when the path no longer leads to the opened directory, the same way.

        After authorization: resolving the requested path again (race-free, as before) must
        give the same directory (one inode on one device), at the same real path, equally
        inside or outside the root, and the descriptor must still be at that path.
        """
        fd = self.fd
        try:
            with _open_handle(self._requested, self.root) as again:
                same = (
                    again.path == self.path
                    and again.inside_root == self.inside_root
                    and again._identity == self._identity
                    and real_path(fd) == self.path
                    and _identity(os.fstat(fd)) == self._identity
                )
        except OSError as exc:
            if exc.errno in OUT_OF_RESOURCES:
                raise  # not a change: the spawn fails for the machine's reason
            same = False
        except (ValueError, InvalidInput):
            same = False
        if not same:
            raise PermissionDenied(
                "external_directory", self.path, message=WORKDIR_CHANGED.format(self.path)
            )

    def close(self) -> None:
        """Close the descriptor; calling it again does nothing."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> WorkdirHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # A leaked descriptor is a bug; say so the way unclosed files do, then clean up.
        if getattr(self, "_fd", -1) >= 0:
            self.close()
            warnings.warn(f"unclosed workdir handle {self.path!r}", ResourceWarning, stacklevel=1)

    def __repr__(self) -> str:
        state = "closed" if self._fd < 0 else f"fd={self._fd}"
        return f"<WorkdirHandle {self.path!r} {state} inside_root={self.inside_root}>"


def open_workdir(path: str | None, *, root: str) -> WorkdirHandle:
    """Open `path` (relative to `root`; None means `root`) as a directory, race-free.

    A path spelled below the root is resolved beneath the root's descriptor (openat2
    RESOLVE_BENEATH, or an O_NOFOLLOW walk): no component swapped for a symlink meanwhile can
    lead it out. A path that leaves the root (spelled outside it, an absolute symlink, `..`
    above the root) is opened normally and is *outside* unless the directory it reached is
    found again beneath the root as the same inode. `path` of the handle is where the
    descriptor really is.

    A missing, non-directory or unopenable path is `InvalidInput("workdir", ...)` naming the
    OS reason and the path; running out of descriptors or memory is not the caller's fault
    and stays an OSError.
    """
    root_real = os.path.realpath(root)
    requested = root_real if path is None else os.path.join(root_real, path)
    try:
        return _open_handle(requested, root_real)
    except OSError as exc:
        if exc.errno in OUT_OF_RESOURCES:
            raise  # the machine's trouble, not the caller's input: the spawn reports it
        reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
        raise InvalidInput("workdir", f"{reason}: {_display(requested)}") from None
    except ValueError as exc:  # embedded NUL
        raise InvalidInput("workdir", f"{exc}: {requested!r}") from None


def _display(requested: str) -> str:
    """The path for an error message only (never used to open anything)."""
    try:
        return os.path.realpath(requested)
    except (OSError, ValueError):
        return requested


def _open_handle(requested: str, root: str) -> WorkdirHandle:
    root_fd = os.open(root, _ROOT_FLAGS)
    try:
        fd, beneath = _open_directory(requested, root, root_fd)
        try:
            where = real_path(fd)
            inside = _inside(where, root) and (beneath or _found_beneath(fd, where, root, root_fd))
            return WorkdirHandle(
                requested=requested, path=where, root=root, fd=fd, inside_root=inside
            )
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(root_fd)


def _open_directory(requested: str, root: str, root_fd: int) -> tuple[int, bool]:
    """Open the directory; True when it was reached beneath the root."""
    relative = _below(requested, root)
    if relative is not None:
        try:
            return open_beneath(root_fd, relative), True
        except EscapesRoot:
            pass
    return os.open(requested, _OPEN_FLAGS), False


def _found_beneath(fd: int, where: str, root: str, root_fd: int) -> bool:
    """A directory reached from outside (an absolute link, `..` above the root) counts as
    inside only if its real path, resolved beneath the root, is the very same inode."""
    relative = _below(where, root)
    if relative is None:
        return False
    try:
        again = open_beneath(root_fd, relative)
    except OSError as exc:
        if exc.errno in OUT_OF_RESOURCES:
            raise
        return False
    try:
        return _identity(os.fstat(again)) == _identity(os.fstat(fd))
    finally:
        os.close(again)


# -- the flows ---------------------------------------------------------------------------------


async def authorize_spawn(
    authorizer: Authorizer,
    *,
    command: str,
    args: Sequence[str],
    workdir: WorkdirHandle,
    owner: str,
    session_id: str | None = None,
) -> None:
    """Ask for `shell`, then `external_directory` when outside the root, then re-check.

    The re-check comes last because the questions may take minutes (a person answering);
    after it, spawn in `workdir.fd`, never in `workdir.path`.
    """
    await authorizer.authorize(shell_request(command, args, owner=owner, session_id=session_id))
    if not workdir.inside_root:
        await authorizer.authorize(
            directory_request(workdir.path, owner=owner, session_id=session_id)
        )
    workdir.verify_unchanged()


async def authorize_write(
    authorizer: Authorizer, *, command: str, data: bytes, owner: str, session_id: str
) -> None:
    """Ask for `write`. Afterwards the caller re-checks that the session is still running
    and still the owner's: approval may have taken long enough for it to end."""
    await authorizer.authorize(write_request(command, data, owner=owner, session_id=session_id))
