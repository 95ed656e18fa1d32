"""Scenario 5: the JSON-RPC server over loopback: the `pty.read` round trip against a bare
trio-websocket echo in the same run, and the rate at which `pty.attach` streams output.

Both servers run as subprocesses (a real `trio-pty serve --port 0`, and a ten-line
trio-websocket echo server), the client in this process, so client and server each have a
core, as they would in use.
"""

from __future__ import annotations

import os
import pstats
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

import trio
from trio_websocket import open_websocket_url

from trio_pty.client.client import TrioPtyClient, connect
from trio_pty.model import Wait
from trio_pty.wire import (
    READ,
    RECEIVE_BUFFER_BYTES,
    AttachParams,
    KillParams,
    ReadParams,
    SpawnParams,
    encode_result,
    parse_server_message,
    unstructure_params,
)

from . import stats
from .harness import Context, Result

NAME = "rpc"
TITLE = "RPC over loopback"
PAGE_LINES = 500
PageFormat = Literal["object", "compact"]
PAGE_FORMS: tuple[PageFormat, ...] = ("object", "compact")
REPLAY_BYTES = 1_000_000  # a full default ring
_UNTIL_EXIT = Wait(exit=True, timeout_ms=30_000)

METHOD = f"""\
A real `trio-pty serve --port 0` runs as a subprocess (default limits), and so does a bare
trio-websocket echo server; the client runs in the benchmark's process. *Round trip*: one
`pty.read` of a {PAGE_LINES}-line page (a session that printed `seq 1 1000`, so every page
is full) through trio-pty's client, in each form (the object form, the wire's default, and
`format: "compact"`: one string per line, which the Python client asks for), each as raw
JSON (`client.call`) against sending a text message of the same size as its response to the
echo server and receiving it back through trio-websocket's own client (both ends reading the
socket in {RECEIVE_BUFFER_BYTES // 1024} KiB pieces, as trio-pty's do), interleaved, one
call at a time. *as ReadPage* is the compact read the way a Python caller gets it
(`client.request(ReadParams(...))`: the page structured into a `ReadPage` of 500 `Line`
records); the goal is judged on the raw round trip. *Attach*: a session floods
`head -c N /dev/zero`; the client attaches from offset 0 at once and counts the bytes of
`pty.output` notifications (base64 in JSON) until the stream ends with the session; the rate
is the bytes delivered over that time.
A client slower than the PTY falls more than the 1 MB ring behind and skips ahead (a chunk
flagged `gap`): the gaps are counted. The PTY itself is the ceiling: the same flood with
nobody attached, timed until the session has exited, is the baseline. *Replay*: attaching
from offset 0 to an ended session whose full 1 MB ring is retained, until the stream ends
(the streaming path alone, with no flood competing for the server's core). The goal is judged
on the live figure.
"""

_ECHO_SERVER = """\
import sys, trio
from functools import partial
from trio_websocket import serve_websocket, ConnectionClosed
async def echo(request):
    ws = await request.accept()
    try:
        while True:
            await ws.send_message(await ws.get_message())
    except ConnectionClosed:
        pass
async def main():
    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(serve_websocket, receive_buffer_size=int(sys.argv[1])),
            echo, "127.0.0.1", 0, None,
        )
        print(server.port, flush=True)
trio.run(main)
"""


def _params(ctx: Context) -> dict[str, Any]:
    return {
        "rounds": ctx.pick(quick=40, full=300),
        "attach_rounds": ctx.pick(quick=2, full=6),
        "flood_bytes": ctx.pick(quick=16_000_000, full=64_000_000),
    }


@asynccontextmanager
async def _subprocess(argv: list[str]) -> AsyncIterator[tuple[trio.Process, str]]:
    """Start a server, yield it with its first stdout line; SIGTERM and reap it after."""
    process = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
    assert process.stdout is not None
    try:
        with trio.fail_after(20):
            first = b""
            while b"\n" not in first:
                data = await process.stdout.receive_some(4096)
                if not data:
                    raise RuntimeError(f"{argv[:3]} exited before printing its address")
                first += data
        yield process, first.split(b"\n", 1)[0].decode()
    finally:
        with trio.CancelScope(shield=True):
            process.terminate()
            with trio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.stdout.aclose()


async def _flood(client: TrioPtyClient, size: int, *, attach: bool) -> dict[str, float]:
    """Flood `size` bytes; attached: the bytes the client received, the time until the
    stream ended, and the gaps (a client slower than the PTY falls more than the ring
    behind and skips ahead, by design); alone: the time until the session exited."""
    started = trio.current_time()
    info = await client.request(_zeros(size, "flood"))
    received = gaps = 0
    if attach:
        async with client.attach(AttachParams(id=info.id, owner="bench", offset=0)) as stream:
            async for chunk in stream:
                received += len(chunk.data)
                gaps += chunk.gap
    else:
        await client.request(ReadParams(id=info.id, owner="bench", wait=_UNTIL_EXIT))
        received = size
    elapsed = trio.current_time() - started
    await client.request(KillParams(id=info.id, owner="bench", cleanup=True))
    return {"seconds": elapsed, "bytes": received, "gaps": gaps}


