"""Run the scenarios, each in a fresh child process, and collect latest.json.

A fresh process per scenario keeps them from disturbing each other (memory figures, the child
subreaper flag, descriptors, a 512 MB ballast) and makes "the server process's CPU" exactly
the scenario's. After each scenario the runner looks for any process still carrying the run's
tag, wherever it is: one found is a leak, reported as a failed check, then killed by pid.
A new scenario is a module with NAME, TITLE, METHOD and run(ctx) -> Result, listed below.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

from . import procs, report
from .harness import REPO, SCENARIOS, Context, Progress, Result, module

RESULTS_DIR = os.path.join(REPO, "benchmarks", "results")
CHILD_STOP_TIMEOUT = 60.0  # a scenario's teardowns are bounded by close_timeout (27 s)


# ----------------------------------------------------------------------------- machine


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def machine_busy(seconds: float = 1.0) -> float:
    """Fraction of all CPUs busy over `seconds` (run while we do nothing: background load)."""
    busy0, total0 = _cpu_times()
    time.sleep(seconds)
    busy1, total1 = _cpu_times()
    return (busy1 - busy0) / max(1, total1 - total0)


def machine_info() -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = {}
    for package in ("trio", "ptyprocess", "pexpect", "psutil", "matplotlib", "google-re2"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[package] = version(package)
    commit = ""
    with contextlib.suppress(Exception):
        commit = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
        "pid_1": procs.cmdline(1).split(" ")[0],
        "versions": versions,
        "git_commit": commit,
    }


# ----------------------------------------------------------------------------- child


def run_child(name: str, *, quick: bool, out: str) -> int:
    """Inside the child process: run one scenario, write its Result as JSON to `out`."""
    progress = Progress(name)
    ctx = Context(quick=quick, tag=os.environ.get(procs.TAG, "unset"), progress=progress)
    scenario = module(name)
    started = time.perf_counter()
    cpu_started = time.process_time()
    try:
        result = scenario.run(ctx)
    except BaseException as exc:
        result = Result(name, scenario.TITLE, status="error")
        result.notes.append("".join(traceback.format_exception(exc)))
        result.check(f"{name} ran to the end", False, f"{type(exc).__name__}: {exc}")
        if not isinstance(exc, Exception):
            _write(out, result.as_json())
            raise
    payload = result.as_json()
    payload["elapsed_s"] = time.perf_counter() - started
    payload["cpu_s"] = time.process_time() - cpu_started
    _write(out, payload)
    failed = [c for c in result.checks if not c["ok"]]
    progress.done(
        f"{result.status}; {len(result.checks) - len(failed)}/{len(result.checks)} checks ok"
    )
    return 1 if failed or result.status == "error" else 0


def _write(path: str, payload: Any) -> None:
    with open(path, "w") as handle:
        json.dump(_clean(payload), handle, indent=1, sort_keys=False)
        handle.write("\n")


def _clean(value: Any) -> Any:
    """JSON without NaN/inf (null instead)."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


# ----------------------------------------------------------------------------- parent


def _run_scenario(name: str, *, quick: bool, run_id: str) -> dict[str, Any]:
    tag = f"{run_id}/{name}"
    with tempfile.TemporaryDirectory(prefix="ptybench-") as scratch:
        out = os.path.join(scratch, "result.json")
        command = [sys.executable, "-m", "benchmarks", "--child", name, "--child-out", out]
        if quick:
            command.append("--quick")
        busy0 = _cpu_times()
        load0 = os.getloadavg()[0]
        child = subprocess.Popen(command, cwd=REPO, env={**os.environ, procs.TAG: tag})
        try:
            returncode = child.wait()
        except BaseException:
            # Ctrl-C: the child got it too when it came from the terminal; make sure.
            with contextlib.suppress(OSError):
                child.send_signal(signal.SIGINT)
            try:
                child.wait(CHILD_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            _sweep(tag)
            raise
        busy1 = _cpu_times()
        try:
            with open(out) as handle:
                payload: dict[str, Any] = json.load(handle)
        except (OSError, ValueError):
            result = Result(name, module(name).TITLE, status="error")
            result.check(f"{name} ran to the end", False, f"child exited {returncode}, no result")
            payload = result.as_json()
    payload["machine_busy"] = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1])
    payload["loadavg_1min_before"] = load0
    payload["loadavg_1min_after"] = os.getloadavg()[0]
    payload["exit_code"] = returncode
    left = _sweep(tag)
    payload.setdefault("checks", []).append(
        {
            "check": f"no process of the {name} scenario left after it",
            "ok": not left,
            "detail": "; ".join(left[:10]),
        }
    )
    return payload


def _sweep(tag: str) -> list[str]:
    """Find (and kill) every living process that carries `tag`."""
    found = procs.tagged(tag, prefix=True)
    described = [f"{pid} {procs.cmdline(pid)}" for pid in sorted(found)]
    if found:
        procs.kill_and_wait(found)
    return described


