"""The teardown's timetable (posix/schedule.py), driven by synthetic scans.

A driver like the keeper's runs rounds on a simulated clock: it waits for the schedule's next
round (and sometimes oversleeps by up to a second: a loaded machine, a clock jump), scans
anew unless the last snapshot will do (the rule both drivers use), and a scan takes a random
time and finds something alive, nothing, a busy group, or cannot read /proc at all. The
schedule's promises hold whatever happens: the hang-up comes first and once, SIGTERM until
`kill_at` and SIGKILL from the first round at or after it (a round is always planned for
`kill_at` at the latest), never SIGKILL before it, done exactly when two scans in a row found
nothing (the second listed after the first finished), ticks doubling from 1 to 64 ms and
reset when the end looks near, and during the grace no scan before its predecessor's duty
allows it.
"""

from __future__ import annotations

import math
import signal
from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from trio_pty.posix import schedule
from trio_pty.posix.schedule import FIRST_TICK, LAST_TICK, Scan, Schedule

TICKS = {FIRST_TICK * 2**k for k in range(7)}
assert max(TICKS) == LAST_TICK


class Finding(NamedTuple):
    alive: bool
    busy: bool
    blind: bool


class Round(NamedTuple):
    finding: Finding
    """What a new scan in this round finds (a reused snapshot shows what it showed)."""
    scan_cost: float
    late: float
    """How long after the planned moment the driver wakes up."""
    look_soon: float | None
    """Before the round, the leader exits this far (as a fraction) into the wait."""


findings = st.one_of(
    st.builds(Finding, alive=st.booleans(), busy=st.just(False), blind=st.just(False)),
    st.builds(Finding, alive=st.just(False), busy=st.just(True), blind=st.just(False)),
    st.builds(Finding, alive=st.booleans(), busy=st.just(False), blind=st.just(True)),
)
lateness = st.one_of(
    st.floats(0, 0.002), st.floats(0, 0.002), st.floats(0, 0.002), st.floats(0.05, 1.0)
)
rounds = st.builds(
    Round,
    finding=findings,
    scan_cost=st.floats(0, 0.04),
    late=lateness,
    look_soon=st.one_of(st.none(), st.none(), st.floats(0, 1)),
)
QUIET = Round(Finding(alive=False, busy=False, blind=False), 0.005, 0.0, None)


class Driver:
    """A lone driver (the keeper's shape) on a simulated clock, checking every decision."""

    def __init__(self, start: float, grace: float) -> None:
        self.now = start
        self.kill_at = start + grace
        self.plan = Schedule(kill_at=self.kill_at)
        self.snapshot: tuple[float, float, Finding] | None = None
        self.ready = -math.inf
        self.quiet_run: list[tuple[float, float]] = []
        """(taken, done) of the scans of the rounds since the last one that was not quiet."""
        self.hung_up = False
        self.sent: list[signal.Signals] = []
        self.last_tick: float | None = None

    def round(self, planned: Round) -> bool:
        plan = self.plan
        if planned.look_soon is not None and plan.wake_at > self.now:
            self.leader_exits(planned.look_soon)
        self.now = max(self.now, plan.wake_at) + planned.late  # wait
        scan = self.scan(planned)
        done = plan.confirm(scan)
        self.check_confirm(scan, done)
        if done:
            return True
        orders = plan.signal(self.now)
        self.check_orders(orders, scan)
        self.now += 0.0001  # signalling takes a moment
        plan.wait(self.now)
        self.check_wait(scan, orders)
        return False

    def leader_exits(self, fraction: float) -> None:
        plan = self.plan
        before = plan.wake_at
        moment = self.now + fraction * (before - self.now)
        moved = plan.look_soon(moment)
        tick = schedule.grid(moment, FIRST_TICK)
        assert moved == (tick < before)
        assert plan.wake_at == (tick if moved else before)
        self.now = moment

    def scan(self, planned: Round) -> Scan:
        plan = self.plan
        last = self.snapshot
        if last is not None and schedule.snapshot_will_do(
            last[0],
            now=self.now,
            not_before=plan.fresh_since,
            throttle=plan.throttled,
            ready=self.ready,
        ):
            taken, done, finding = last
        else:
            if planned.finding.blind:
                self.quiet_run.clear()
                return Scan(-math.inf, -math.inf, alive=planned.finding.alive, blind=True)
            if plan.throttled and last is not None:  # the duty spaces scans in the grace
                assert self.now >= schedule.ready_again(last[0], last[1])
            taken, done, finding = self.now, self.now + planned.scan_cost, planned.finding
            self.snapshot = (taken, done, finding)
            self.ready = schedule.ready_again(taken, done)
            self.now = done
        if finding.alive or finding.busy:
            self.quiet_run.clear()
        else:
            self.quiet_run.append((taken, done))
        return Scan(taken, done, alive=finding.alive, busy=finding.busy)

    def check_confirm(self, scan: Scan, done: bool) -> None:
        if scan.blind:
            expected = self.plan.phase == signal.SIGKILL and not scan.alive
        else:
            # Two scans in a row found nothing: the first of the run finished before the
            # last one's listing started.
            expected = bool(self.quiet_run) and self.quiet_run[0][1] < scan.taken
        assert done == expected, (scan, self.quiet_run)
        assert not done or self.hung_up, "over before the hang-up"

    def check_orders(self, orders: schedule.Orders, scan: Scan) -> None:
        assert orders.hang_up == (not self.hung_up), "the hang-up comes once, first"
        self.hung_up = True
        if orders.signal == signal.SIGKILL or orders.escalated:
            assert self.now >= self.kill_at, "SIGKILL before kill_at"
        if self.now >= self.kill_at:
            assert self.plan.phase == signal.SIGKILL, "a round after kill_at still in grace"
        if orders.signal is not None:
            if signal.SIGKILL in self.sent:
                assert orders.signal == signal.SIGKILL, "SIGTERM after SIGKILL"
            self.sent.append(orders.signal)
        quiet = not (scan.alive or scan.busy or scan.blind)
        if not quiet:
            expected = self.plan.phase
            assert orders.signal == expected, "something alive but nothing sent"

    def check_wait(self, scan: Scan, orders: schedule.Orders) -> None:
        plan = self.plan
        tick = plan.tick
        assert tick in TICKS
        reset = orders.escalated or not (scan.alive or scan.blind)
        if self.last_tick is None or reset:
            assert tick == FIRST_TICK
        else:
            assert tick == min(2 * self.last_tick, LAST_TICK), (tick, self.last_tick)
        self.last_tick = tick
        on_grid = schedule.grid(self.now, tick)
        # (the end of the grace may have passed while the round signalled: then at once)
        assert plan.wake_at >= self.now or plan.wake_at == self.kill_at
        if plan.phase == signal.SIGTERM:
            assert plan.wake_at <= self.kill_at, "no round planned at the end of the grace"
        if plan.phase == signal.SIGTERM and self.kill_at < on_grid:
            assert (plan.wake_at, plan.fresh_since) == (self.kill_at, -math.inf)
        else:
            assert plan.wake_at == plan.fresh_since == on_grid