def _zeros(size: int, description: str) -> SpawnParams:
    return SpawnParams(
        command="head", args=["-c", str(size), "/dev/zero"], owner="bench", description=description
    )


def _codec_ms(page: dict[str, Any], rounds: int = 200) -> dict[str, float]:
    """Median milliseconds to encode the page's response and to parse it back as the client
    does (with its duplicate-name check): JSON work that the echo does not do."""
    text = encode_result(1, page)
    encode, parse = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        encode_result(1, page)
        encoded = time.perf_counter()
        parse_server_message(text)
        encode.append((encoded - started) * 1000)
        parse.append((time.perf_counter() - encoded) * 1000)
    return {"encode": stats.summarize(encode)["median"], "parse": stats.summarize(parse)["median"]}


async def _main(ctx: Context, result: Result) -> None:
    params = result.params
    token = secrets.token_urlsafe(16)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as config:
        config.write("[limits]\nmax_message_bytes = 4194304\n")
    serve = [sys.executable, "-m", "trio_pty", "serve", "--port", "0", "--token", token, "--no-ui"]
    serve.append("--no-state-dir")  # records in the home directory are no benchmark's business
    try:
        async with (
            _subprocess([*serve, "--config", config.name]) as (_, url),
            _subprocess([sys.executable, "-c", _ECHO_SERVER, str(RECEIVE_BUFFER_BYTES)]) as (
                _,
                echo_port,
            ),
            connect(url, token) as client,
            open_websocket_url(
                f"ws://127.0.0.1:{echo_port}/", receive_buffer_size=RECEIVE_BUFFER_BYTES
            ) as echo,
        ):
            info = await client.request(
                SpawnParams(command="seq", args=["1", "1000"], owner="bench", description="page")
            )
            await client.request(ReadParams(id=info.id, owner="bench", wait=_UNTIL_EXIT))
            # The round trip is measured raw: the page as JSON, not structured into records.
            # Each form of the page races an echo of its own size.
            requests = {
                form: unstructure_params(
                    ReadParams(id=info.id, owner="bench", limit=PAGE_LINES, format=form)
                )
                for form in PAGE_FORMS
            }
            pages = {form: await client.call(READ.name, requests[form]) for form in PAGE_FORMS}
            messages = {form: "x" * len(encode_result(1, pages[form])) for form in PAGE_FORMS}
            result.data["page_bytes"] = {form: len(messages[form]) for form in PAGE_FORMS}
            result.data["codec_ms"] = {form: _codec_ms(pages[form]) for form in PAGE_FORMS}

            def read_page(form: PageFormat) -> Callable[[], Awaitable[float]]:
                async def variant() -> float:
                    started = trio.current_time()
                    await client.call(READ.name, requests[form])
                    return trio.current_time() - started

                return variant

            def echo_page(form: PageFormat) -> Callable[[], Awaitable[float]]:
                async def variant() -> float:
                    started = trio.current_time()
                    await echo.send_message(messages[form])
                    await echo.get_message()
                    return trio.current_time() - started

                return variant

            async def read_structured() -> float:
                started = trio.current_time()
                await client.request(ReadParams(id=info.id, owner="bench", limit=PAGE_LINES))
                return trio.current_time() - started

            round_trips: dict[str, Callable[[], Awaitable[float]]] = {}
            for form in PAGE_FORMS:
                round_trips[f"echo ({form} size)"] = echo_page(form)
                round_trips[f"pty.read {form}"] = read_page(form)
            round_trips["pty.read compact as ReadPage"] = read_structured
            for variant in round_trips.values():
                await variant()  # warm up
            trips = await stats.interleave(
                round_trips, params["rounds"], progress=ctx.progress, label="round trip "
            )
            size = params["flood_bytes"]
            retained = await client.request(_zeros(REPLAY_BYTES, "ring"))
            await client.request(ReadParams(id=retained.id, owner="bench", wait=_UNTIL_EXIT))

            async def replay() -> dict[str, float]:
                started, received = trio.current_time(), 0
                replay_from = AttachParams(id=retained.id, owner="bench", offset=0)
                async with client.attach(replay_from) as stream:
                    async for chunk in stream:
                        received += len(chunk.data)
                return {"seconds": trio.current_time() - started, "bytes": received, "gaps": 0}

            floods: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {
                "PTY alone": lambda: _flood(client, size, attach=False),
                "pty.attach": lambda: _flood(client, size, attach=True),
                "pty.attach replay": replay,
            }
            durations = await stats.interleave(
                floods, params["attach_rounds"], progress=ctx.progress, label="attach "
            )
            await client.request(KillParams(id=info.id, owner="bench", cleanup=True))
            await client.request(KillParams(id=retained.id, owner="bench", cleanup=True))
    finally:
        os.unlink(config.name)
    _summarize(result, trips, durations)