def run_all(*, quick: bool, only: list[str], out: str, note: str = "") -> int:
    run_id = f"ptybench-{os.getpid()}-{int(time.time())}"
    print(
        f"benchmarks ({'quick' if quick else 'full'}): measuring background load...",
        file=sys.stderr,
        flush=True,
    )
    meta = machine_info()
    meta["mode"] = "quick" if quick else "full"
    meta["note"] = note
    meta["background_busy_before"] = machine_busy()
    meta["loadavg_before"] = list(os.getloadavg())
    started = time.perf_counter()
    results: dict[str, Any] = {}
    for name in only or list(SCENARIOS):
        results[name] = _run_scenario(name, quick=quick, run_id=run_id)
    meta["duration_s"] = time.perf_counter() - started
    meta["loadavg_after"] = list(os.getloadavg())
    meta["background_busy_after"] = machine_busy()
    payload = {"meta": meta, "scenarios": results}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    _write(out, payload)
    failed = [
        (name, check)
        for name, result in results.items()
        for check in result.get("checks", [])
        if not check["ok"]
    ]
    _print_summary(payload, failed, out)
    return 1 if failed else 0


def _print_summary(payload: dict[str, Any], failed: list[tuple[str, Any]], out: str) -> None:
    print(f"\nresults: {os.path.relpath(out)}", file=sys.stderr)
    for name, result in payload["scenarios"].items():
        for goal in result.get("goals", []):
            met = {True: "met", False: "MISSED", None: "n/a"}[goal["met"]]
            print(f"  [{met:6}] {name}: {goal['goal']} -- {goal['measured']}", file=sys.stderr)
    checks = sum(len(r.get("checks", [])) for r in payload["scenarios"].values())
    print(f"correctness: {checks - len(failed)}/{checks} checks passed", file=sys.stderr)
    for name, check in failed:
        print(f"  FAILED {name}: {check['check']}: {check['detail']}", file=sys.stderr)


def run_profile(name: str, *, sessions: int, quick: bool) -> int:
    """`--profile`: one case of a scenario under cProfile, in this process, tagged like a
    run (anything it leaves is killed by pid and makes it fail)."""
    scenario = module(name) if name in SCENARIOS else None
    if scenario is None or not hasattr(scenario, "profile"):
        print(f"no profile for {name!r}", file=sys.stderr)
        return 2
    tag = f"ptybench-profile-{os.getpid()}-{int(time.time())}"
    ctx = Context(quick=quick, tag=tag, progress=Progress(name))
    out = os.path.join(RESULTS_DIR, f"profile-{name}.prof")
    os.makedirs(RESULTS_DIR, exist_ok=True)
    scenario.profile(ctx, sessions, out)
    left = _sweep(tag)
    for line in left:
        print(f"left behind (killed): {line}", file=sys.stderr)
    return 1 if left else 0


def _sigterm_as_sigint() -> None:
    """SIGTERM gets the Ctrl-C treatment (trio turns SIGINT into KeyboardInterrupt at a safe
    point, then every nursery and teardown runs): forward it to ourselves as SIGINT."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="trio-pty benchmarks (see docs/benchmarks.md)"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes; checks correctness")
    parser.add_argument(
        "--only", default="", help=f"comma-separated scenarios out of: {', '.join(SCENARIOS)}"
    )
    parser.add_argument(
        "--out",
        help="results file (default: results/latest.json, or results/quick.json with --quick)",
    )
    parser.add_argument(
        "--docs",
        action="store_true",
        help="regenerate docs/benchmarks.md and the plot (default: full runs)",
    )
    parser.add_argument("--no-docs", action="store_true", help="do not regenerate the docs")
    parser.add_argument(
        "--note", default="", help="a sentence about the conditions of this run, for the docs"
    )
    parser.add_argument(
        "--profile",
        metavar="SCENARIO",
        help="run one case of SCENARIO under cProfile (memory: tracemalloc) and print where "
        "the time (memory) went (scenarios with a profile: teardown, throughput, reading, rpc, "
        "memory)",
    )
    parser.add_argument(
        "--sessions",
        type=int,
        default=256,
        help="with --profile teardown: N; rpc: reads; reading: searches; memory: idle sessions "
        "(default 256)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _sigterm_as_sigint()
    if args.child:
        return run_child(args.child, quick=args.quick, out=args.child_out)
    if args.profile:
        return run_profile(args.profile, sessions=args.sessions, quick=args.quick)
    only = [name for name in args.only.split(",") if name]
    unknown = [name for name in only if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    default = "quick.json" if args.quick else "latest.json"
    out = os.path.abspath(args.out or os.path.join(RESULTS_DIR, default))
    status = run_all(quick=args.quick, only=only, out=out, note=args.note)
    if (args.docs or not args.quick) and not args.no_docs:
        report.write_docs(out)
    return status
