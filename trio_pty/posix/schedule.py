"""The teardown's timetable: what to send when, when to look again, when it is over.

One schedule, two drivers: `reap.Teardown` (trio, in the manager, many teardowns sharing
each scan) and the keeper's `tear_down` (blocking code in a process of its own, after the
manager died). The schedule does no I/O and knows no trio; a driver scans, hands it what
the scan found, and carries out what it decides, round after round:

1. **scan** (the driver): the session's living processes, in a snapshot at least as fresh
   as `fresh_since` (see `snapshot_will_do`);
2. **confirm** (`confirm`): nothing alive in two scans, the second listed after the first
   had finished, and the teardown is over;
3. **signal** (`signal`): the hang-up first (once), then SIGTERM (with SIGCONT) until
   `kill_at`, SIGKILL from then on, whatever that round found;
4. **wait** (`wait`): until the next tick of a shared grid (1 ms doubling to 64 ms, in the
   driver's clock, so that teardowns due together share a scan), or `kill_at` while it is
   ahead; during the grace, scans are spaced by their own cost (`SCAN_DUTY`).

Standard library only: the keeper runs this module without the rest of the package.
"""

from __future__ import annotations

import math
import signal
from typing import Final, NamedTuple

FIRST_TICK: Final = 0.001
LAST_TICK: Final = 0.064
SCAN_DUTY: Final = 2
"""During the grace, after a scan, wait twice its cost before the next one."""


class Scan(NamedTuple):
    """What one round's snapshot showed of the session."""

    taken: float
    """When its listing started (the driver's clock)."""
    done: float
    """When it finished."""
    alive: bool
    """Something of the session is alive in it (or the leader the driver holds runs)."""
    busy: bool = False
    """Nothing seen alive, but a group of the session may still hold something (a pinned
    group not quiet yet): not over, and its groups are signalled again."""
    blind: bool = False
    """/proc could not be read (out of descriptors): only the groups can be signalled, and
    `alive` says whether the leader the driver holds still runs."""


class Orders(NamedTuple):
    """What the driver sends this round, in this order."""

    hang_up: bool
    """SIGHUP (and SIGCONT) to the leader and SIGHUP to the tty's foreground group."""
    signal: signal.Signals | None
    """To whatever the scan found alive and the groups that are safe to name: SIGTERM (then
    SIGCONT) or SIGKILL; None when nothing was alive (the round only waits to confirm)."""
    escalated: bool
    """This round ended the grace."""


def grid(now: float, interval: float) -> float:
    """The next multiple of `interval` after `now`: shared by every teardown on one clock."""
    return (now // interval + 1) * interval


def ready_again(taken: float, done: float) -> float:
    """When a scan that ran from `taken` to `done` allows the next one during the grace."""
    return done + SCAN_DUTY * (done - taken)


def snapshot_will_do(
    taken: float, *, now: float, not_before: float, throttle: bool, ready: float
) -> bool:
    """Whether a snapshot taken at `taken` serves a round that asked for one taken since
    `not_before`: it is that recent, or (`throttle`: the grace) the duty allows no new scan
    before `ready`. A throttled answer delays what a round learns, never misleads it: the
    confirming scan must still be newer than the one that found nothing."""
    return taken >= not_before or (throttle and now < ready)


class Schedule:
    """The state of one teardown's timetable; see the module docstring for the steps.

    `kill_at` is absolute, so that teardowns asked for at the same moment (a manager
    shutting down) send SIGKILL at the same moment however long it took to start them.
    The deadline is the driver's: the schedule never gives up on its own.
    """

    def __init__(self, *, kill_at: float) -> None:
        self.kill_at = kill_at
        self.phase = signal.SIGTERM
        """SIGTERM during the grace, SIGKILL once `kill_at` has passed."""
        self.done = False
        self.wake_at = -math.inf
        """When the next round is due (the first: at once)."""
        self.fresh_since = -math.inf
        """The next round's snapshot must have been taken at or after this."""
        self.tick = FIRST_TICK
        """The spacing of the grid the last `wait` used."""
        self._hung_up = False
        self._interval = FIRST_TICK
        self._quiet_since: float | None = None
        """When the scan that last found nothing alive finished (None: the last found
        something): confirmation needs a scan taken after it."""

    @property
    def throttled(self) -> bool:
        """Scans are spaced by their own cost (`SCAN_DUTY`) during the grace only: once
        SIGKILL is out, every round must see a new scan (deaths are quick)."""
        return self.phase == signal.SIGTERM

    def hang_up(self) -> bool:
        """True the first time only: the driver hangs up now. A driver that can hang up
        before its first scan (the manager holds the leader) calls this; otherwise the first
        round's `signal` orders it."""
        if self._hung_up:
            return False
        self._hung_up = True
        return True

    def confirm(self, scan: Scan) -> bool:
        """Nothing alive, in two scans: one snapshot is not atomic (a child forked just
        before its parent died can be missing from a listing read before the fork, while
        the parent's death shows in a stat line read later), so it takes a second scan whose
        listing started after the first had finished. Or: blind, with SIGKILL sent and
        nothing the driver holds alive (waiting would not show more)."""
        if scan.blind:
            self._quiet_since = None
            self.done = self.phase == signal.SIGKILL and not scan.alive
        elif scan.alive:
            self._quiet_since = None
        else:
            self._interval = FIRST_TICK  # the end is near (or a busy group): look soon
            if scan.busy:
                self._quiet_since = None
            elif self._quiet_since is None:
                self._quiet_since = scan.done
            elif scan.taken > self._quiet_since:  # (strictly: never the same snapshot)
                self.done = True
        if self.done:
            self.wake_at = math.inf
        return self.done

    def signal(self, now: float) -> Orders:
        """What to send after a scan that did not confirm the end.

        The grace ends at `kill_at` whatever the round found, even nothing alive: only a
        round in the grace is planned at `kill_at` on the newest snapshot there is (see
        `wait`), so a grace left open after it would plan the same round again, at a time
        already past, on that same snapshot, and the confirming scan (one newer than the
        snapshot that found nothing) would never come."""
        assert not self.done, "the teardown is over"
        hang_up = self.hang_up()
        escalated = self.phase == signal.SIGTERM and now >= self.kill_at
        if escalated:
            self.phase, self._interval = signal.SIGKILL, FIRST_TICK
        quiet = self._quiet_since is not None  # nothing alive: only wait for the confirmation
        return Orders(hang_up, None if quiet else self.phase, escalated)

    def wait(self, now: float) -> float:
        """Plan the next round and return when it is due: the next multiple of the interval
        (doubling up to LAST_TICK), or `kill_at` while it is ahead. Only the round at
        `kill_at` may use any snapshot (`fresh_since` -inf): its groups reach what was forked
        since, every later round scans anew, and a fresh scan there (10-35 ms at N = 1,024
        in the manager) would hold SIGKILL back."""
        interval = self.tick = self._interval
        self._interval = min(interval * 2, LAST_TICK)
        tick = grid(now, interval)
        if self.phase == signal.SIGTERM and self.kill_at < tick:
            self.wake_at, self.fresh_since = self.kill_at, -math.inf
        else:
            self.wake_at = self.fresh_since = tick
        return self.wake_at

    def look_soon(self, now: float) -> bool:
        """Something the driver holds ended (the leader exited): look again at the next
        millisecond tick rather than at once, so that teardowns whose leaders exit together
        share the scan. True when that moved the next round forward."""
        tick = grid(now, FIRST_TICK)
        if self.done or tick >= self.wake_at:
            return False
        self.wake_at = self.fresh_since = tick
        return True