@settings(max_examples=400, deadline=None)
@given(
    start=st.floats(0, 10_000),
    grace=st.floats(0, 1.0),
    planned=st.lists(rounds, max_size=80),
)
def test_the_schedule_keeps_its_promises_whatever_the_scans_find(
    start: float, grace: float, planned: list[Round]
) -> None:
    driver = Driver(start, grace)
    for one in planned:
        if driver.round(one):
            return
    # Nothing is found any more: the end is confirmed by the next two new scans (during the
    # grace the duty may make the rounds reuse the last snapshot for a while).
    gone = driver.now
    while driver.now < max(gone, driver.kill_at) + 0.1:
        if driver.round(QUIET):
            return
    raise AssertionError("never confirmed after the processes were gone")


def test_the_round_at_the_end_of_the_grace_ends_it_even_when_it_finds_nothing() -> None:
    """The round planned at `kill_at` takes the newest snapshot there is; when that one
    found nothing alive, the grace must end there all the same, or the same round would be
    planned at `kill_at` again and again on that snapshot (see `Schedule.signal`)."""
    kill_at = 0.9996  # before the next millisecond tick
    plan = Schedule(kill_at=kill_at)
    assert not plan.confirm(Scan(0.0, 0.01, alive=True))
    plan.signal(0.01)
    assert not plan.confirm(Scan(0.995, 0.996, alive=False))  # the last one just died
    orders = plan.signal(0.9995)
    assert orders.signal is None  # nothing alive: nothing to send
    assert plan.wait(0.9995) == kill_at and plan.fresh_since == -math.inf
    assert not plan.confirm(Scan(0.995, 0.996, alive=False))  # the kill_at round: same one
    orders = plan.signal(kill_at)
    assert orders.escalated and plan.phase == signal.SIGKILL
    assert plan.wait(kill_at) == plan.fresh_since > kill_at  # the next round scans anew
    assert plan.confirm(Scan(1.001, 1.002, alive=False))


def test_the_duty_holds_a_scan_back_only_during_the_grace() -> None:
    ready = schedule.ready_again(10.0, 10.01)
    assert math.isclose(ready, 10.03)
    will_do = schedule.snapshot_will_do
    assert will_do(10.0, now=10.02, not_before=10.015, throttle=True, ready=ready)
    assert not will_do(10.0, now=10.02, not_before=10.015, throttle=False, ready=ready)
    assert not will_do(10.0, now=10.04, not_before=10.015, throttle=True, ready=ready)
    assert will_do(10.0, now=10.04, not_before=-math.inf, throttle=False, ready=ready)
