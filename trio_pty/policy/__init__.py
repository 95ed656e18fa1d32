"""Pure policy decisions: input bounds, escape decoding, the child environment, authorization.

No trio here: these are plain functions and classes that tests drive directly. The only I/O
is the workdir check in `authorize` (plain `os` calls).
"""

from trio_pty.policy import validate
from trio_pty.policy.authorize import (
    AllowAll,
    AuthorizationRequest,
    Authorizer,
    Decision,
    RulesAuthorizer,
    WorkdirHandle,
    authorize_spawn,
    authorize_write,
    open_workdir,
)
from trio_pty.policy.environment import child_environment, deny_rules
from trio_pty.policy.escapes import decode_escapes
from trio_pty.policy.validate import shell_quote

__all__ = [
    "AllowAll",
    "AuthorizationRequest",
    "Authorizer",
    "Decision",
    "RulesAuthorizer",
    "WorkdirHandle",
    "authorize_spawn",
    "authorize_write",
    "child_environment",
    "decode_escapes",
    "deny_rules",
    "open_workdir",
    "shell_quote",
    "validate",
]
