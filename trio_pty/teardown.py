"""The way out of one session: which processes are its, and the `reap.Teardown` over them.

`posix/reap.py` holds the sequence (hang up, then rounds of scan, signal, wait until
confirmed); this names what one session feeds it: its leader, the groups that are safe to
signal, the tty's foreground group, and its tags. Made once per session, when a kill is
asked for or the teardown starts (an idle session holds none).
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import trio

from .posix import proc, reap
from .posix.child import Child


class SessionTeardown:
    """One session's `reap.Teardown`, and the finders it calls each round."""

    __slots__ = ("_foreground", "_leader", "_table", "_tags", "_way_out")

    def __init__(
        self,
        leader: Child,
        *,
        foreground: Callable[[], int | None],
        table: reap.ProcessTable,
        tags: tuple[str, str],
        kill_at: float,
        deadline: float,
    ) -> None:
        """`foreground()` is the tty's foreground group while the master is open (None
        after); `tags` are the manager's id and the session's."""
        self._leader = leader
        self._foreground = foreground
        self._table = table
        self._tags = tags
        self._way_out = reap.Teardown(
            self.find_processes,
            table,
            kill_at=kill_at,
            deadline=deadline,
            leader=leader,
            groups=self.signalable_groups,
            hang_up=self.hang_up_groups,
            tags=tags,
        )

    @property
    def started(self) -> bool:
        return self._way_out.started

    def hang_up(self) -> None:
        """SIGHUP at once, before the teardown's first scan (see reap.Teardown.hang_up)."""
        self._way_out.hang_up()

    async def run(self) -> reap.TeardownReport:
        """Hang up -> SIGTERM -> grace -> SIGKILL -> reaped, shielded and bounded; once."""
        with trio.CancelScope(shield=True):
            try:
                report = await self._way_out.run()
            except Exception:
                # A bug in teardown must not leave the session running: kill what we
                # certainly own (the leader's group while the leader is unreaped).
                for pgid in self.signalable_groups():
                    proc.signal_group(pgid, signal.SIGKILL)
                raise
        return report

    def find_processes(self, snapshot: proc.Snapshot) -> dict[int, proc.ProcEntry]:
        # The leader's pid names its group and session for as long as they have members,
        # reaped or not; a process with that pid after the reap is another one (a recycled
        # pid, leading a group of its own), and nothing of ours is in its group then.
        leader = self._leader
        recycled = leader.returncode is not None and leader.pid in snapshot.entries
        manager_id, session_id = self._tags
        return snapshot.members(
            leader=None if recycled else leader.pid,
            groups=self.signalable_groups(),
            manager_id=manager_id,
            session_id=session_id,
        )

    def signalable_groups(self) -> list[int]:
        """Groups that cannot have been recycled: the leader's while it is unreaped, the
        tty's current foreground group, and the groups pinned by a zombie of ours."""
        groups = self.hang_up_groups()
        if self._leader.returncode is None:
            # Unreaped, so its pid (= its group id since setsid) cannot have been recycled.
            groups.append(self._leader.pid)
        groups.extend(self._table.pinned_groups(self._tags))
        return groups

    def hang_up_groups(self) -> list[int]:
        """The tty's foreground group, what a hangup signals besides the leader."""
        foreground = self._foreground()
        return [] if foreground is None else [foreground]


def failure(report: reap.TeardownReport, close_timeout: float) -> str | None:
    """What a teardown's report says went wrong (the session's `error`), or None."""
    if report.blind:
        return (
            "could not read /proc to confirm that the session's processes are gone "
            "(out of file descriptors); its process groups were signalled"
        )
    if report.survivors:
        return (
            f"processes still alive after close_timeout ({close_timeout:g} s): {report.survivors}"
        )
    if report.unconfirmed:
        return (
            f"could not confirm within close_timeout ({close_timeout:g} s) "
            f"that process groups {report.unconfirmed} are empty"
        )
    return None
