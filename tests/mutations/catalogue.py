"""The deliberate bugs, one per promise (docs/guarantees.md names each one's entry).

An entry's `old` text must occur exactly once in its file; keep it small, so that an
unrelated edit nearby does not move it. The tests named are those that must catch the bug:
the harness runs only them.
"""

from __future__ import annotations

from .mutation import Mutation

TEARDOWN = "tests/test_core_teardown.py"
SESSIONS = "tests/test_core_sessions.py"
OWNERS = "tests/test_core_owners.py"
KEEPER = "tests/test_keeper.py"
FAULTS = "tests/test_faults.py"
MODEL = "tests/test_model_stateful.py"
KEEPER_SEQUENCE = "test_the_keepers_teardown_hangs_up_then_terminates_then_kills_at_the_grace"

MUTATIONS: tuple[Mutation, ...] = (
    # ------------------------------------------------------------------ the audit's five
    Mutation(
        name="grace-twice",
        guarantee="a kill of a SIGTERM-ignoring child takes about one terminate_grace",
        path="trio_pty/session.py",
        old="kill_at=stop_at + self.limits.terminate_grace,",
        new="kill_at=stop_at + 2 * self.limits.terminate_grace,",
        tests=(f"{TEARDOWN}::test_kill_of_a_term_ignoring_child_takes_about_the_grace",),
        quick=True,
    ),
    Mutation(
        name="owner-quota-ignores-reservations",
        guarantee="concurrent spawns never overshoot max_sessions_per_owner",
        path="trio_pty/manager.py",
        old="owner_full = len(owned) + self.pending[owner] >= limits.max_sessions_per_owner",
        new="owner_full = len(owned) >= limits.max_sessions_per_owner",
        tests=(
            f"{OWNERS}::test_a_burst_for_one_owner_stops_at_its_quota",
            "tests/test_model_stateful.py::test_manager_model",
        ),
        quick=True,
    ),
    Mutation(
        name="c1-range-narrowed",
        guarantee="clean text holds no C1 control",
        path="trio_pty/output/lines.py",
        old='_C1 = re.compile("[\\x80-\\x9f]+")',
        new='_C1 = re.compile("[\\x80-\\x9e]+")',
        tests=("tests/test_output_lines.py",),
        quick=True,
    ),
    Mutation(
        name="exit-without-drain",
        guarantee="the exit is recorded only after the output is drained",
        path="trio_pty/session.py",
        old="""\
            with trio.move_on_after(self.limits.exit_drain_timeout):
                await lifecycle.wait_drained()
        except trio.Cancelled:""",
        new="""\
        except trio.Cancelled:""",
        tests=(
            f"{SESSIONS}::test_the_exit_is_recorded_only_after_the_output_is_drained",
            f"{SESSIONS}::test_an_exit_that_wakes_with_its_output_waits_for_the_reader",
        ),
        quick=True,
    ),
    Mutation(
        name="evict-the-newest",
        guarantee="a full quota evicts the oldest ended session",
        path="trio_pty/manager.py",
        old="victim = min(ended, key=lambda s: s.created_at)",
        new="victim = max(ended, key=lambda s: s.created_at)",
        tests=(f"{OWNERS}::test_the_oldest_ended_session_is_the_one_evicted",),
    ),
    Mutation(
        name="delete-owner-one-by-one",
        guarantee="delete_owner tears an owner's sessions down concurrently",
        path="trio_pty/manager.py",
        old="""\
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(session.kill)""",
        new="""\
        for session in sessions:
            await session.kill()""",
        tests=(f"{OWNERS}::test_delete_owner_reaps_everything_and_refuses_later_spawns",),
        quick=True,
    ),
    # ------------------------------------------------------------------ teardown
    Mutation(
        name="recycled-leader-pid-searched",
        guarantee="never the wrong process: a reaped leader's recycled pid names a stranger",
        path="trio_pty/teardown.py",
        old="leader=None if recycled else leader.pid,",
        new="leader=leader.pid,",
        tests=(f"{TEARDOWN}::test_a_recycled_leader_pid_is_left_alone",),
    ),
    Mutation(
        name="cancelled-spawn-taken-for-shutdown",
        guarantee="every grace counts from the manager's real shutdown",
        path="trio_pty/lifecycle.py",
        old="if self._under_manager and self._stop_at is None and outside:",
        new="if self._stop_at is None and outside:",
        tests=(f"{TEARDOWN}::test_a_cancelled_spawn_is_not_taken_for_the_managers_shutdown",),
    ),
    Mutation(
        name="grace-from-the-end-of-the-delivery",
        guarantee="every grace counts from the cancel, not from the end of trio's delivery of it",
        path="trio_pty/manager.py",
        old="self._shutting_down_at = trio.current_time() if seen is None else seen",
        new="self._shutting_down_at = trio.current_time()",
        tests=(
            f"{TEARDOWN}::test_the_grace_counts_from_the_cancel_not_from_the_end_of_its_delivery",
        ),
    ),
    Mutation(
        name="driving-not-handed-over",
        guarantee="a teardown outlasting the one that drove the rounds still ends at its grace",
        path="trio_pty/posix/reap.py",
        old="""\
            if self._driver is None:
                self._hand_over()""",
        new="""\
            pass""",
        tests=(
            f"{TEARDOWN}::test_a_kill_outlasting_the_one_driving_the_rounds_still_ends_at_the_grace",
        ),
    ),
    Mutation(
        name="grace-left-open-when-nothing-alive",
        guarantee="a round at the end of the grace that finds nothing alive still ends it",
        path="trio_pty/posix/schedule.py",
        old="escalated = self.phase == signal.SIGTERM and now >= self.kill_at\n",
        new=(
            "escalated = (\n"
            "            self.phase == signal.SIGTERM\n"
            "            and now >= self.kill_at\n"
            "            and self._quiet_since is None\n"
            "        )\n"
        ),
        tests=(
            f"{TEARDOWN}::test_a_round_at_the_end_of_the_grace_that_finds_nothing_alive_still_confirms",
            f"{TEARDOWN}::test_a_close_after_an_exit_that_left_a_stubborn_orphan_takes_one_grace",
            f"{KEEPER}::test_the_keepers_grace_ends_at_kill_at_when_the_round_there_finds_nothing",
        ),
        quick=True,
    ),
    Mutation(
        name="collection-holds-the-shutdown",
        guarantee="a shutdown whose sessions all end on the hangup takes no grace",
        path="trio_pty/manager.py",
        old="await self._none_running.wait()",
        new="await trio.sleep_forever()",
        tests=(f"{TEARDOWN}::test_a_shutdown_whose_sessions_end_on_the_hangup_takes_no_grace",),
    ),
    Mutation(
        name="no-hangup",
        guarantee="teardown starts with a hangup (SIGHUP to the leader and the tty's group)",
        path="trio_pty/posix/schedule.py",
        old="""\
        self._hung_up = True
        return True""",
        new="""\
        self._hung_up = True
        return False""",
        tests=(
            f"{TEARDOWN}::test_killing_interactive_bash_hangs_up_and_it_exits_at_once",
            f"{KEEPER}::{KEEPER_SEQUENCE}",
        ),
    ),
    Mutation(
        name="sigkill-without-grace",
        guarantee="SIGTERM first, SIGKILL only once terminate_grace has passed",
        path="trio_pty/posix/schedule.py",
        old="escalated = self.phase == signal.SIGTERM and now >= self.kill_at\n",
        new="escalated = self.phase == signal.SIGTERM\n",
        tests=(
            f"{SESSIONS}::test_output_printed_while_dying_is_kept",
            f"{TEARDOWN}::test_kill_of_a_term_ignoring_child_takes_about_the_grace",
            f"{KEEPER}::{KEEPER_SEQUENCE}",
        ),
        quick=True,
    ),
    Mutation(
        name="adopted-zombies-not-reaped",
        guarantee="the subreaper reaps the zombies it adopted from a session",
        path="trio_pty/posix/reap.py",
        old="""\
            if not free and entry.key not in _HELD:
                reap(pid)""",
        new="""\
            pass""",
        tests=(f"{FAULTS}::test_a_classic_double_fork_daemon_leaves_no_zombie",),
    ),
    Mutation(
        name="kill-reported-as-exit",
        guarantee="a session's status changes only through one table (a killed one is killed)",
        path="trio_pty/lifecycle.py",
        old='("killing", "exit"): "killing",',
        new='("killing", "exit"): "exited",',
        tests=(
            "tests/test_session_status.py",
            f"{TEARDOWN}::test_kill_of_a_term_ignoring_child_takes_about_the_grace",
        ),
    ),
    Mutation(
        name="timeout-never-fires",
        guarantee="the timeout kills the session and reports timed_out",
        path="trio_pty/session.py",
        old="""\
        if self.status == "running":
            self.timed_out = True""",
        new="""\
        if self.status == "killing":
            self.timed_out = True""",
        tests=(f"{SESSIONS}::test_timeout_kills_and_reports",),
    ),
    # ------------------------------------------------------------------ the crash keeper
    Mutation(
        name="never-escalates",
        guarantee="SIGKILL once the grace has passed, in the manager and after a crash alike",
        path="trio_pty/posix/schedule.py",
        old="self.phase, self._interval = signal.SIGKILL, FIRST_TICK",
        new="self.phase, self._interval = signal.SIGTERM, FIRST_TICK",
        tests=(
            f"{KEEPER}::test_trio_pty_serve_killed_by_sigkill_leaves_nothing",
            f"{KEEPER}::{KEEPER_SEQUENCE}",
            f"{TEARDOWN}::test_kill_of_a_term_ignoring_child_takes_about_the_grace",
        ),
        quick=True,
    ),
    Mutation(
        name="keeper-trusts-a-recycled-pid",
        guarantee="a record naming a live process we did not start leaves it alone",
        path="trio_pty/posix/keeper.py",
        old="if entry is not None and entry.start_time == leader.start_time:",
        new="if entry is not None:",
        tests=(f"{KEEPER}::test_a_record_naming_a_process_we_did_not_start_is_left_alone",),
    ),
    # ------------------------------------------------------------------ spawning and quotas
    Mutation(
        name="manager-cap-ignores-reservations",
        guarantee="concurrent spawns never overshoot max_sessions",
        path="trio_pty/manager.py",
        old="manager_full = len(self._sessions) + self.pending.total() >= limits.max_sessions",
        new="manager_full = len(self._sessions) >= limits.max_sessions",
        tests=(f"{OWNERS}::test_concurrent_spawns_never_overshoot_quotas",),
    ),
    Mutation(
        name="evicts-a-dying-session",
        guarantee="a session still being torn down counts against the quota (never evicted)",
        path="trio_pty/manager.py",
        old="ended = [s for s in candidates if s.finished and s.id in self._sessions]",
        new='ended = [s for s in candidates if s.status != "running" and s.id in self._sessions]',
        tests=(f"{MODEL}::test_sessions_being_torn_down_count_against_the_quota",),
    ),
    Mutation(
        name="another-owner-is-told-apart",
        guarantee="another owner's session is reported exactly like a missing one",
        path="trio_pty/manager.py",
        old="""\
        if session is None or session.owner != owner:
            raise errors.SessionNotFound(str(session_id))""",
        new="""\
        if session is None:
            raise errors.SessionNotFound(str(session_id))
        if session.owner != owner:
            raise errors.PermissionDenied("access", str(session_id), "another owner's")""",
        tests=(f"{OWNERS}::test_another_owner_session_looks_missing",),
    ),
    Mutation(
        name="secrets-inherited",
        guarantee="credential-shaped variables are not inherited",
        path="trio_pty/policy/environment.py",
        old="""\
    "SECRET",
""",
        new="",
        tests=(f"{SESSIONS}::test_environment_is_filtered_and_tagged",),
    ),
    # ------------------------------------------------------------------ output and exit
    Mutation(
        name="exit-event-for-a-kill",
        guarantee="exit events: exactly once, only for natural exits, not for an explicit kill",
        path="trio_pty/session.py",
        old="""\
        if self.status == "exited" and on_exit is not None:
            lifecycle.notification_started()""",
        new="""\
        if on_exit is not None:
            lifecycle.notification_started()""",
        tests=(f"{SESSIONS}::test_exit_events_exactly_once_and_only_when_asked",),
        quick=True,
    ),
    Mutation(
        name="line-numbers-relative",
        guarantee="line numbers are absolute: they do not shift when old output leaves the ring",
        path="trio_pty/output/buffer.py",
        old="lines=[model.Line(number, log.cut(text)) for number, text in found],",
        new="lines=[model.Line(number - log.first_line, log.cut(text)) for number, text in found],",
        tests=("tests/test_output_buffer.py",),
        quick=True,
    ),
    Mutation(
        name="cr-ignores-the-wrap",
        guarantee="a line wider than the window reads as its rows showed it (CR: the row's start)",
        path="trio_pty/output/lines.py",
        old="self.col = self._cursor()[1]",
        new="self.col = 0",
        tests=("tests/test_output_lines.py",),
        quick=True,
    ),
    Mutation(
        name="pending-wrap-ignored",
        guarantee="a CR after a row's last cell returns to that row, not the next (xterm)",
        path="trio_pty/output/lines.py",
        old="cursor = self.col - 1 if self.pending else self.col",
        new="cursor = self.col",
        tests=("tests/test_output_lines.py",),
        quick=True,
    ),
    Mutation(
        name="echo-margin-from-the-prompts-end",
        guarantee="a typed bash command wider than the window is recorded as typed",
        path="trio_pty/shell/history.py",
        old='line_start = low + data.rfind(b"\\n", 0, prompt_end - low) + 1',
        new="line_start = prompt_end",
        tests=("tests/test_shell_history.py",),
        quick=True,
    ),
    Mutation(
        name="search-ignores-its-time-budget",
        guarantee="a search stops after max_search_ms with has_more (RE2 time budget)",
        path="trio_pty/waits.py",
        old="if not (page.has_more and len(lines) < limit and trio.current_time() < deadline):",
        new="if not (page.has_more and len(lines) < limit):",
        tests=("tests/test_output_live.py::test_a_slow_pattern_never_stalls_other_tasks",),
    ),
    # ------------------------------------------------------------------ serving
    Mutation(
        name="origin-matched-by-prefix",
        guarantee="an upgrade from a foreign Origin is refused (cross-site WebSocket hijacking)",
        path="trio_pty/rpc/handshake.py",
        old="if origin not in origins:",
        new="if not any(origin.startswith(allowed) for allowed in origins):",
        tests=("tests/test_rpc_server.py::test_origin_must_be_in_the_allow_list_exactly",),
        quick=True,
    ),
    Mutation(
        name="host-not-checked",
        guarantee="an upgrade whose Host does not name the server is refused (DNS rebinding)",
        path="trio_pty/rpc/handshake.py",
        old="if host is None or host.lower() not in hosts:",
        new="if host is None:",
        tests=("tests/test_rpc_server.py::test_host_must_name_this_server",),
        quick=True,
    ),
    Mutation(
        name="token-prefix-accepted",
        guarantee="the token is compared exactly (in constant time)",
        path="trio_pty/rpc/handshake.py",
        old='return hmac.compare_digest(candidate.encode("utf-8"), token.encode("utf-8"))',
        new="return token.startswith(candidate)",
        tests=("tests/test_rpc_server.py::test_token_is_required_and_compared_exactly",),
        quick=True,
    ),
    Mutation(
        name="send-queue-unbounded",
        guarantee="a slow client only slows itself: its send queue is bounded in characters",
        path="trio_pty/server/websocket.py",
        old="while self._queued_chars and self._queued_chars + size > budget:",
        new="while self._queued_chars and self._queued_chars + size > 64 * budget:",
        tests=(
            "tests/test_rpc_server.py::test_a_stalled_clients_send_queue_is_bounded_in_characters",
        ),
    ),
    Mutation(
        name="unread-dropped-before-slow-heads",
        guarantee="a real client gets a pending slot before slow heads that have sent bytes",
        path="trio_pty/server/http.py",
        old="            lambda entry: entry.heard,\n",
        new="",
        tests=(
            "tests/test_security_http.py::"
            "test_slow_heads_that_sent_bytes_are_dropped_before_an_unread_client",
        ),
    ),
    Mutation(
        name="peer-bound-refuses",
        guarantee="slow heads cannot lock out the clients that share their address",
        path="trio_pty/server/http.py",
        old="""\
            if not self._drop_one(now, peer):
                return None""",
        new="""\
            return None""",
        tests=(
            "tests/test_security_http.py::"
            "test_a_peer_at_its_bound_makes_room_from_its_own_heads_only",
        ),
    ),
    Mutation(
        name="websocket-no-keepalive",
        guarantee="a quiet but live client keeps its connection past the idle timeout",
        path="trio_pty/server/websocket.py",
        old="                nursery.start_soon(self._keep_alive)\n",
        new="",
        tests=(
            "tests/test_security_http.py::"
            "test_a_quiet_live_client_stays_connected_past_the_idle_timeout",
        ),
    ),
    Mutation(
        name="websocket-idle-unbounded",
        guarantee="an upgraded connection that sends nothing does not keep its slot",
        path="trio_pty/server/liveness.py",
        old="budget = self._message_timeout - self._message_waited if busy else self._idle_timeout",
        new='budget = self._message_timeout - self._message_waited if busy else float("inf")',
        tests=(
            "tests/test_security_http.py::test_an_upgraded_connection_that_sends_nothing_is_closed",
        ),
    ),
    Mutation(
        name="pause-timer-emfile-raises",
        guarantee="out of descriptors, a flood is still read whole",
        path="trio_pty/reader.py",
        old="""\
                with contextlib.suppress(OSError):
                    pause = timer.OneShot(delay)""",
        new="""\
                pause = timer.OneShot(delay)""",
        tests=("tests/test_flood_reading.py::test_out_of_descriptors_a_flood_is_still_read_whole",),
    ),
    Mutation(
        name="children-read-oldest-first",
        guarantee="a scan sees a pid hopper's living generation before its zombies",
        path="trio_pty/posix/proc.py",
        old="    for pid in reversed(own_children()):",
        new="    for pid in own_children():",
        tests=(
            "tests/test_core_teardown.py::"
            "test_a_scan_reads_our_newest_child_before_the_older_zombies",
        ),
        quick=True,
    ),
    Mutation(
        name="collapse-while-inserting",
        guarantee="a screen's first snapshot shows what a replay of every retained byte shows",
        path="trio_pty/output/screen.py",
        # Collapse every replay, inserting or not (a short one is fed whole only to save
        # time; collapsing it is equivalent unless insert mode is on).
        old="        if inserting or len(data) - start <= _COLLAPSED_ABOVE:",
        new="        if False:",
        tests=(
            "tests/test_output_screen.py::"
            "test_a_late_start_shows_what_a_replay_from_the_first_byte_shows",
        ),
        quick=True,
    ),
)
