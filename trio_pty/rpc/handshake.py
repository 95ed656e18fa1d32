"""Deciding on a WebSocket upgrade request before any JSON is read: Host (against DNS
rebinding), Origin (against cross-site WebSocket hijacking), path and token. Pure functions,
shared by the RPC server and the HTTP front that serves the monitor page."""

from __future__ import annotations

import hmac
import ipaddress
import urllib.parse
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final, TypeVar

import attrs

__all__ = [
    "RPC_PATH",
    "Rejection",
    "acceptable_hosts",
    "check_bearer",
    "check_handshake",
    "format_page_url",
    "format_url",
    "is_loopback",
    "own_origins",
]

T = TypeVar("T")

RPC_PATH: Final = "/rpc"
_LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "[::1]")
_WILDCARDS: Final = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # and the loopback each covers


@attrs.frozen
class Rejection:
    """Why an upgrade request is refused: an HTTP status, a short plain-text reason, and
    which check refused it (`host`, `origin`, `path`, `token`, `busy`; "" for a malformed
    request), as logs and metrics name it."""

    status: int
    reason: str
    kind: str = ""


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_literal(host: str) -> str:
    """How a host appears in a URL or a Host header (IPv6 in brackets)."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def format_url(host: str, port: int, path: str = RPC_PATH, token: str | None = None) -> str:
    url = f"ws://{_host_literal(host)}:{port}{path}"
    if token is not None:
        url += "?" + urllib.parse.urlencode({"token": token})
    return url


def format_page_url(host: str, port: int, token: str | None = None) -> str:
    """The monitor page's URL (`http://HOST:PORT/`, with `?token=` when given)."""
    url = f"http://{_host_literal(host)}:{port}/"
    if token is not None:
        url += "?" + urllib.parse.urlencode({"token": token})
    return url


def own_origins(
    *,
    listening: Iterable[str],
    local_host: str | None,
    port: int,
    bound_host: str,
    allowed: Iterable[str],
) -> frozenset[str]:
    """The origins under which this server itself serves the monitor page: `http://` and an
    address it listens on (`listening`, the listeners' addresses; for a wildcard, the address
    the connection arrived on), with its port. A loopback address it does not hold is not
    its own: another program may listen on `[::1]:PORT` while this one holds 127.0.0.1 only,
    and so `localhost`, which a browser tries on ::1 first, counts only while both loopback
    addresses are this server's. Names the operator gave (`bound_host`, `allowed`) count as
    given, like the Host values they allow.
    """
    held = set(listening)
    addresses = {address for address in held if address not in _WILDCARDS}
    if local_host:
        addresses.add(local_host)
    names = {_host_literal(address) for address in addresses}
    loopbacks = {_WILDCARDS.get(address, address) for address in held}
    if {"127.0.0.1", "::1"} <= loopbacks:
        names.add("localhost")
    if not is_loopback(bound_host) and not _is_ip_literal(bound_host):
        names.add(bound_host)
    hosts = {f"{name}:{port}" for name in names}
    if port == 80:
        hosts |= names
    for entry in allowed:
        hosts.add(entry)
        if not entry.endswith("]") and ":" not in entry:
            hosts.add(f"{entry}:{port}")
    return frozenset(f"http://{host.lower()}" for host in hosts)


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def acceptable_hosts(
    *, bound_host: str, port: int, allowed: Iterable[str], local_host: str | None = None
) -> frozenset[str]:
    """The Host header values that name this server (lower case).

    The loopback names and the bound address with the bound port, the address the client
    actually connected to (an IP literal cannot be rebound), and each explicitly allowed
    host, taken as given and, when it has no port, with the bound port.
    """
    names = {*_LOOPBACK_NAMES, _host_literal(bound_host)}
    if local_host:
        names.add(_host_literal(local_host))
    hosts = {f"{name}:{port}" for name in names}
    if port == 80:
        hosts |= names
    for entry in allowed:
        hosts.add(entry)
        if not entry.endswith("]") and ":" not in entry:
            hosts.add(f"{entry}:{port}")
    return frozenset(host.lower() for host in hosts)


def _tokens_match(candidate: str, token: str) -> bool:
    return hmac.compare_digest(candidate.encode("utf-8"), token.encode("utf-8"))


def _matching(candidates: Sequence[str], tokens: Mapping[str, T]) -> T | None:
    """What the one token all `candidates` are goes with, or None. Every candidate is
    compared with every token, in constant time, so the time taken does not tell which
    token (if any) matched."""
    found: int | None = None
    agree = bool(candidates)
    entries = list(tokens.items())
    for candidate in candidates:
        hits = [
            index for index, (token, _) in enumerate(entries) if _tokens_match(candidate, token)
        ]
        if len(hits) != 1 or (found is not None and hits[0] != found):
            agree = False
        elif found is None:
            found = hits[0]
    if not agree or found is None:
        return None
    return entries[found][1]


def check_handshake(
    *,
    target: str,
    host: str | None,
    headers: Sequence[tuple[bytes, bytes]],
    tokens: Mapping[str, T],
    hosts: Collection[str],
    origins: Collection[str],
    path: str = RPC_PATH,
) -> Rejection | T:
    """Decide on an upgrade request before any JSON is read: a refusal, or what goes with
    the token it presented (`tokens` maps each token to its scope). Pure.

    Order: Host (403), Origin (403), path (404), token (401). `hosts` are lower-case Host
    values (`acceptable_hosts`), `origins` exact Origin strings. The token may come as
    `Authorization: Bearer TOKEN` or `?token=TOKEN`; every token presented must be the same
    one of `tokens` (compared in constant time) and at least one must be present.
    """
    if host is None or host.lower() not in hosts:
        return Rejection(403, "Host not allowed (DNS rebinding defence)", "host")
    origin_values = [value for name, value in headers if name.lower() == b"origin"]
    if origin_values:
        if len(origin_values) > 1:
            return Rejection(403, "more than one Origin header", "origin")
        origin = origin_values[0].decode("latin-1")
        if origin not in origins:
            return Rejection(403, "Origin not allowed", "origin")
    split = urllib.parse.urlsplit(target)
    if split.path != path:
        return Rejection(404, f"no such endpoint (use {path})", "path")
    try:
        query = urllib.parse.parse_qs(split.query, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        return _WRONG_TOKEN
    return check_bearer(headers, tokens, also=query.get("token", []))


_WRONG_TOKEN: Final = Rejection(401, "missing or wrong token", "token")


def check_bearer(
    headers: Sequence[tuple[bytes, bytes]], tokens: Mapping[str, T], *, also: Sequence[str] = ()
) -> Rejection | T:
    """What goes with the token of the `Authorization: Bearer TOKEN` headers (and the
    tokens `also` presented), or 401: every token presented must be the same one of
    `tokens`, compared in constant time, and at least one must be present. Pure."""
    candidates = list(also)
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, credentials = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() != "bearer":
                return _WRONG_TOKEN
            candidates.append(credentials.strip())
    matched = _matching(candidates, tokens)
    if matched is None:
        return _WRONG_TOKEN
    return matched
