"""The server under fuzz: small bounds, and nothing but `cat`, `true` and bash may run
(the same in process and as a `trio-pty serve` subprocess)."""

from __future__ import annotations

import json
from typing import Any

import attrs
from hypothesis import settings

from trio_pty import Limits

TOKEN = "fuzz-token-" + "x" * 20
MAX_MESSAGE = 256 * 1024
# Placeholders, replaced before each batch is sent by the owner of that batch and its live
# `cat` session (both ASCII, so the replacement never changes how a frame parses).
FUZZ_OWNER = "@@owner@@"
FUZZ_SESSION = "@@session@@"
FUZZ_SHELL = "@@shell@@"
OTHER_OWNERS = ("default", "fuzz-2")  # shared by all batches; their sessions are killed after each

FUZZ_LIMITS = Limits(
    terminate_grace=0.2,
    close_timeout=5.0,
    io_timeout=3.0,
    notification_timeout=0.5,
    spawn_timeout=5.0,
    default_wait_ms=150,
    max_wait_ms=300,
    max_sessions=12,
    max_sessions_per_owner=4,
    max_write_bytes=8192,
    max_message_bytes=MAX_MESSAGE,
)
RULES: dict[str, Any] = {
    "*": "allow",
    "external_directory": "deny",
    "shell": {"*": "deny", "cat": "allow", "true": "allow", "bash": "allow"},
    "write": {
        "*": "allow",
        "bash <stdin> *": "deny",
        "bash <stdin> true": "allow",
        "bash <stdin> cat": "allow",
    },
}
# The shells' startup file: interactive bash ignores SIGTERM, which would cost each batch a
# grace period; with a trap on it, it ends at once.
BASHRC = "trap exit TERM\n"


def limits_toml(limits: Limits) -> str:
    """The `[limits]` table of a config file for `limits` (the fields not at their default)."""
    default = Limits()
    lines = [
        f"{field.name} = {json.dumps(getattr(limits, field.name))}"
        for field in attrs.fields(Limits)
        if getattr(limits, field.name) != getattr(default, field.name)
    ]
    return "\n".join(["[limits]", *lines])


SERVER_CONFIG = (
    limits_toml(FUZZ_LIMITS)
    + """

[permissions]
"*" = "allow"
external_directory = "deny"

[permissions.shell]
"*" = "deny"
"cat" = "allow"
"true" = "allow"
"bash" = "allow"

[permissions.write]
"*" = "allow"
"bash <stdin> *" = "deny"
"bash <stdin> true" = "allow"
"bash <stdin> cat" = "allow"
"""
)

OPEN_TIMEOUT = 10.0
SETTLE_TIMEOUT = 15.0  # every expected response of one batch (waits are at most 0.3 s)
CLOSE_TIMEOUT = 10.0
GUARD_TIMEOUT = 10.0


def examples(fraction: float) -> int:
    """A share of the profile's example count ("ci": 60, "long": 2000)."""
    return max(3, int(settings().max_examples * fraction))
