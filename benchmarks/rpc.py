"""Scenario 5: RPC round trip and attach streaming. Pending.

The JSON-RPC server and client (trio_pty/rpc/server.py, client.py) are being written at the
same time as these benchmarks. When they land, this module measures, interleaved:
`pty.read` round trip over loopback against a bare trio-websocket echo server in the same run
(goal: at most 3x the echo), and `pty.attach` streaming rate of a flooding session (goal: at
least 50 MB/s). Until then it reports the goals as pending.
"""

from __future__ import annotations

from .harness import Context, Result

NAME = "rpc"
TITLE = "RPC (pending)"
METHOD = """\
Pending: the JSON-RPC server and client were written at the same time as these benchmarks,
so this scenario is not measured yet. The plan:
`pty.read` round trip of a 500-line page over loopback WebSocket, against a bare
trio-websocket echo of a message of the same size in the same run; and the rate at which
`pty.attach` streams a flooding session's output to a client.
"""


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, status="pending")
    for goal in (
        "pty.read round trip at most 3x a bare trio-websocket echo",
        "pty.attach streams at least 50 MB/s",
    ):
        result.goal(goal, "pending: this scenario is not written yet", None, key="rpc")
    return result