def _summarize(
    result: Result,
    trips: dict[str, list[float]],
    floods: dict[str, list[dict[str, float]]],
) -> None:
    table = result.table(
        f"pty.read round trip ({PAGE_LINES} lines)",
        "ms",
        {name: [v * 1000 for v in values] for name, values in trips.items()},
        baseline="echo (object size)",
    )
    sizes, codec = result.data["page_bytes"], result.data["codec_ms"]
    figures = {
        form: (table[f"pty.read {form}"]["median"], table[f"echo ({form} size)"]["median"])
        for form in PAGE_FORMS
    }
    ratios = {form: stats.ratio(ours, echo) for form, (ours, echo) in figures.items()}
    result.data["read_ratio_to_own_size_echo"] = ratios
    compact, compact_echo = figures["compact"]
    structured = table["pty.read compact as ReadPage"]["median"]
    plain, plain_echo = figures["object"]
    result.goal(
        "pty.read round trip at most 3x a bare trio-websocket echo of the same size",
        f"compact form {compact:.2f} ms vs echo {compact_echo:.2f} ms of its "
        f"{sizes['compact'] / 1000:.1f} KB ({ratios['compact']:.2f}x); object form (the "
        f"wire's default) {plain:.2f} ms vs echo {plain_echo:.2f} ms of its "
        f"{sizes['object'] / 1000:.1f} KB ({ratios['object']:.2f}x); the Python client's "
        f"read as a ReadPage {structured:.2f} ms ({stats.ratio(structured, compact_echo):.2f}x)",
        ratios["compact"] <= 3,
        key="rpc_read",
        subject=f"{compact:.2f} ms",
        baseline=f"echo {compact_echo:.2f} ms",
        ratio=ratios["compact"],
    )
    result.notes.append(
        "Of the round trip, JSON alone takes (measured in the benchmark's process; the echo "
        "does none of it): "
        + "; ".join(
            f"{form} form, {sizes[form] / 1000:.1f} KB: {codec[form]['encode']:.2f} ms to "
            f"encode, {codec[form]['parse']:.2f} ms to parse back with the client's "
            "duplicate-name check"
            for form in PAGE_FORMS
        )
        + f". Both ends of the echo read the socket in {RECEIVE_BUFFER_BYTES // 1024} KiB "
        "pieces as trio-pty's do."
    )
    rates = result.table(
        "attach streaming",
        "MB/s",
        {
            name: [sample["bytes"] / sample["seconds"] / 1e6 for sample in samples]
            for name, samples in floods.items()
        },
        baseline="PTY alone",
        better="higher",
    )
    gaps = sum(sample["gaps"] for sample in floods["pty.attach"])
    result.data["attach_gaps"] = gaps
    rate, ceiling = rates["pty.attach"]["median"], rates["PTY alone"]["median"]
    replayed = rates["pty.attach replay"]["median"]
    result.goal(
        "pty.attach streams at least 50 MB/s",
        f"{rate:.1f} MB/s delivered live during a flood (the PTY alone {ceiling:.1f} MB/s, "
        f"{rate / ceiling:.2f}x; {gaps} gaps in {len(floods['pty.attach'])} floods: the server's "
        f"one core reads the flood and encodes the stream); replaying a retained 1 MB ring "
        f"{replayed:.1f} MB/s",
        rate >= 50,
        key="rpc_attach",
        subject=f"{rate:.1f} MB/s",
        baseline=f"PTY alone {ceiling:.1f} MB/s",
        ratio=stats.ratio(rate, ceiling),
    )


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    trio.run(_main, ctx, result)
    return result


def profile(ctx: Context, n: int, out: str) -> None:
    """`python -m benchmarks --profile rpc`: the server's side of `n` compact `pty.read`
    round trips of a 500-line page (`--sessions`, default 256, is the number of reads):
    `trio-pty serve` runs under `python -m cProfile -o OUT` and writes its profile when it
    exits. Prints the client's median round trip, raw and as a ReadPage, then where the
    server's time went."""
    token = secrets.token_urlsafe(16)
    serve = [sys.executable, "-m", "cProfile", "-o", out, "-m", "trio_pty", "serve"]
    serve += ["--port", "0", "--token", token, "--no-ui", "--no-state-dir"]

    async def main() -> None:
        async with _subprocess(serve) as (_, url), connect(url, token) as client:
            info = await client.request(
                SpawnParams(command="seq", args=["1", "1000"], owner="bench", description="page")
            )
            await client.request(ReadParams(id=info.id, owner="bench", wait=_UNTIL_EXIT))
            params = ReadParams(id=info.id, owner="bench", limit=PAGE_LINES, format="compact")
            raw, built = [], []
            for _ in range(n):
                started = trio.current_time()
                await client.call(READ.name, unstructure_params(params))
                called = trio.current_time()
                await client.request(params)
                raw.append((called - started) * 1000)
                built.append((trio.current_time() - called) * 1000)
            await client.request(KillParams(id=info.id, owner="bench", cleanup=True))
        print(
            f"{n} compact reads of {PAGE_LINES} lines: median round trip "
            f"{stats.summarize(raw)['median']:.2f} ms raw (client.call), "
            f"{stats.summarize(built)['median']:.2f} ms as a ReadPage (client.request); "
            f"the server's profile (both kinds of call) written to {out}"
        )

    trio.run(main)
    pstats.Stats(out).sort_stats("tottime").print_stats(25)
