"""Shared pieces of the container tests (docker/): paths, the skip rule, and
running commands with a bound on their time.  Fixtures are in conftest.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
INIT = DOCKER / "init.sh"
ENTRYPOINT = DOCKER / "entrypoint.sh"
TOOL = REPO / "tools" / "rdmagw-iptables"
RDMAGW_BIN = Path(os.environ.get("RDMAGW_BIN") or REPO / "build" / "bin" / "rdmagw")
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
