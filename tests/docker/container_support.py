# SPDX-License-Identifier: Apache-2.0
"""Shared pieces of the container tests (docker/): paths, the skip rule,
running commands with a bound on their time, and reading the Dockerfile.
Fixtures are in conftest.py."""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
INIT = DOCKER / "init.sh"
ENTRYPOINT = DOCKER / "entrypoint.sh"
TOOL = REPO / "tools" / "rdmagw-iptables"
RDMAGW_BIN = Path(os.environ.get("RDMAGW_BIN") or REPO / "build" / "bin" / "rdmagw")
# rdmagwctl: $RDMAGWCTL_BIN, else next to the rdmagw being tested.
RDMAGWCTL_BIN = Path(os.environ.get("RDMAGWCTL_BIN") or RDMAGW_BIN.parent / "rdmagwctl")
# Where the image installs rdmagwctl; commands in the image's files name it so.
IMAGE_RDMAGWCTL = "/usr/local/bin/rdmagwctl"
# rdmagw's defaults (docs/configuration.md) that the deployment files rely on.
DEFAULT_ADMIN = "127.0.0.1:9901"
DEFAULT_SHUTDOWN_TIMEOUT_MS = 10000
IN_CI = bool(os.environ.get("CI"))
SIDECAR_UID = 1337  # the image's rdmagw user
TIMEOUT = 30  # any single command


def run(argv, *, env=None, timeout=TIMEOUT, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=timeout, **kw)


def unavailable(reason: str):
    """Skip locally; under CI (as root) this is a failure: the test must run there."""
    if IN_CI:
        pytest.fail(f"{reason}; under CI these tests must run (as root, with iproute2, iptables and util-linux)")
    pytest.skip(reason)


def require_root(*tools: str):
    if os.geteuid() != 0:
        pytest.skip("not root: needs root (network namespaces, iptables, running as uid 1337)")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        unavailable(f"running as root but {', '.join(missing)} not installed")


def normalize_save(text: str) -> str:
    """iptables-save output without '#' lines and packet counters."""
    lines = [re.sub(r"\s*\[\d+:\d+\]", "", line) for line in text.splitlines() if not line.startswith("#")]
    return "\n".join(lines) + "\n"


class Netns:
    def __init__(self, name: str):
        self.name = name
        self.exec = ("ip", "netns", "exec", name)

    def run(self, argv, *, env=None, check=True):
        proc = run([*self.exec, *argv], env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, argv))} in {self.name}: exit {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def nat(self) -> str:
        return normalize_save(self.run(["iptables-save", "-t", "nat"]).stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sidecar_config(admin: str) -> str:
    """A minimal sidecar configuration on free loopback ports, admin at `admin`."""
    return f"""node: sidecar
admin: {admin}
workers: 1
tunnel: {{address: 127.0.0.1, tcp_port: {free_port()}, transport: tcp}}
peers:
  - {{name: peer, address: 127.0.0.1, tcp_port: {free_port()}}}
listeners:
  - {{name: app, listen: "tcp:127.0.0.1:{free_port()}", peer: peer, target: "tcp:127.0.0.1:6379"}}
"""


def read_until(proc, text: str, timeout: float) -> str:
    """proc's stderr up to the line containing text, waiting at most timeout."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    seen = ""
    deadline = time.monotonic() + timeout
    try:
        while text not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise AssertionError(f"no {text!r} within {timeout} s; stderr so far:\n{seen}")
            chunk = os.read(proc.stderr.fileno(), 65536).decode(errors="replace")
            if not chunk:
                raise AssertionError(f"stderr closed (exit {proc.wait(5)}) before {text!r}:\n{seen}")
            seen += chunk
    finally:
        sel.close()
    return seen


def rdmagwctl_commands(rdmagwctl) -> set[str]:
    """The commands `rdmagwctl --help` lists (the indented words under "Commands:")."""
    text = run([rdmagwctl, "--help"]).stdout
    section = text.split("Commands:", 1)[-1].split("\nOptions:", 1)[0]
    return {m.group(1) for m in re.finditer(r"^  ([a-z]+)\b", section, re.M)}


def require_ready_command(rdmagwctl):
    """The image's health check and readiness probe run `rdmagwctl ready`."""
    if "ready" not in rdmagwctl_commands(rdmagwctl):
        unavailable(f"{rdmagwctl} has no `ready` command (rdmagwctl --help): the HEALTHCHECK and"
                    " the readiness probe need it")


# ---------------------------------------------------------------------------
# docker/Dockerfile, read statically


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for line in (DOCKER / "Dockerfile").read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        pending += " " + stripped
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), " ".join(rest.split())))
        pending = ""
    return out


def build_args() -> dict[str, str]:
    """The ARGs declared before the first FROM, with their defaults."""
    args = {}
    for ins, rest in dockerfile_instructions():
        if ins == "FROM":
            break
        if ins == "ARG":
            key, _, value = rest.partition("=")
            args[key] = value
    return args


def stages() -> list[list[tuple[str, str]]]:
    """Each stage's instructions, FROM first, with ${ARG} in FROM replaced by
    the ARG's default (what a plain `docker build` uses)."""
    result = []
    defaults = build_args()
    for ins in dockerfile_instructions():
        if ins[0] == "FROM":
            result.append([])
            rest = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), m.group(0)), ins[1])
            ins = (ins[0], rest)
        if result:
            result[-1].append(ins)
    return result


def copy_parts(args: str) -> tuple[list[str], list[str], str]:
    """COPY [--flag ...] SRC... DEST -> (flags, sources, dest)."""
    words = args.split()
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    return flags, paths[:-1], paths[-1]


def runtime_env() -> dict[str, str]:
    """The runtime stage's ENV settings (ENV KEY=VALUE ...)."""
    env = {}
    for ins, args in stages()[-1]:
        if ins == "ENV":
            for word in args.split():
                key, _, value = word.partition("=")
                env[key] = value
    return env


def healthcheck() -> tuple[dict[str, str], list[str]]:
    """The runtime stage's HEALTHCHECK: ({"--interval": "10s", ...}, CMD in exec form)."""
    (args,) = [a for i, a in stages()[-1] if i == "HEALTHCHECK"]
    options, marker, command = args.partition(" CMD ")
    assert marker, f"HEALTHCHECK without CMD: {args}"
    assert command.startswith("["), f"HEALTHCHECK CMD is not in exec form: {command}"
    flags = dict(word.split("=", 1) for word in options.split())
    return flags, json.loads(command)


def seconds(duration) -> float:
    """A Docker/compose duration ("10s", "1m30s", "500ms") or a number of seconds."""
    if isinstance(duration, (int, float)):
        return float(duration)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}
    return sum(float(n) * scale[u] for n, u in parts)


def rdmagwctl_timeout(command: list[str]) -> float:
    """The --timeout an rdmagwctl command line gives (rdmagwctl's default: 5 s)."""
    for i, word in enumerate(command):
        if word == "--timeout":
            return float(command[i + 1])
        if word.startswith("--timeout="):
            return float(word.split("=", 1)[1])
    return 5.0
