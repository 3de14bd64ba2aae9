# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the tests against a real Kubernetes API server: the server
itself (tools/dev/kube-apiserver, started once per session on loopback) and
the node agent rdmagw-k8s, built from tools/rdmagw-k8s."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

# The integration suite's process classes (rdmagw and its sanitizer checks),
# loaded under a name of their own: both suites call their file conftest.py.
_spec = importlib.util.spec_from_file_location("integration_conftest",
                                               REPO / "tests" / "integration" / "conftest.py")
integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(integration)
KUBE_TOOL = REPO / "tools" / "dev" / "kube-apiserver"
AGENT_SOURCE = REPO / "tools" / "rdmagw-k8s"


def go() -> str:
    for candidate in (os.environ.get("GO"), "/usr/local/go/bin/go", "go"):
        if candidate and subprocess.run(["sh", "-c", f'command -v "{candidate}"'], capture_output=True).returncode == 0:
            return candidate
    pytest.fail("no Go toolchain (go on PATH or /usr/local/go/bin/go): the agent and the API server are Go")


@dataclass
class Kube:
    kubeconfig: str
    kubectl: str
    state: Path

    def run(self, *args: str, input: str | None = None, check: bool = True, kubeconfig: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        env = dict(os.environ, KUBECONFIG=kubeconfig or self.kubeconfig)
        proc = subprocess.run([self.kubectl, *args], input=input, capture_output=True, text=True, env=env,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {shlex.join(args)}: exit {proc.returncode}\n{proc.stderr}")
        return proc

    def apply(self, manifest: dict | str, namespace: str | None = None) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        self.run("apply", *(["-n", namespace] if namespace else []), "-f", "-", input=text)

    def get(self, kind: str, name: str, namespace: str) -> dict:
        return json.loads(self.run("get", kind, name, "-n", namespace, "-o", "json").stdout)

    def tool(self, command: str) -> None:
        proc = subprocess.run([str(KUBE_TOOL), command, "--dir", str(self.state)], capture_output=True, text=True,
                              timeout=180)
        if proc.returncode != 0:
            raise AssertionError(f"kube-apiserver {command}: exit {proc.returncode}\n{proc.stderr}")


@pytest.fixture(scope="session")
def kube(tmp_path_factory) -> Kube:
    state = tmp_path_factory.mktemp("kube") / "state"
    started = time.monotonic()
    # A cold build of etcd, kube-apiserver and kubectl takes minutes: the
    # tool prints its progress, which pytest shows with -s.
    proc = subprocess.run([str(KUBE_TOOL), "start", "--dir", str(state)], stdout=subprocess.PIPE, text=True,
                          timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"tools/dev/kube-apiserver start failed (exit {proc.returncode}); its messages are above")
    values = dict(shlex.split(line)[0].split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    print(f"kube: API server up after {time.monotonic() - started:.1f} s (build included)")
    k = Kube(kubeconfig=values["KUBECONFIG"], kubectl=values["KUBECTL"], state=state)
    yield k
    subprocess.run([str(KUBE_TOOL), "stop", "--dir", str(state)], timeout=60)


@pytest.fixture(scope="session")
def agent_bin(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("agent") / "rdmagw-k8s"
    proc = subprocess.run([go(), "build", "-o", str(out), "."], cwd=AGENT_SOURCE, capture_output=True, text=True,
                          timeout=900, env=dict(os.environ, CGO_ENABLED="0"))
    if proc.returncode != 0:
        pytest.fail(f"go build tools/rdmagw-k8s failed:\n{proc.stderr}")
    return str(out)


_namespaces = iter(range(1, 1_000_000))


@pytest.fixture
def namespace(kube: Kube) -> str:
    """A namespace of the test's own, so tests sharing the API server never
    see each other's objects by accident."""
    name = f"t{os.getpid()}-{next(_namespaces)}"
    kube.run("create", "namespace", name)
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def procs():
    """Every process a test starts (integration.ManagedProcess and its
    kind); stopped at teardown, then a sanitizer report in any one's log
    fails the test."""
    started: list = []
    yield started
    for p in reversed(started):
        p.stop()
    failures = [why for p in started
                if (why := integration.sanitizer_failure(p.name, p.log_text(), p.returncodes())) is not None]
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)
