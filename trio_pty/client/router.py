"""Many `trio-pty serve` hosts from one client: the node a session id names, and its URL.

A session lives on the host that started it (docs/deploy.md, "Many hosts"). A server run
with `--node-id NAME` gives its sessions ids `pty_NAME_<8 hex>`; the router turns NAME into
that server's URL, from a dict or a pattern such as
`ws://{node}.trio-pty.tools.svc:8765/rpc`, and sends what concerns every node (`list`,
`delete_owner`) to all of them at once. A node that cannot be reached is reported in
`unreachable`, never silently left out. Placement (which host gets a new session) is the
orchestrator's: connect to its load-balanced address for a spawn.

    router = Router(token, pattern="ws://{node}.trio-pty.tools.svc:8765/rpc",
                    nodes=["trio-pty-0", "trio-pty-1"])
    async with router.connect("pty_trio-pty-1_1a2b3c4d") as client:
        page = await client.request(ReadParams(id="pty_trio-pty-1_1a2b3c4d", owner="chat-1"))
    listing = await router.list(owner="chat-1")
"""

from __future__ import annotations

import builtins
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

import attrs
import trio

from trio_pty.client.client import (
    ConnectionFailed,
    ConnectionLost,
    RpcError,
    TrioPtyClient,
    connect,
)
from trio_pty.model import SessionInfo
from trio_pty.policy.validate import NODE_ID_PATTERN
from trio_pty.wire import ListParams, OwnerDeleteParams

__all__ = ["RoutedDelete", "RoutedList", "Router", "node_of"]

T = TypeVar("T")

# pty_<node>_<8 hex>: a node is a DNS label, which holds no "_".
_NODE_ID: Final = re.compile(rf"pty_({NODE_ID_PATTERN})_[0-9a-f]{{8}}")


def node_of(session_id: str) -> str:
    """The node a host-qualified session id names; ValueError for an id without one."""
    match = _NODE_ID.fullmatch(session_id)
    if match is None:
        raise ValueError(
            f"{session_id!r} names no node: ids are pty_<node>_<8 hex> on servers run "
            "with --node-id"
        )
    return match[1]


@attrs.frozen(kw_only=True)
class RoutedList:
    """`pty.list` on every node: the sessions of those that answered, and for each node
    that did not (could not be reached, or answered with an error) why."""

    sessions: list[SessionInfo]
    unreachable: dict[str, str]


@attrs.frozen(kw_only=True)
class RoutedDelete:
    """`owner.delete` on every node: sessions removed by node, and the nodes that failed."""

    removed: dict[str, int]
    unreachable: dict[str, str]


class Router:
    """Node ids to URLs (`urls`, or a `pattern` with `{node}`), and calls on every node.

    `nodes` are where `list` and `delete_owner` go (with `urls`: its keys by default).
    `timeout` bounds each node's part of a fanned-out call (connecting included); the
    other keywords go to `connect`."""

    def __init__(
        self,
        token: str | None,
        *,
        urls: Mapping[str, str] | None = None,
        pattern: str | None = None,
        nodes: Sequence[str] | None = None,
        timeout: float = 10.0,
        **connect_options: Any,
    ) -> None:
        if (urls is None) == (pattern is None):
            raise ValueError("give urls or pattern (one of them)")
        if pattern is not None and "{node}" not in pattern:
            raise ValueError("the pattern must hold {node}")
        self._token = token
        self._urls = dict(urls) if urls is not None else None
        self._pattern = pattern
        if nodes is None:
            if self._urls is None:
                raise ValueError("with a pattern, name the nodes that list and delete go to")
            nodes = list(self._urls)
        self.nodes = builtins.list(nodes)
        self._timeout = timeout
        self._connect_options = connect_options

    def url_of_node(self, node: str) -> str:
        """The URL of `node`; LookupError for a node missing from `urls`."""
        if self._urls is not None:
            try:
                return self._urls[node]
            except KeyError:
                raise LookupError(f"no URL for node {node!r}") from None
        assert self._pattern is not None
        return self._pattern.replace("{node}", node)

    def url_for(self, session_id: str) -> str:
        """The URL of the server holding `session_id`."""
        return self.url_of_node(node_of(session_id))

    @asynccontextmanager
    async def connect(self, session_id: str) -> AsyncIterator[TrioPtyClient]:
        """The usual client (`trio_pty.client.client.connect`), to the session's node."""
        async with connect(self.url_for(session_id), self._token, **self._connect_options) as c:
            yield c

    async def list(self, *, owner: str | None = None, all_owners: bool = False) -> RoutedList:
        """`pty.list` on every node, concurrently."""
        params = ListParams(owner=owner, all_owners=all_owners)

        async def one(client: TrioPtyClient) -> builtins.list[SessionInfo]:
            return (await client.request(params)).sessions

        answers, failed = await self._each_node(one)
        sessions = [info for node in self.nodes if node in answers for info in answers[node]]
        return RoutedList(sessions=sessions, unreachable=failed)

    async def delete_owner(self, owner: str) -> RoutedDelete:
        """`owner.delete` on every node, concurrently."""

        async def one(client: TrioPtyClient) -> int:
            return (await client.request(OwnerDeleteParams(owner=owner))).removed

        removed, failed = await self._each_node(one)
        return RoutedDelete(removed=removed, unreachable=failed)

    async def _each_node(
        self, call: Callable[[TrioPtyClient], Awaitable[T]]
    ) -> tuple[dict[str, T], dict[str, str]]:
        answers: dict[str, T] = {}
        failed: dict[str, str] = {}

        async def on(node: str) -> None:
            try:
                with trio.fail_after(self._timeout):
                    url = self.url_of_node(node)
                    async with connect(url, self._token, **self._connect_options) as client:
                        answers[node] = await call(client)
            except trio.TooSlowError:
                failed[node] = f"no answer within {self._timeout:g} s"
            except (ConnectionFailed, ConnectionLost, RpcError, LookupError) as exc:
                failed[node] = str(exc)

        async with trio.open_nursery() as nursery:
            for node in self.nodes:
                nursery.start_soon(on, node)
        return answers, failed
