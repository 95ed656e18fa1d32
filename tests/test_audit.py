"""Issue 28, item 4: the audit log.

Through a real server over loopback with a `[[tokens]]` token: a bash session's commands are
each on the record with their exit code, cwd, duration and the token that ran them; a spawn
names the environment's keys, never its values nor any token. A full disk (/dev/full, where
every write fails with ENOSPC) never holds up a session: the entries are dropped, counted,
and one warning says so.
"""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_pty
from trio_pty import Limits
from trio_pty.audit import Audit
from trio_pty.client.client import connect
from trio_pty.rpc.config import ConfigError, ServeFlags, parse_config
from trio_pty.server.serve import ServeSettings, compose, serve
from trio_pty.server.server import ServerOptions, open_server
from trio_pty.tenants import Tenant
from trio_pty.wire import SpawnParams

from .helpers import poll_until
from .rpc_support import open_ws, rpc
from .test_security_scope import CI, TOKEN, bearer, scoped_tokens

SECRET = "planted-env-value-4f1c9a"


def entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def commands_in(path: Path) -> list[dict[str, Any]]:
    return [entry for entry in entries(path) if entry["event"] == "command"]


async def test_twenty_commands_are_each_on_the_record_with_the_token_that_ran_them(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.jsonl"
    options = ServerOptions(
        token=TOKEN,
        port=0,
        scoped_tokens=scoped_tokens([{"name": "ci", "env": "CI_TOKEN", "owners": ["ci-*"]}]),
    )
    # Exit codes 0..4 in turn, a cd every fifth command, one sleep for a duration to see.
    work = tmp_path / "work"
    work.mkdir()
    planned: list[tuple[str, int, str]] = []
    cwd = str(tmp_path)
    for number in range(20):
        if number % 5 == 4:
            cwd = str(work) if cwd == str(tmp_path) else str(tmp_path)
            planned.append((f"cd {cwd}", 0, cwd))
        elif number == 7:
            planned.append(("sleep 0.3", 0, cwd))
        else:
            planned.append((f"(exit {number % 5})", number % 5, cwd))
    with trio.fail_after(60):
        async with (
            trio_pty.open_manager(Limits(), root=str(tmp_path), audit=Audit(log)) as manager,
            open_server(manager, options) as server,
            open_ws(server.url, bearer(CI)) as ws,
        ):
            params = {
                "owner": "ci-audit",
                "description": "audit",
                "shell": "bash",
                "rc": False,
                "workdir": str(tmp_path),
                "env": {"AUDIT_SECRET": SECRET},
            }
            reply = await rpc(ws, "spawn", "pty.spawn_shell", params)
            session_id = reply["result"]["id"]
            for number, (command, code, _) in enumerate(planned):
                run = {"id": session_id, "owner": "ci-audit", "command": command}
                result = (await rpc(ws, number, "pty.run", run))["result"]
                assert (result["reason"], result["exit_code"]) == ("exited", code), result
            await poll_until(lambda: len(commands_in(log)) == 20)
            kill = {"id": session_id, "owner": "ci-audit"}
            assert "result" in await rpc(ws, "kill", "pty.kill", kill)
            await poll_until(lambda: any(e["event"] == "kill" for e in entries(log)))

    recorded = commands_in(log)
    assert [e["command"] for e in recorded] == [command for command, _, _ in planned]
    assert [e["exit_code"] for e in recorded] == [code for _, code, _ in planned]
    assert [e["cwd"] for e in recorded] == [where for _, _, where in planned]
    assert [e["number"] for e in recorded] == list(range(1, 21))
    assert {(e["token"], e["source"], e["owner"], e["id"]) for e in recorded} == {
        ("ci", "run", "ci-audit", session_id)
    }
    durations = [e["duration_ms"] for e in recorded]
    assert all(0 <= ms < 5000 for ms in durations)
    assert durations[7] >= 300 and durations[7] > max(durations[:7] + durations[8:])

    (spawn,) = [e for e in entries(log) if e["event"] == "spawn"]
    assert (spawn["token"], spawn["owner"], spawn["id"]) == ("ci", "ci-audit", session_id)
    assert spawn["env_keys"] == ["AUDIT_SECRET"] and spawn["workdir"] == str(tmp_path)
    (kill_entry,) = [e for e in entries(log) if e["event"] == "kill"]
    assert kill_entry["token"] == "ci" and kill_entry["status"] in ("exited", "killed")
    text = log.read_text()
    for secret in (SECRET, TOKEN, CI):
        assert secret not in text
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


async def test_a_typed_command_is_on_the_record_under_the_token_that_typed_it(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.jsonl"
    with trio.fail_after(30):
        async with trio_pty.open_manager(Limits(), root=str(tmp_path), audit=Audit(log)) as manager:
            info = await manager.spawn_shell(
                description="typed", shell="bash", rc=False, tenant=Tenant("alice")
            )
            await manager.write(info.id, "(exit 3)\n", tenant=Tenant("bob"))
            await poll_until(lambda: len(commands_in(log)) == 1)
            await manager.kill(info.id)
    (spawn, write, command, kill) = entries(log)
    assert (spawn["token"], write["token"], kill["token"]) == ("alice", "bob", "")
    assert (command["token"], command["source"], command["command"]) == ("bob", "typed", "(exit 3)")
    assert (command["exit_code"], command["cwd"]) == (3, str(tmp_path))


async def test_writes_signals_resizes_deletes_and_drains_are_recorded_without_content(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.jsonl"
    typed = "typed-content-never-logged"
    with trio.fail_after(30):
        async with trio_pty.open_manager(Limits(), audit=Audit(log)) as manager:
            info = await manager.spawn("cat", owner="a", description="audit")
            await manager.write(info.id, typed + "\n", owner="a")
            await manager.resize(info.id, owner="a", rows=30, cols=100)
            await manager.signal(info.id, "INT", owner="a")
            await manager.wait_exit(info.id, owner="a")
            assert await manager.delete_owner("a") == 1
            await manager.drain(60)
    assert [e["event"] for e in entries(log)] == [
        "spawn",
        "write",
        "resize",
        "signal",
        "delete",
        "drain",
    ]
    write, resize, signal, delete, drain = entries(log)[1:]
    assert (write["size"], write["source"], write["token"]) == (len(typed) + 1, "write", "")
    assert (resize["rows"], resize["cols"], signal["signal"]) == (30, 100, "SIGINT")
    assert (delete["owner"], delete["removed"], drain["deadline_s"]) == ("a", 1, 60)
    assert typed not in log.read_text()


async def test_a_full_disk_never_holds_up_a_session_and_the_drops_are_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every write to /dev/full fails with ENOSPC: a session flooding output is read to its
    end all the same, each entry is a counted drop, and one warning says so."""
    audit = Audit("/dev/full")
    caplog.set_level(logging.WARNING, logger="trio_pty.audit")
    flood = 20_000_000
    with trio.fail_after(60):
        async with trio_pty.open_manager(Limits(), audit=audit) as manager:
            info = await manager.spawn(
                "sh", ["-c", f"head -c {flood} /dev/zero"], description="flood"
            )
            cat = await manager.spawn("cat", description="writes")
            for _ in range(100):
                await manager.write(cat.id, "x")
            ended = await manager.wait_exit(info.id)
            assert ended.exit_code == 0 and manager.get(info.id).byte_count == flood
            await poll_until(lambda: audit.dropped == 102)
    assert audit.written == 0
    warnings = [r for r in caplog.records if getattr(r, "event", None) == "audit_dropped"]
    assert len(warnings) == 1 and "No space left on device" in warnings[0].getMessage()


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 16 KiB tmpfs (root only: skipped where mounting is not allowed)."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


async def test_a_small_tmpfs_fills_up_and_sessions_go_on(
    small_tmpfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The log fills a 16 KiB tmpfs while a session floods: the flood is read to its end,
    the writes keep being answered, the entries past the full disk are counted drops (in
    the metrics too), and the lines in the file are whole entries, a torn last one aside."""
    log = small_tmpfs / "audit.jsonl"
    audit = Audit(log)
    caplog.set_level(logging.WARNING, logger="trio_pty.audit")
    flood = 20_000_000
    writes = 400  # about 150 bytes an entry: 60 KB, four times the disk
    with trio.fail_after(60):
        async with (
            trio_pty.open_manager(Limits(), audit=audit) as manager,
            open_server(manager, ServerOptions(token=TOKEN, port=0)) as server,
        ):
            info = await manager.spawn(
                "sh", ["-c", f"head -c {flood} /dev/zero"], description="flood"
            )
            cat = await manager.spawn("cat", description="writes")
            for _ in range(writes):
                await manager.write(cat.id, "x")
            ended = await manager.wait_exit(info.id)
            assert ended.exit_code == 0 and manager.get(info.id).byte_count == flood
            await poll_until(lambda: audit.written + audit.dropped == writes + 2)
            (family,) = [
                f for f in server.metric_families() if f.name == "trio_pty_audit_entries_total"
            ]
            counted = {dict(sample.labels)["outcome"]: sample.value for sample in family.samples}
            assert counted == {"written": audit.written, "dropped": audit.dropped}
    assert audit.written > 50 and audit.dropped > writes / 2
    lines = log.read_bytes().split(b"\n")
    whole = [json.loads(line) for line in lines[:-1]]
    assert len(whole) == audit.written and whole[0]["event"] == "spawn"
    warnings = [r for r in caplog.records if getattr(r, "event", None) == "audit_dropped"]
    assert len(warnings) == 1


async def test_a_full_queue_drops_instead_of_waiting(tmp_path: Path) -> None:
    """Before the writer runs, the queue takes `queue` entries and drops the rest, at once."""
    audit = Audit(tmp_path / "audit.jsonl", queue=3)
    for number in range(10):
        audit.emit("write", size=number)
    assert audit.dropped == 7
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(audit.run)
            await poll_until(lambda: audit.written == 3)
            nursery.cancel_scope.cancel()  # it waits for more
    assert [e["size"] for e in entries(tmp_path / "audit.jsonl")] == [0, 1, 2]
    assert audit.written == 3


def test_serve_takes_the_audit_log_from_the_flag_over_the_file(tmp_path: Path) -> None:
    config = parse_config({"audit_log": str(tmp_path / "file.jsonl")})
    settings = compose(config, ServeFlags(port=0), token=TOKEN, environ={})
    assert settings.audit_log == str(tmp_path / "file.jsonl")
    flags = ServeFlags(port=0, audit_log=str(tmp_path / "flag.jsonl"))
    assert compose(config, flags, token=TOKEN, environ={}).audit_log == flags.audit_log
    assert stat.S_IMODE(os.stat(tmp_path / "flag.jsonl").st_mode) == 0o600
    with pytest.raises(ConfigError, match=r"audit log .*missing"):
        compose(
            config, ServeFlags(audit_log=str(tmp_path / "missing" / "a")), token=TOKEN, environ={}
        )


async def test_serve_writes_the_audit_log_it_is_given(tmp_path: Path) -> None:
    """`serve` with `audit_log` (what --audit-log composes to) records a spawn over the
    wire, by the server's own token (`server`), and the file is complete once it returns."""
    log = tmp_path / "audit.jsonl"
    fire = trio.Event()

    async def trigger(
        request_shutdown: Callable[[str], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        await fire.wait()
        request_shutdown("test over")

    out = io.StringIO()
    settings = ServeSettings(
        server=ServerOptions(token=TOKEN, port=0), audit_log=str(log), limits=Limits()
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(serve, settings, shutdown_trigger=trigger, out=out))
            while not out.getvalue().endswith("\n"):  # noqa: ASYNC110 - the URL line
                await trio.sleep(0.01)
            async with connect(out.getvalue().strip(), TOKEN) as client:
                spawn = SpawnParams(command="true", args=["--x"], description="audited")
                started = await client.request(spawn)
            fire.set()
    (entry,) = entries(log)
    assert (entry["event"], entry["token"], entry["id"]) == ("spawn", "server", started.id)
    assert (entry["command"], entry["args"]) == ("true", ["--x"])
