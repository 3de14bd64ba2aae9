# SPDX-License-Identifier: Apache-2.0
"""The local legs past TCP in a pod: docker/kubernetes/redis-deployment.yaml
injected with `rdmagw-inject --local-legs`, its ConfigMap (redis-server.yaml's)
saying `local_legs: {redirect: true, cgroup: pod, cgroup_fs: /host/cgroup}`,
played with podman kube play beside pod.yaml's client.  The sidecar runs as
root with group 1337 and BPF and NET_ADMIN only, under docker/seccomp.json;
it finds its pod's cgroup in the node's hierarchy and its leg to Redis on
the pod's loopback is redirected: 1 MiB each way through the pair, checked
by SHA-256, is counted as redirected bytes on the server's sidecar."""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path

import pytest
import yaml

from e2e_support import IMAGE, REPO, SIDECAR_UID, podman, run, wait_for
from kube_support import SERVER_IP, KubeLab, example, running

CGROUP_FS_DIR = "/host/cgroup"


def node_cgroup2_mount() -> str | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return fields[1]
    return None


def kernel_charges_redirected_bytes() -> bool:
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (6, 13)


def stats(sidecar: str) -> dict:
    fetch = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9901/stats', timeout=5).read().decode())"
    return json.loads(podman("exec", sidecar, "python3", "-c", fetch).stdout)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    mount = node_cgroup2_mount()
    if mount is None:
        pytest.skip("this host mounts no cgroup v2 hierarchy")
    lab = KubeLab(tmp_path_factory.mktemp("local-legs"))
    (configmap,) = [d for d in example("redis-server.yaml") if d["kind"] == "ConfigMap"]
    configmap["data"]["rdmagw.yaml"] += (f"local_legs:\n  redirect: true\n  cgroup: pod\n"
                                         f"  cgroup_fs: {CGROUP_FS_DIR}\n")
    docs = list(yaml.safe_load_all(run([REPO / "tools" / "rdmagw-inject", "-f",
                                        REPO / "docker" / "kubernetes" / "redis-deployment.yaml", "--image", IMAGE,
                                        "--config-map", configmap["metadata"]["name"],
                                        "--capture", "192.168.10.99/32:6379", "--local-legs",
                                        "--cgroup-fs", mount]).stdout))
    try:
        lab.play("injected.yaml", [configmap, *docs], ip=SERVER_IP)
        lab.play("pod.yaml", example("pod.yaml"))
        yield lab
    finally:
        lab.close([n for n in (running("redis", "-rdmagw"), running("redis", "-redis"), "redis-client-app") if n])


def test_an_injected_sidecar_redirects_its_pods_leg_to_redis(lab):
    sidecar = wait_for("the injected sidecar", lambda: running("redis", "-rdmagw"), timeout=30)
    wait_for("it to be ready", lambda: podman("exec", sidecar, "rdmagwctl", "--timeout", "2", "ready",
                                             check=False).returncode == 0 or None, timeout=30)
    # Root, but only with its group, these capabilities and the profile.
    status = podman("exec", sidecar, "grep", "-E", "^(Uid|Gid|CapEff|Seccomp):", "/proc/1/status").stdout
    assert re.search(r"^Uid:\t0\t", status, re.M) and re.search(rf"^Gid:\t{SIDECAR_UID}\t", status, re.M), status
    assert "Seccomp:\t2" in status, status
    cap_eff = int(re.search(r"^CapEff:\t([0-9a-f]+)", status, re.M).group(1), 16)
    assert cap_eff == (1 << 39) | (1 << 12) | (1 << 14), f"CapEff {cap_eff:#x}: BPF, NET_ADMIN and IPC_LOCK only"
    legs = stats(sidecar)["local_legs"]
    if legs["state"] != "redirected":
        if kernel_charges_redirected_bytes() and os.environ.get("CI"):
            pytest.fail(f"local legs {legs['state']} in the pod on kernel {platform.release()}: {legs['reason']}")
        pytest.skip(f"local legs {legs['state']} here: {legs['reason']}")
    # The pod's cgroup: the parent of the sidecar container's, as the node names it.
    pod_id = podman("inspect", sidecar, "--format", "{{.Pod}}").stdout.strip()
    pod_cgroup = podman("pod", "inspect", pod_id, "--format", "{{.CgroupPath}}").stdout.strip()
    assert legs["cgroup"] == CGROUP_FS_DIR + pod_cgroup, (legs, pod_cgroup)
    before, tcp_before = legs["bytes_redirected"], legs["bytes_tcp"]

    # 1 MiB each way from pod.yaml's client, through both sidecars.
    wait_for("the client's PONG", lambda: podman("exec", "redis-client-app", "redis-cli", "-h", SERVER_IP, "-p",
                                                 "6379", "ping", check=False).stdout.strip() == "PONG" or None,
             timeout=60)
    script = (
        "set -e; head -c 786432 /dev/urandom | base64 -w0 > /tmp/value; "
        f"redis-cli -h {SERVER_IP} -p 6379 -x set big < /tmp/value >/dev/null; "
        f"redis-cli -h {SERVER_IP} -p 6379 --raw get big | head -c -1 > /tmp/back; "
        "sha256sum < /tmp/value; sha256sum < /tmp/back; stat -c %s /tmp/back")
    sent, back, size = podman("exec", "redis-client-app", "sh", "-c", script).stdout.split("\n")[:3]
    assert int(size) == 1048576 and sent == back, (size, sent, back)
    # Both directions of the leg pass the programs; beyond max_in_flight
    # unread a message goes by TCP, so not all of it need be redirected.
    legs = stats(sidecar)["local_legs"]
    assert legs["bytes_redirected"] - before >= 1048576, legs
    assert legs["bytes_redirected"] + legs["bytes_tcp"] - before - tcp_before >= 2 * 1048576, legs
    assert "local legs redirected past TCP (cgroup " + CGROUP_FS_DIR + pod_cgroup in podman(
        "exec", sidecar, "rdmagwctl", "status").stdout
