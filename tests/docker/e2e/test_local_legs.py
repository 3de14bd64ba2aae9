# SPDX-License-Identifier: Apache-2.0
"""The local legs past TCP in pods: docker/kubernetes/redis-deployment.yaml
and redis-client-deployment.yaml, both injected with `rdmagw-inject
--local-legs`, their ConfigMaps (redis-server.yaml's and pod.yaml's) saying
`local_legs: {redirect: true, cgroup: pod, cgroup_fs: /host/cgroup}`, played
with podman kube play.  Each sidecar runs as root with group 1337 and BPF
and NET_ADMIN only, under docker/seccomp.json, and finds its pod's cgroup in
the node's hierarchy.  The client application's connect to the server's
address is taken by its sidecar at connect() (its transparent listener's
route), so both pods' legs are redirected: 1 MiB each way through the pair,
checked by SHA-256, is counted as redirected on both sidecars (what
getpeername() says of such a connection is tested in
tests/integration/test_local_legs.py)."""

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
LEGS = f"local_legs:\n  redirect: true\n  cgroup: pod\n  cgroup_fs: {CGROUP_FS_DIR}\n"
SERVER = ("redis-pod", "-rdmagw")
CLIENT = ("redis-client-pod", "-rdmagw")
CLIENT_APP = ("redis-client-pod", "-app")


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


def injected(manifest: str, configmap: dict, capture: str, mount: str) -> list:
    return list(yaml.safe_load_all(run([REPO / "tools" / "rdmagw-inject", "-f", REPO / "docker" / "kubernetes" / manifest,
                                        "--image", IMAGE, "--config-map", configmap["metadata"]["name"],
                                        "--capture", capture, "--local-legs", "--cgroup-fs", mount]).stdout))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    mount = node_cgroup2_mount()
    if mount is None:
        pytest.skip("this host mounts no cgroup v2 hierarchy")
    lab = KubeLab(tmp_path_factory.mktemp("local-legs"))
    (server_config,) = [d for d in example("redis-server.yaml") if d["kind"] == "ConfigMap"]
    server_config["data"]["rdmagw.yaml"] += LEGS
    (client_config,) = [d for d in example("pod.yaml") if d["kind"] == "ConfigMap"]
    client_config["data"]["rdmagw.yaml"] += LEGS
    server = injected("redis-deployment.yaml", server_config, "192.168.10.99/32:6379", mount)  # dials nothing
    client = injected("redis-client-deployment.yaml", client_config, f"{SERVER_IP}/32:6379", mount)
    try:
        lab.play("server.yaml", [server_config, *server], ip=SERVER_IP)
        lab.play("client.yaml", [client_config, *client])
        yield lab
    finally:
        lab.close([n for n in (running(*SERVER), running("redis-pod", "-redis"), running(*CLIENT),
                               running(*CLIENT_APP)) if n])


def ready(which: tuple[str, str]) -> str:
    sidecar = wait_for(f"the sidecar {which[0]}", lambda: running(*which), timeout=30)
    wait_for(f"{sidecar} to be ready", lambda: podman("exec", sidecar, "rdmagwctl", "--timeout", "2", "ready",
                                                      check=False).returncode == 0 or None, timeout=30)
    return sidecar


def test_injected_sidecars_redirect_both_pods_legs(lab):
    server, client = ready(SERVER), ready(CLIENT)
    app = wait_for("the client application", lambda: running(*CLIENT_APP), timeout=30)
    for sidecar in (server, client):
        # Root, but only with its group, these capabilities and the profile.
        status = podman("exec", sidecar, "grep", "-E", "^(Uid|Gid|CapEff|Seccomp):", "/proc/1/status").stdout
        assert re.search(r"^Uid:\t0\t", status, re.M) and re.search(rf"^Gid:\t{SIDECAR_UID}\t", status, re.M), status
        assert "Seccomp:\t2" in status, status
        cap_eff = int(re.search(r"^CapEff:\t([0-9a-f]+)", status, re.M).group(1), 16)
        assert cap_eff == (1 << 39) | (1 << 12) | (1 << 14), f"CapEff {cap_eff:#x}: BPF, NET_ADMIN and IPC_LOCK only"
        legs = stats(sidecar)["local_legs"]
        if legs["state"] != "redirected":
            if kernel_charges_redirected_bytes() and os.environ.get("CI"):
                pytest.fail(f"{sidecar}: local legs {legs['state']} on kernel {platform.release()}: {legs['reason']}")
            pytest.skip(f"local legs {legs['state']} here: {legs['reason']}")
        # The pod's cgroup: the parent of the sidecar container's, as the node names it.
        pod_id = podman("inspect", sidecar, "--format", "{{.Pod}}").stdout.strip()
        pod_cgroup = podman("pod", "inspect", pod_id, "--format", "{{.CgroupPath}}").stdout.strip()
        assert legs["cgroup"] == CGROUP_FS_DIR + pod_cgroup, (legs, pod_cgroup)
        assert "local legs redirected past TCP (cgroup " + CGROUP_FS_DIR + pod_cgroup in podman(
            "exec", sidecar, "rdmagwctl", "status").stdout
    assert "local_legs_capture_unavailable" not in podman("logs", client).stdout + podman("logs", client).stderr
    before = {s: stats(s)["local_legs"] for s in (server, client)}

    # 1 MiB each way from the client application, through both sidecars.
    wait_for("the client's PONG", lambda: podman("exec", app, "redis-cli", "-h", SERVER_IP, "-p", "6379", "ping",
                                                 check=False).stdout.strip() == "PONG" or None, timeout=60)
    script = (
        "set -e; head -c 786432 /dev/urandom | base64 -w0 > /tmp/value; "
        f"redis-cli -h {SERVER_IP} -p 6379 -x set big < /tmp/value >/dev/null; "
        f"redis-cli -h {SERVER_IP} -p 6379 --raw get big | head -c -1 > /tmp/back; "
        "sha256sum < /tmp/value; sha256sum < /tmp/back; stat -c %s /tmp/back")
    sent, back, size = podman("exec", app, "sh", "-c", script).stdout.split("\n")[:3]
    assert int(size) == 1048576 and sent == back, (size, sent, back)
    # Both directions of each leg pass the programs: every byte is counted,
    # redirected or by TCP. How much goes by TCP depends on how fast the
    # readers read (past max_in_flight unread a message goes by TCP; a busy
    # machine makes that most of it), but rdmagw's own sends toward an
    # application start redirected and are split at max_in_flight before it
    # first asks how much is unread: the megabyte each sidecar sends (the
    # SET to the server, the reply to the client) redirects at least that.
    for sidecar in (server, client):
        legs = stats(sidecar)["local_legs"]
        moved = legs["bytes_redirected"] - before[sidecar]["bytes_redirected"]
        total = moved + legs["bytes_tcp"] - before[sidecar]["bytes_tcp"]
        assert total >= 2 * 1048576 and moved >= legs["max_in_flight"], (sidecar, before[sidecar], legs)
