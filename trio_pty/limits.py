"""Every bound and default of trio-pty, in one frozen record.

Every bound on what a client may ask for or make the service hold (sessions, sizes, waits,
connections, queues) is here: a bound that is not here could not be raised by an operator
or checked by a reviewer. Some modules keep internal tuning constants next to the code they
tune: read and write chunk sizes (`reader._READ_SIZE`), poll intervals and scan pacing
(`reader._EIO_POLL`, `posix.schedule.SCAN_DUTY`), how much of a refused HTTP client is drained
(`server.http`), how many problems one error message spells out (`wire.codec`). They limit no
request and change how fast things go, not what is allowed, so they are not settings.
"""

from __future__ import annotations

from typing import Any

import attrs


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"Limits.{attribute.name} must be positive, got {value!r}")


def _positive_or_none(instance: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None:
        _positive(instance, attribute, value)


def _non_negative(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value >= 0:
        raise ValueError(f"Limits.{attribute.name} must not be negative, got {value!r}")


@attrs.frozen(kw_only=True)
class Limits:
    """Bounds for one manager. Durations are seconds unless the name says otherwise."""

    # Sessions and owners.
    max_sessions: int = attrs.field(default=16, validator=_positive)
    max_sessions_per_owner: int = attrs.field(default=5, validator=_positive)
    max_owner_length: int = attrs.field(default=256, validator=_positive)
    deleted_owners_remembered: int = attrs.field(default=10_000, validator=_positive)

    # Time bounds of the session life cycle.
    terminate_grace: float = attrs.field(default=2.0, validator=_non_negative)
    close_timeout: float = attrs.field(default=27.0, validator=_positive)
    spawn_timeout: float = attrs.field(default=5.0, validator=_positive)
    notification_timeout: float = attrs.field(default=5.0, validator=_positive)
    io_timeout: float = attrs.field(default=5.0, validator=_positive)
    exit_drain_timeout: float = attrs.field(default=0.25, validator=_non_negative)
    max_timeout_seconds: float = attrs.field(default=3600.0, validator=_positive)
    orphan_reap_interval: float = attrs.field(default=1.0, validator=_positive)
    # A session with no output, no input and no attached client for this long is torn down
    # (None: never); a spawn's own `idle_timeout` overrides it for that session.
    idle_timeout: float | None = attrs.field(default=None, validator=_positive_or_none)
    # How long a drain (SIGUSR1, server.drain) lets running sessions go on before the
    # shutdown: the deployment files under deploy/ wait this long (tests/test_deploy_files.py).
    drain_timeout: float = attrs.field(default=300.0, validator=_non_negative)

    # Output.
    buffer_size: int = attrs.field(default=1_000_000, validator=_positive)
    default_read_limit: int = attrs.field(default=500, validator=_positive)
    max_read_limit: int = attrs.field(default=2000, validator=_positive)
    max_line_length: int = attrs.field(default=2000, validator=_positive)
    max_escape_length: int = attrs.field(default=4096, validator=_positive)
    max_pattern_length: int = attrs.field(default=500, validator=_positive)
    search_slice_bytes: int = attrs.field(default=65_536, validator=_positive)
    max_search_ms: int = attrs.field(default=200, validator=_positive)
    default_wait_ms: int = attrs.field(default=10_000, validator=_positive)
    max_wait_ms: int = attrs.field(default=30_000, validator=_positive)
    # While a session floods output, its reader pauses this long between reads instead of
    # reading each piece as it comes: the tty hands newline-dense text out a few hundred
    # bytes at a time, and every piece read at once costs a wake-up. The first output after
    # a quiet spell is still read at once, so this bounds the delay added to output that
    # arrives during a flood (0: never pause). Much longer lets the tty fill (it holds about
    # 20 KB, 1-2 ms of newline-dense text), and a full tty stops the writer.
    flood_read_delay: float = attrs.field(default=0.001, validator=_non_negative)
    max_raw_read_bytes: int = attrs.field(default=262_144, validator=_positive)
    max_rows: int = attrs.field(default=1000, validator=_positive)
    max_cols: int = attrs.field(default=1000, validator=_positive)
    command_history: int = attrs.field(default=500, validator=_positive)
    # Screen snapshots: live emulators kept (each holds rows x cols cells, about 80 KB for
    # 80 x 24), and how long one is kept without a snapshot.
    max_live_screens: int = attrs.field(default=16, validator=_positive)
    screen_idle_timeout: float = attrs.field(default=300.0, validator=_positive)
    # Read cursors (`read(since="last")`) kept across all sessions and readers: each session
    # keeps its share (max_read_cursors // max_sessions, at least one).
    max_read_cursors: int = attrs.field(default=4096, validator=_positive)

    # Input.
    max_command_bytes: int = attrs.field(default=4096, validator=_positive)
    max_args: int = attrs.field(default=128, validator=_positive)
    max_arg_bytes: int = attrs.field(default=16_384, validator=_positive)
    max_args_total_bytes: int = attrs.field(default=65_536, validator=_positive)
    max_workdir_bytes: int = attrs.field(default=4096, validator=_positive)
    max_title_length: int = attrs.field(default=500, validator=_positive)
    max_description_length: int = attrs.field(default=2000, validator=_positive)
    max_write_bytes: int = attrs.field(default=65_536, validator=_positive)
    max_env_vars: int = attrs.field(default=256, validator=_positive)
    max_env_name_bytes: int = attrs.field(default=256, validator=_positive)
    max_env_value_bytes: int = attrs.field(default=32_768, validator=_positive)
    max_env_total_bytes: int = attrs.field(default=262_144, validator=_positive)

    # Server.
    max_message_bytes: int = attrs.field(default=1 << 20, validator=_positive)
    max_http_head_bytes: int = attrs.field(default=16_384, validator=_positive)
    max_requests_in_flight: int = attrs.field(default=32, validator=_positive)
    max_connections: int = attrs.field(default=64, validator=_positive)
    # Connections whose request head is still arriving (or being answered), counted apart
    # from `max_connections` so that no unauthenticated peer holds an established slot: in
    # all, and per peer address (an IPv6 peer by its /64). Past either bound a slow head (of
    # that peer, for the second) is dropped for the new connection, which is refused only
    # when none can be (server/http.py, `PendingHeads`).
    max_pending_connections: int = attrs.field(default=256, validator=_positive)
    max_pending_per_peer: int = attrs.field(default=64, validator=_positive)
    # The whole request head must arrive within this long of its first byte (a head trickled
    # a byte at a time is cut off); before the first byte a connection may idle `io_timeout`.
    http_head_timeout: float = attrs.field(default=3.0, validator=_positive)
    attach_chunk_bytes: int = attrs.field(default=262_144, validator=_positive)
    max_send_queue_chars: int = attrs.field(default=1 << 20, validator=_positive)
    # An upgraded (WebSocket) connection that sends nothing, not even the answer to the
    # server's pings (sent after a third of this without a message), for this long is
    # closed; so is one whose frame or fragmented message takes longer than
    # `websocket_message_timeout` to arrive from its first byte (a frame trickled a byte a
    # second). Both count only the time the server waits for the client
    # (server/liveness.py).
    websocket_idle_timeout: float = attrs.field(default=60.0, validator=_positive)
    websocket_message_timeout: float = attrs.field(default=30.0, validator=_positive)
    # Open connections one token may hold (besides `max_connections` in all), so that no
    # token, a read-only one say, can take every slot.
    max_connections_per_token: int = attrs.field(default=32, validator=_positive)
