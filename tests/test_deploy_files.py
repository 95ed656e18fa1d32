"""The deployment files under deploy/ and docs/deploy.md, checked against the code.

Every timing value is compared with the `Limits` defaults, every option of `trio-pty` that a
file or the page uses with `--help`, and every row of the page's "What works today" table with
the code (each row says "available", and its feature must exist). Nothing here needs a
container runtime, a cluster or Nomad; systemd units go through `systemd-analyze verify`,
which works without systemd as PID 1.
"""

from __future__ import annotations

import functools
import http.client
import importlib
import importlib.util
import inspect
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import yaml

from tests.deploy_readers import (
    HclBody,
    ReadError,
    code_spans,
    markdown_section,
    markdown_tables,
    option_values,
    read_containerfile,
    read_hcl,
    read_unit,
    seconds,
    trio_pty_invocations,
    unit_value,
)
from tests.rpc_support import ServerProcess, open_ws, rpc, start_server
from trio_pty import errors
from trio_pty.limits import Limits
from trio_pty.manager import Manager

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOC = (ROOT / "docs" / "deploy.md").read_text()
LIMITS = Limits()

# After the teardown (close_timeout) the process still has to exit; docs/deploy.md asks for
# this much on top in every stop timeout.
MARGIN = 3.0
PORT = 8765
UID = 10001
# The drain deadline the files wait for (the preStop hook); Limits.drain_timeout must equal it.
DRAIN_SECONDS = 300.0
# Where each deployment keeps the token file (Podman mounts a secret under /run/secrets).
TOKEN_FILES = {
    "systemd": "/etc/trio-pty/token",
    "container": "/run/secrets/trio-pty-token",
    "k8s": "/run/trio-pty/token",
    "nomad": "/secrets/token",
}


# Options that docs/deploy.md shows on their own in `code` but that belong to other programs.
OTHER_PROGRAMS_OPTIONS = {"--kill-whom", "--stop-timeout"}


# --------------------------------------------------------------------------------------------
# Reading the files


def systemd_unit(name: str) -> dict[str, list[tuple[str, str]]]:
    return read_unit((DEPLOY / "systemd" / name).read_text())


def service_argv() -> list[str]:
    exec_start = unit_value(systemd_unit("trio-pty.service"), "Service", "ExecStart")
    assert exec_start is not None
    return shlex.split(exec_start)


def kubernetes_objects() -> dict[str, dict[str, Any]]:
    """The manifest's objects by "Kind/name"."""
    text = (DEPLOY / "kubernetes" / "trio-pty.yaml").read_text()
    objects = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    by_name = {f"{doc['kind']}/{doc['metadata']['name']}": doc for doc in objects}
    assert len(by_name) == len(objects), "two objects of the same kind and name"
    return by_name


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = kubernetes_objects()["StatefulSet/trio-pty"]["spec"]["template"]["spec"]
    return spec


def container(spec: dict[str, Any], name: str, key: str = "containers") -> dict[str, Any]:
    (found,) = [item for item in spec[key] if item["name"] == name]
    return dict(found)


def nomad_job() -> HclBody:
    return read_hcl((DEPLOY / "nomad" / "trio-pty.nomad.hcl").read_text())


def nomad_task() -> HclBody:
    return nomad_job().one("job").body.one("group").body.one("task").body


def containerfile_argv() -> tuple[list[str], list[str]]:
    """The final stage's ENTRYPOINT and CMD."""
    instructions = read_containerfile((DEPLOY / "container" / "Containerfile").read_text())
    last = max(item.stage for item in instructions)
    final = {item.keyword: item for item in instructions if item.stage == last}
    return final["ENTRYPOINT"].exec_form(), final["CMD"].exec_form()


def serve_options_of_every_file() -> dict[str, dict[str, list[str]]]:
    """The options each deployment passes to `trio-pty serve`, by file."""
    argv = service_argv()
    assert Path(argv[0]).name == "trio-pty" and argv[1] == "serve", argv
    entrypoint, cmd = containerfile_argv()
    assert entrypoint[-2:] == ["trio-pty", "serve"], entrypoint
    server = container(pod_spec(), "server")
    return {
        "systemd": option_values(argv[2:]),
        "container": option_values(cmd),
        "k8s": option_values(server["args"]),
        "nomad": option_values(nomad_task().one("config").body.attributes["args"]),
    }


