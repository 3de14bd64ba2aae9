# SPDX-License-Identifier: Apache-2.0
"""docker/kubernetes/pod.yaml and its peer redis-server.yaml under podman kube
play: the init container's redirect, the sidecar under the shipped seccomp
profile (Localhost, from --seccomp-profile-root), PONG from Redis in the other
pod through both sidecars, and a stop that drains and exits 0.  What the test
changes in the files, and why: kube_support.py."""

from __future__ import annotations

import pytest

from e2e_support import SIDECAR_UID, exists, inspect, logs, podman, wait_for
from kube_support import SERVER_IP, KubeLab, example


@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    lab = KubeLab(tmp_path_factory.mktemp("kube"))
    try:
        lab.play("redis-server.yaml", example("redis-server.yaml"), ip=SERVER_IP)
        lab.play("pod.yaml", example("pod.yaml"))
        yield lab
    finally:
        lab.close(("redis-client-rdmagw", "redis-client-app", "redis-server-rdmagw"))


def test_the_init_container_ran_and_is_gone(pods):
    # podman removes a finished init container ("once"); its work shows in
    # the redirect the application's connections take (next test).
    assert not exists("redis-client-rdmagw-init")


def test_the_app_pod_reaches_redis_in_the_server_pod_through_both_sidecars(pods):
    wait_for("the app's PONG", lambda: "PONG" in logs("redis-client-app") or None, timeout=60)
    for sidecar in ("redis-client-rdmagw", "redis-server-rdmagw"):
        podman("exec", sidecar, "rdmagwctl", "--timeout", "2", "ready")
    peers = podman("exec", "redis-server-rdmagw", "rdmagwctl", "peers").stdout
    assert "redis-client" in peers, peers


def test_the_sidecars_run_under_the_localhost_profile_as_uid_1337(pods):
    for sidecar in ("redis-client-rdmagw", "redis-server-rdmagw"):
        status = podman("exec", sidecar, "grep", "-E", "^(Seccomp|Uid):", "/proc/1/status").stdout
        assert "Seccomp:\t2" in status and f"Uid:\t{SIDECAR_UID}" in status, status


def test_stopping_the_pod_drains_the_sidecar_and_it_exits_0(pods):
    podman("pod", "stop", "-t", "30", "redis-client", timeout=90)
    assert inspect("redis-client-rdmagw", "{{.State.ExitCode}}") == "0", logs("redis-client-rdmagw")
    assert "event=shutdown_requested" in logs("redis-client-rdmagw")
