# SPDX-License-Identifier: Apache-2.0
"""Node mode (docker/kubernetes/node-daemonset.yaml) under podman kube play:
one rdmagw on the host's network; a pod without sidecar or capabilities
reaches Redis in redis-server.yaml's pod through it, over the unix socket it
mounts from the host and over the node-local address.

podman kube play has no DaemonSet: the test plays its pod template as a Pod
(what a DaemonSet runs on each node), with restartPolicy OnFailure (see
kube_support.py).  hostNetwork puts rdmagw and node-init.sh in this
machine's own network namespace: the test removes the address they put on
lo and the socket directory they make."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from e2e_support import SIDECAR_UID, exists, logs, podman, wait_for
from kube_support import SERVER_IP, KubeLab, example

ADDRESS = "169.254.77.1/32"
SOCKET_DIR = "/run/rdmagw"


def as_pod(daemonset: dict) -> dict:
    template = daemonset["spec"]["template"]
    spec = dict(template["spec"], restartPolicy="OnFailure")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": dict(template["metadata"], name=daemonset["metadata"]["name"]), "spec": spec}


def address_on_lo() -> bool:
    out = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True).stdout
    return f" {ADDRESS} " in out


def cleanup_host():
    subprocess.run(["ip", "addr", "delete", ADDRESS, "dev", "lo"], capture_output=True)
    shutil.rmtree(SOCKET_DIR, ignore_errors=True)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if address_on_lo():
        pytest.fail(f"{ADDRESS} is on lo already: not the test's to take over")
    lab = KubeLab(tmp_path_factory.mktemp("node"))
    try:
        lab.play("redis-server.yaml", example("redis-server.yaml"), ip=SERVER_IP)
        configmap, daemonset = example("node-daemonset.yaml")
        assert daemonset["kind"] == "DaemonSet" and daemonset["spec"]["template"]["spec"]["hostNetwork"] is True
        lab.play("node.yaml", [configmap, as_pod(daemonset)])
        lab.play("node-client.yaml", example("node-client.yaml"))
        yield lab
    finally:
        lab.close(("rdmagw-node-rdmagw", "node-client-socket", "node-client-tcp"))
        cleanup_host()


def test_node_init_made_the_socket_directory_and_the_node_local_address(node):
    assert address_on_lo()
    st = os.stat(SOCKET_DIR)
    assert st.st_uid == SIDECAR_UID, st
    assert not exists("rdmagw-node-rdmagw-node-init"), "the finished init container is removed"


def test_a_pod_without_a_sidecar_reaches_redis_over_the_hosts_socket_and_the_node_local_address(node):
    for container in ("node-client-socket", "node-client-tcp"):
        wait_for(f"{container}'s PONG", lambda c=container: "PONG" in logs(c) or None, timeout=60)
    status = podman("exec", "rdmagw-node-rdmagw", "rdmagwctl", "status").stdout
    assert "redis-socket" in status and "redis-local" in status, status
    # Both listeners carried streams.
    listeners = {line.split()[0]: line.split() for line in status.splitlines()
                 if line.strip().startswith(("redis-socket", "redis-local"))}
    for name, fields in listeners.items():
        assert int(fields[3]) >= 1, f"{name} accepted nothing: {fields}"


def test_the_node_rdmagw_runs_confined_as_uid_1337(node):
    status = podman("exec", "rdmagw-node-rdmagw", "grep", "-E", "^(Seccomp|Uid|CapEff):", "/proc/1/status").stdout
    assert "Seccomp:\t2" in status and f"Uid:\t{SIDECAR_UID}" in status, status
