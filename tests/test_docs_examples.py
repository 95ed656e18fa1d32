"""The examples in the README and docs/ run as written (issue 29: a README block failed as
pasted, and a client example wrote before its program had started).

Every ```python block in README.md and docs/*.md is either a complete program, run here in
its own interpreter (bounded), or starts with a `# fragment` line (a piece of a larger
program: it is only compiled, top-level `await` allowed). The README's CLI block runs
against a real server, line by line, with the interactive lines (`--follow`, `attach`) left
out; the sample config it names starts a real server."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from trio_pty.client.client import connect
from trio_pty.rpc.config import load_config
from trio_pty.wire import ListParams, OwnerDeleteParams

from .rpc_support import ServerProcess, start_server, wait_no_server_processes

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
FRAGMENT = "# fragment"
RUN_SECONDS = 60


def blocks(language: str) -> Iterator[tuple[str, str]]:
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            if match.group(1) == language:
                line = text.count("\n", 0, match.start()) + 1
                yield f"{path.relative_to(ROOT)}:{line}", match.group(2)


PYTHON = dict(blocks("python"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server started on the sample config the README names (`--port 0` wins over
    the file's port)."""
    config = (ROOT / "deploy" / "trio-pty.toml").read_text()
    process = start_server(tmp_path_factory.mktemp("docs"), config=config)
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def cleanup(server: ServerProcess) -> Iterator[None]:
    yield

    async def delete() -> None:
        assert server.token is not None
        with trio.fail_after(15):
            async with connect(server.url, server.token) as client:
                listed = await client.request(ListParams(all_owners=True))
                for owner in {info.owner for info in listed.sessions}:
                    await client.request(OwnerDeleteParams(owner=owner))

    trio.run(delete)
    wait_no_server_processes(server)


def test_the_sample_config_loads() -> None:
    config = load_config(str(ROOT / "deploy" / "trio-pty.toml"))
    assert config.host == "127.0.0.1"


def test_every_python_example_is_complete_or_marked() -> None:
    assert len(PYTHON) >= 5
    for where, code in PYTHON.items():
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if code.startswith(FRAGMENT) else 0
        compile(code, where, "exec", flags=flags)  # a SyntaxError names the block


@pytest.mark.parametrize("where", [w for w, c in PYTHON.items() if not c.startswith(FRAGMENT)])
def test_a_complete_python_example_runs(
    where: str, server: ServerProcess, cleanup: None, tmp_path: Path
) -> None:
    assert server.token is not None
    env = dict(os.environ, TRIO_PTY_URL=server.url, TRIO_PTY_TOKEN=server.token)
    done = subprocess.run(
        [sys.executable, "-c", PYTHON[where]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )
    assert done.returncode == 0, f"{where}:\n{done.stdout}\n{done.stderr}"


def test_the_readme_cli_block_runs_as_pasted(
    server: ServerProcess, cleanup: None, tmp_path: Path
) -> None:
    [block] = [code for _, code in blocks("sh") if code.startswith("export TRIO_PTY_URL=")]
    lines = block.splitlines()[1:]  # the export: this server's URL and token instead
    interactive = [line for line in lines if "--follow" in line or " attach " in line]
    assert len(interactive) == 2, interactive
    script = "\n".join(["set -euo pipefail", *[x for x in lines if x not in interactive]])
    assert server.token is not None
    bindir = str(Path(sys.executable).parent)  # trio-pty, as the venv puts it on PATH
    env = dict(
        os.environ,
        TRIO_PTY_URL=server.url,
        TRIO_PTY_TOKEN=server.token,
        PATH=bindir + os.pathsep + os.environ["PATH"],
    )
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "Serving HTTP" in done.stdout
    assert "42" in done.stdout.split()
