"""Run mutations: a copy of the repository, a baseline run, then one mutation at a time."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from .mutation import Mutation

REPO = Path(__file__).resolve().parents[2]

# Not copied: version control, caches, the virtualenv (the copy runs on the same one), and
# the hypothesis database (a failing example saved under one mutation would be replayed
# under the next). node_modules is linked instead: large, read-only, and tests need it.
_NOT_COPIED = (
    ".git",
    ".venv",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "*.egg-info",
    "node_modules",
)
_LINKED = ("tests/node/node_modules",)


@attrs.frozen
class Outcome:
    mutation: Mutation | None
    """None for the baseline run."""
    verdict: str
    """caught, SURVIVED (every test passed), ERROR (pytest could not run the tests, e.g. a
    collection error) or TIMEOUT."""
    seconds: float
    detail: str
    """The first failure pytest reported (what caught it), or why it is not a verdict."""

    @property
    def caught(self) -> bool:
        return self.verdict == "caught"


def make_copy(scratch: Path) -> Path:
    """A copy of the working tree (uncommitted changes included) under `scratch`."""
    copy = scratch / "repo"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(*_NOT_COPIED), symlinks=True)
    for relative in _LINKED:
        source = REPO / relative
        if source.exists():
            (copy / relative).symlink_to(source, target_is_directory=True)
    return copy


def environment(copy: Path, pycache: Path) -> dict[str, str]:
    """The copy first on the import path of pytest and of every Python it starts (servers,
    keepers, CLI runs), a byte-code cache of the run's own (see `forget_bytecode`), and a
    wide terminal, so that pytest's summary line keeps the assertion's message."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env["COLUMNS"] = "400"
    return env


def forget_bytecode(copy: Path, env: dict[str, str]) -> None:
    """Drop the copy's compiled files (the libraries' stay): a byte-code file is trusted
    when the source's size and mtime (in whole seconds) match, which a mutation that keeps
    the size, written within the same second, would fool."""
    pycache = Path(env["PYTHONPYCACHEPREFIX"])
    shutil.rmtree(pycache / copy.resolve().relative_to(copy.resolve().anchor), ignore_errors=True)
    # The keeper runs with -E (no PYTHONPYCACHEPREFIX): its byte code lands in the tree.
    for cache in copy.glob("trio_pty/**/__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


def check_imports(copy: Path, env: dict[str, str]) -> None:
    """Fail unless pytest in the copy imports the copy's package and tests."""
    probe = "import tests, trio_pty; print(trio_pty.__file__); print(tests.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for line in done.stdout.split():
        if not Path(line).resolve().is_relative_to(copy.resolve()):
            raise RuntimeError(f"the copy imports {line}, not its own code: {done.stdout}")


def run_tests(
    copy: Path, tests: Sequence[str], env: dict[str, str], *, timeout: float
) -> tuple[str, float, str]:
    """Run pytest on `tests` in the copy, stopping at the first failure: (verdict, seconds,
    detail). pytest runs in a process group of its own, ended as a whole on a timeout."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-n",
        "0",
        "-p",
        "no:cacheprovider",
        *tests,
    ]
    started = time.monotonic()
    with subprocess.Popen(
        command,
        cwd=copy,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            return "TIMEOUT", time.monotonic() - started, f"no verdict within {timeout:g} s"
    seconds = time.monotonic() - started
    if process.returncode == 0:
        return "SURVIVED", seconds, "every test passed"
    if process.returncode == 1:
        return "caught", seconds, _first_failure(output)
    tail = " / ".join(output.strip().splitlines()[-3:])
    return "ERROR", seconds, f"pytest exited {process.returncode}: {tail}"


def _first_failure(output: str) -> str:
    """The first FAILED line of pytest's short test summary, else its first ERROR line (an
    error at a test's teardown is listed before the failure of the test itself). Only the
    summary counts: captured log lines can start with "ERROR" too."""
    _, marker, summary = output.partition("short test summary info")
    lines = summary.splitlines() if marker else []
    for prefix in ("FAILED ", "ERROR "):
        for line in lines:
            if line.startswith(prefix):
                return line
    return "(no summary line)"


def baseline(copy: Path, mutations: Iterable[Mutation], env: dict[str, str]) -> Outcome:
    """Every chosen test on the unmutated copy: they must pass, or no verdict means much."""
    tests = sorted({test for mutation in mutations for test in mutation.tests})
    verdict, seconds, detail = run_tests(copy, tests, env, timeout=1800)
    return Outcome(None, "passed" if verdict == "SURVIVED" else "FAILED", seconds, detail)


def run_one(copy: Path, mutation: Mutation, env: dict[str, str], *, timeout: float) -> Outcome:
    """Apply `mutation` to the copy, run its tests, and put the file back."""
    path = copy / mutation.path
    original = path.read_text()
    path.write_text(mutation.apply(original))
    forget_bytecode(copy, env)
    try:
        verdict, seconds, detail = run_tests(copy, mutation.tests, env, timeout=timeout)
    finally:
        path.write_text(original)
        forget_bytecode(copy, env)
        shutil.rmtree(copy / ".hypothesis", ignore_errors=True)
    return Outcome(mutation, verdict, seconds, detail)