def doc_options() -> set[tuple[str, str]]:
    """(subcommand, option) for every option of `trio-pty` that docs/deploy.md shows."""
    found: set[tuple[str, str]] = set()
    for span in code_spans(DOC):
        invocations = list(trio_pty_invocations(span))
        for command, options in invocations:
            found.update((command, option) for option in options)
            found.add((command, ""))
        if not invocations and span.startswith("--"):
            option = re.split(r"[ =]", span, maxsplit=1)[0]
            if option not in OTHER_PROGRAMS_OPTIONS:
                found.add(("serve", option))
    return found


def all_options() -> list[tuple[str, str]]:
    found = doc_options()
    for options in serve_options_of_every_file().values():
        found.update(("serve", option) for option in options)
    return sorted(found)


@functools.cache
def help_text(command: str) -> str:
    """`trio-pty COMMAND --help`, or "" when there is no such command."""
    done = subprocess.run(
        [sys.executable, "-m", "trio_pty", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout if done.returncode == 0 else ""


def has_option(command: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text(command)) is not None


# --------------------------------------------------------------------------------------------
# Options that the files and the page use


@pytest.mark.parametrize(
    ("command", "option"), [(command, option) for command, option in all_options() if option]
)
def test_option_exists(command: str, option: str) -> None:
    assert has_option(command, option), f"`trio-pty {command} --help` has no {option}"


@pytest.mark.parametrize("command", sorted({command for command, _ in all_options()}))
def test_command_exists(command: str) -> None:
    assert help_text(command), f"`trio-pty {command} --help` failed"


def test_every_deployment_reads_the_token_from_a_file() -> None:
    files = serve_options_of_every_file()
    assert set(files) == set(TOKEN_FILES)
    for name, options in files.items():
        assert "--token" not in options, f"{name}: a token in argv is readable by every user"
        assert options["--token-file"] == [TOKEN_FILES[name]], name
    assert TOKEN_FILES["systemd"] in DOC


def test_every_deployment_uses_the_same_port() -> None:
    files = serve_options_of_every_file()
    for name in ("container", "k8s", "nomad"):
        assert files[name]["--port"] == [str(PORT)], name
        assert files[name]["--host"] == ["0.0.0.0"], name  # the container's own namespace
    socket = systemd_unit("trio-pty.socket")
    assert unit_value(socket, "Socket", "ListenStream") == f"127.0.0.1:{PORT}"


# --------------------------------------------------------------------------------------------
# Timing: every stop timeout covers the bounded teardown


def test_limits_premise() -> None:
    """The stop timeouts are derived from close_timeout alone: it bounds every teardown,
    terminate_grace included."""
    assert LIMITS.terminate_grace < LIMITS.close_timeout


def test_systemd_stop_timeout() -> None:
    service = systemd_unit("trio-pty.service")
    assert unit_value(service, "Service", "KillMode") == "mixed"
    assert unit_value(service, "Service", "KillSignal") == "SIGTERM"
    stop = unit_value(service, "Service", "TimeoutStopSec")
    assert stop is not None and seconds(stop) >= LIMITS.close_timeout + MARGIN


def test_nomad_kill_timeout() -> None:
    task = nomad_task().attributes
    assert task["kill_signal"] == "SIGTERM"
    assert seconds(task["kill_timeout"]) >= LIMITS.close_timeout + MARGIN


def prestop_drain_seconds() -> float:
    command = container(pod_spec(), "server")["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["/bin/sh", "-c"], command
    match = re.fullmatch(r"kill -USR1 1; sleep (\d+)", command[2])
    assert match is not None, command
    return float(match[1])


def test_kubernetes_grace_covers_the_drain_and_the_teardown() -> None:
    drain = prestop_drain_seconds()
    assert drain == DRAIN_SECONDS
    grace = pod_spec()["terminationGracePeriodSeconds"]
    assert grace >= drain + LIMITS.close_timeout + MARGIN


def test_the_drain_the_files_wait_for_is_the_default() -> None:
    assert LIMITS.drain_timeout == DRAIN_SECONDS


def test_page_states_the_values_of_the_files() -> None:
    section = markdown_section(DOC, "The stop timeouts")
    limits_table, where_table = list(markdown_tables(section))
    for field, default, *_ in limits_table[1:]:
        name = field.strip("`")
        value = float(default.removesuffix(" s"))
        assert value == getattr(LIMITS, name), field
    values = {row[0]: row[2] for row in where_table[1:]}
    service = systemd_unit("trio-pty.service")
    assert values["systemd"] == unit_value(service, "Service", "TimeoutStopSec")
    assert values["Kubernetes (with a preStop drain)"] == str(
        pod_spec()["terminationGracePeriodSeconds"]
    )
    assert values["Nomad"].split()[0] == nomad_task().attributes["kill_timeout"]
    run_timeouts = {float(value) for value in re.findall(r"--stop-timeout (\d+)", DOC)}
    assert run_timeouts == {float(values["Podman, Docker"].split()[0])}
    assert min(run_timeouts) >= LIMITS.close_timeout + MARGIN
    (compose,) = re.findall(r"stop_grace_period: (\w+)", DOC)
    assert seconds(compose) >= LIMITS.close_timeout + MARGIN


# --------------------------------------------------------------------------------------------
# systemd


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """`systemd-analyze verify` in a scratch root (a copy of the distribution's units, the
    program at the ExecStart path): any output at all is a finding."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (.ci/run installs it)")
    system = Path("/usr/lib/systemd/system")
    units = tmp_path / "etc/systemd/system"
    shutil.copytree(system, tmp_path / system.relative_to("/"), symlinks=True)
    units.mkdir(parents=True)
    for name in ("trio-pty.socket", "trio-pty.service"):
        shutil.copy(DEPLOY / "systemd" / name, units / name)
    program = tmp_path / service_argv()[0].lstrip("/")
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    done = subprocess.run(
        [
            analyze,
            "--man=no",
            f"--root={tmp_path}",
            "verify",
            "/etc/systemd/system/trio-pty.socket",
            "/etc/systemd/system/trio-pty.service",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_systemd_socket_activation() -> None:
    socket = systemd_unit("trio-pty.socket")
    assert unit_value(socket, "Socket", "Accept") == "no"
    assert len([key for key, _ in socket["Socket"] if key.startswith("Listen")]) == 1
    service = systemd_unit("trio-pty.service")
    assert "trio-pty.socket" in (unit_value(service, "Unit", "Requires") or "").split()
    assert "trio-pty.socket" in (unit_value(service, "Unit", "After") or "").split()
    # The one socket is the first of LISTEN_FDS, which systemd numbers from 3.
    assert option_values(service_argv()[2:])["--listen-fd"] == ["3"]


# Hardening the unit must keep (docs/deploy.md says what each does to sessions).
SYSTEMD_HARDENING = {
    "NoNewPrivileges": "yes",
    "CapabilityBoundingSet": "",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "ProtectProc": "invisible",
    "RestrictSUIDSGID": "yes",
    "OOMPolicy": "continue",
}

# Options that would break ordinary work in a session, and why.
SYSTEMD_BREAKS_SESSIONS = {
    "MemoryDenyWriteExecute": "every JIT (Node.js, Java, PyPy)",
    "ProcSubset": "ps, top and free read /proc/meminfo and /proc/stat",
    "RestrictNamespaces": "the bubblewrap sandbox, rootless containers",
    "SystemCallFilter": "ulimit, chown, debuggers, sandboxes",
    "PrivateNetwork": "sessions and clients need the network",
    "KillMode=control-group": "SIGTERM to every session at once, racing the ordered teardown",
}


def test_systemd_hardening_keeps_sessions_working() -> None:
    service = systemd_unit("trio-pty.service")
    for key, value in SYSTEMD_HARDENING.items():
        assert unit_value(service, "Service", key) == value, key
    keys = {key for key, _ in service["Service"]}
    for option, why in SYSTEMD_BREAKS_SESSIONS.items():
        key, _, value = option.partition("=")
        assert not (key in keys and (not value or unit_value(service, "Service", key) == value)), (
            f"{option} breaks sessions: {why}"
        )
    # The sessions' home must be writable under ProtectSystem=strict.
    assert unit_value(service, "Service", "StateDirectory") == "trio-pty"
    assert unit_value(service, "Service", "Environment") == "HOME=%S/trio-pty"


# --------------------------------------------------------------------------------------------
# Containerfile


def test_containerfile() -> None:
    instructions = read_containerfile((DEPLOY / "container" / "Containerfile").read_text())
    last = max(item.stage for item in instructions)
    final = [item for item in instructions if item.stage == last]
    keywords = [item.keyword for item in final]
    for keyword in ("ENTRYPOINT", "CMD", "USER", "EXPOSE", "STOPSIGNAL"):
        assert keywords.count(keyword) == 1, keyword
    entrypoint, _ = containerfile_argv()
    # tini is PID 1 and forwards SIGTERM/SIGUSR1 to trio-pty; exec form, so no shell between.
    assert entrypoint == ["/usr/bin/tini", "--", "trio-pty", "serve"]
    assert any(
        item.keyword == "RUN" and re.search(r"apt-get install .*\btini\b", item.arguments)
        for item in final
    )
    by_keyword = {item.keyword: item.arguments for item in final}
    assert by_keyword["USER"] == f"{UID}:{UID}"
    assert by_keyword["EXPOSE"] == str(PORT)
    assert by_keyword["STOPSIGNAL"] == "SIGTERM"
    assert not any(item.keyword == "HEALTHCHECK" for item in final)  # /healthz 503s on drain


# --------------------------------------------------------------------------------------------
# Kubernetes


def test_kubernetes_services_and_names() -> None:
    objects = kubernetes_objects()
    assert set(objects) == {"Service/trio-pty", "Service/trio-pty-spawn", "StatefulSet/trio-pty"}
    statefulset = objects["StatefulSet/trio-pty"]["spec"]
    labels = statefulset["template"]["metadata"]["labels"]
    assert statefulset["selector"]["matchLabels"].items() <= labels.items()
    headless = objects[f"Service/{statefulset['serviceName']}"]["spec"]
    assert headless["clusterIP"] == "None"
    # Per-pod DNS names stay while a pod drains or terminates: its sessions still run.
    assert headless["publishNotReadyAddresses"] is True
    spawn = objects["Service/trio-pty-spawn"]["spec"]
    assert "publishNotReadyAddresses" not in spawn  # placement only on ready pods
    server = container(statefulset["template"]["spec"], "server")
    ports = {port["name"]: port["containerPort"] for port in server["ports"]}
    assert ports == {"rpc": PORT}
    for service in (headless, spawn):
        assert service["selector"].items() <= labels.items()
        assert [(port["port"], port["targetPort"]) for port in service["ports"]] == [(PORT, "rpc")]
    # The pod's own DNS name is its node id and an accepted Host.
    options = option_values(server["args"])
    env = {item["name"]: item["valueFrom"]["fieldRef"]["fieldPath"] for item in server["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert options["--node-id"] == ["$(POD_NAME)"]
    pod_host = f"$(POD_NAME).{statefulset['serviceName']}.$(POD_NAMESPACE).svc"
    assert options["--allow-host"] == [pod_host, "trio-pty-spawn.$(POD_NAMESPACE).svc"]
    # The router pattern the page shows resolves to exactly that name.
    (pattern,) = re.findall(r'pattern="(ws://\{node\}[^"]+)"', DOC)
    namespace = "tools"  # the page's example namespace
    assert f"kubectl -n {namespace} apply" in DOC
    expected = pod_host.replace("$(POD_NAME)", "{node}").replace("$(POD_NAMESPACE)", namespace)
    assert pattern == f"ws://{expected}:{PORT}/rpc"


def test_kubernetes_probes_and_drain() -> None:
    server = container(pod_spec(), "server")
    probe = server["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/healthz", "rpc")
    # A liveness probe on /healthz would restart a draining pod, killing its sessions.
    liveness = server.get("livenessProbe", {})
    assert liveness.get("httpGet", {}).get("path") != "/healthz"
    assert prestop_drain_seconds() > 0


def test_kubernetes_token_and_what_sessions_see() -> None:
    spec = pod_spec()
    security = spec["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"], security["fsGroup"]) == (UID,) * 3
    assert security["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes["token-secret"]["secret"]["defaultMode"] == 0o440  # readable by fsGroup
    assert volumes["token"]["emptyDir"]["medium"] == "Memory"
    copy = container(spec, "token", key="initContainers")
    target = TOKEN_FILES["k8s"]
    assert copy["command"] == ["install", "-m", "0400", "/secret/token", target]
    mounts = {mount["name"]: mount["mountPath"] for mount in copy["volumeMounts"]}
    assert mounts == {"token-secret": "/secret", "token": str(Path(target).parent)}
    server = container(spec, "server")
    server_mounts = {mount["name"]: mount for mount in server["volumeMounts"]}
    assert "token-secret" not in server_mounts
    assert server_mounts["token"]["mountPath"] == str(Path(target).parent)
    for each in (server, copy):
        context = each["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert context["readOnlyRootFilesystem"] is True
    assert {server_mounts["home"]["mountPath"], server_mounts["tmp"]["mountPath"]} == {
        "/home/trio-pty",
        "/tmp",
    }


# --------------------------------------------------------------------------------------------
# Nomad


def test_nomad_job() -> None:
    group = nomad_job().one("job").body.one("group").body
    assert group.one("constraint").body.attributes == {
        "operator": "distinct_hosts",
        "value": "true",
    }
    (port,) = group.one("network").body.all("port")
    assert port.labels == ("rpc",)
    assert port.body.attributes == {"static": PORT, "to": PORT}
    service = group.one("service").body
    check = service.one("check").body.attributes
    assert (check["type"], check["path"]) == ("http", "/healthz")
    assert not service.all("check_restart")  # would restart a draining allocation
    task = nomad_task()
    template = task.one("template").body.attributes
    assert template["destination"] == "secrets/token"  # /secrets in the container
    assert (template["uid"], template["gid"], template["perms"]) == (UID, UID, "400")
    assert template["change_mode"] == "noop"  # a new token must not restart the task
    options = serve_options_of_every_file()["nomad"]
    assert options["--node-id"] == ["${node.unique.name}"]
    assert options["--allow-host"] == ["${node.unique.name}.node.consul", "${NOMAD_IP_rpc}"]


def test_hcl_reader_refuses_what_it_does_not_know() -> None:
    assert read_hcl('a "b" {\n  c = [1, "d",\n  ]\n}\n').one("a").body.attributes == {"c": [1, "d"]}
    for text in ("a = <<EOF\nx\nEOF\n", "a = { b = 1 }\n", 'a = "x" b = "y"\n', "a = b.c\n"):
        with pytest.raises(ReadError):
            read_hcl(text)


# --------------------------------------------------------------------------------------------
# The page's "What works today" table against the code


def serve_help_has(option: str) -> None:
    assert has_option("serve", option), option


def with_server(tmp_path: Path, check: Callable[[ServerProcess], None]) -> None:
    server = start_server(tmp_path, "--no-ui")
    try:
        check(server)
    finally:
        server.stop()


def http_get(server: ServerProcess, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def healthz(server: ServerProcess) -> None:
    status, body = http_get(server, "/healthz", {})
    assert (status, body.strip()) == (200, b"ok")


def metrics(server: ServerProcess) -> None:
    assert http_get(server, "/metrics", {})[0] == 401
    status, body = http_get(server, "/metrics", {"Authorization": f"Bearer {server.token}"})
    assert status == 200 and b"trio_pty_sessions" in body


def rpc_call(server: ServerProcess, method: str, params: dict[str, Any] | None) -> Any:
    async def call() -> dict[str, Any]:
        with trio.fail_after(10):
            async with open_ws(server.token_url or server.url) as ws:
                return await rpc(ws, 1, method, params)

    return trio.run(call)


def info_fields(server: ServerProcess) -> None:
    info = rpc_call(server, "server.info", None)["result"]
    assert {"node", "draining", "drain_remaining_s"} <= set(info)
    assert (info["node"], info["draining"], info["drain_remaining_s"]) == (None, False, None)


def drain_method(server: ServerProcess) -> None:
    reply = rpc_call(server, "server.drain", {"deadline_s": -1})  # refused: no drain starts
    assert reply["error"]["code"] != -32601, "no method server.drain"


def sigusr1_drains(server: ServerProcess) -> None:
    server.proc.send_signal(signal.SIGUSR1)
    server.proc.wait(20)  # no session runs: the drain ends at once, then the shutdown
    assert server.proc.returncode == 0


def idle_timeout() -> None:
    assert "idle_timeout" in attrs.fields_dict(Limits)
    assert "idle_timeout" in inspect.signature(Manager.spawn).parameters
    assert has_option("spawn", "--idle-timeout")


def draining_kind() -> None:
    def kinds(cls: type[errors.PtyError]) -> set[str]:
        return {cls.kind}.union(*(kinds(sub) for sub in cls.__subclasses__()))

    assert "draining" in kinds(errors.PtyError)


def drain_timeout() -> None:
    fields = attrs.fields_dict(Limits)
    assert "drain_timeout" in fields and fields["drain_timeout"].default == DRAIN_SECONDS


def router() -> None:
    assert importlib.util.find_spec("trio_pty.client.router") is not None
    module = importlib.import_module("trio_pty.client.router")
    assert hasattr(module, "Router")


def drain_command() -> None:
    assert help_text("drain") and has_option("drain", "--deadline")


Check = Callable[[Path], None]


def offline(check: Callable[[], None]) -> Check:
    return lambda tmp_path: check()


def online(check: Callable[[ServerProcess], None]) -> Check:
    return lambda tmp_path: with_server(tmp_path, check)


# Each row of the table, by its first cell: the check that the feature exists.
FEATURES: dict[str, Check] = {
    "`--token-file FILE`": offline(lambda: serve_help_has("--token-file")),
    "`SIGUSR1`": online(sigusr1_drains),
    "`server.drain`": online(drain_method),
    "`trio-pty drain`": offline(drain_command),
    "`draining`": offline(draining_kind),
    "`Limits.drain_timeout`": offline(drain_timeout),
    "`GET /healthz`": online(healthz),
    "`server.info` `node`, `draining`, `drain_remaining_s`": online(info_fields),
    "`--log-format json`": offline(lambda: serve_help_has("--log-format")),
    "`GET /metrics`": online(metrics),
    "`--listen-fd N`": offline(lambda: serve_help_has("--listen-fd")),
    "`--node-id NAME`": offline(lambda: serve_help_has("--node-id")),
    "`trio_pty.client.router.Router`": offline(router),
    "`Limits.idle_timeout`": offline(idle_timeout),
}


def status_table() -> dict[str, str]:
    (table,) = markdown_tables(markdown_section(DOC, "What works today"))
    assert table[0] == ["interface", "what it is", "status"]
    return {row[0]: row[2] for row in table[1:]}


def test_the_status_table_has_a_checked_row_for_every_feature() -> None:
    """Every row is checked below, and says "available": the page promises nothing more."""
    table = status_table()
    assert set(table) == set(FEATURES)
    for row, status in table.items():
        assert status == "available", row
    assert "coming" not in DOC.lower()


@pytest.mark.parametrize("row", list(FEATURES))
def test_feature_exists(row: str, tmp_path: Path) -> None:
    FEATURES[row](tmp_path)
