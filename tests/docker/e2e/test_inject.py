# SPDX-License-Identifier: Apache-2.0
"""tools/rdmagw-inject on a plain Redis Deployment
(docker/kubernetes/redis-deployment.yaml), run with podman kube play: the
injected pod serves Redis to pod.yaml's client through both sidecars, under
the injected seccomp profile.  The tool's own checks (idempotence, kinds,
errors) are in tests/docker/test_inject.py."""

from __future__ import annotations

import pytest
import yaml

from e2e_support import DOCKER, IMAGE, REPO, SIDECAR_UID, logs, podman, run, wait_for
from kube_support import SERVER_IP, KubeLab, example, running


def inject(*args: str) -> list:
    r = run([REPO / "tools" / "rdmagw-inject", "-f", DOCKER / "kubernetes" / "redis-deployment.yaml", *args])
    return list(yaml.safe_load_all(r.stdout))


@pytest.fixture(scope="module")
def injected(tmp_path_factory):
    lab = KubeLab(tmp_path_factory.mktemp("inject"))
    # The server-side configuration of redis-server.yaml (targets: Redis on
    # the pod's loopback), under the name the tool is told.
    (configmap,) = [d for d in example("redis-server.yaml") if d["kind"] == "ConfigMap"]
    docs = inject("--image", IMAGE, "--config-map", configmap["metadata"]["name"],
                  "--capture", "192.168.10.99/32:6379")  # nothing is dialled from the server pod
    assert [d["kind"] for d in docs] == ["Deployment"]
    assert docs == inject("--image", IMAGE, "--config-map", configmap["metadata"]["name"],
                          "--capture", "192.168.10.99/32:6379"), "not deterministic"
    try:
        lab.play("injected.yaml", [configmap, *docs], ip=SERVER_IP)
        lab.play("pod.yaml", example("pod.yaml"))
        yield lab
    finally:
        lab.close([n for n in (running("redis", "-rdmagw"), running("redis", "-redis"), "redis-client-app")
                   if n])


def test_the_injected_deployment_serves_redis_through_its_sidecar(injected):
    sidecar = wait_for("the injected sidecar", lambda: running("redis", "-rdmagw"), timeout=30)
    wait_for("it to be ready", lambda: podman("exec", sidecar, "rdmagwctl", "--timeout", "2", "ready",
                                             check=False).returncode == 0 or None, timeout=30)
    wait_for("the client's PONG", lambda: "PONG" in logs("redis-client-app") or None, timeout=60)
    status = podman("exec", sidecar, "grep", "-E", "^(Seccomp|Uid):", "/proc/1/status").stdout
    assert "Seccomp:\t2" in status and f"Uid:\t{SIDECAR_UID}" in status, status
    assert "redis-client" in podman("exec", sidecar, "rdmagwctl", "peers").stdout
