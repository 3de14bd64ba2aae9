"""docker/kubernetes/pod.yaml and its peer redis-server.yaml under podman kube
play: the init container's redirect, the sidecar under the shipped seccomp
profile (Localhost, from --seccomp-profile-root), PONG from Redis in the other
pod through both sidecars, and a stop that drains and exits 0.

What the test changes in the files, and why:
- image names: registry.example.com/rdmagw:0.1.0 and redis:7-bookworm become
  the images tests/docker/e2e/run built (no registry here);
- the Secret volume becomes a hostPath directory holding the same key file
  (root:1337, 0440, as the kubelet writes it with fsGroup 1337): podman 4.3's
  kube play crashes on secret volumes (nil pointer in VolumeFromSecret)."""

from __future__ import annotations

import os

import pytest

from e2e_support import (APP_IMAGE, DOCKER, IMAGE, SIDECAR_UID, exists, inspect, logs, podman, wait_for)

NETWORK = "rdmagw-e2e-kube"
SUBNET = "192.168.10.0/24"
SERVER_IP = "192.168.10.20"  # pod.yaml's peer address


def adapted(name: str, keys_dir) -> str:
    text = (DOCKER / "kubernetes" / name).read_text()
    for original in ("registry.example.com/rdmagw:0.1.0", "image: redis:7-bookworm"):
        assert original in text, f"{name} no longer names {original}: update this test"
    text = text.replace("registry.example.com/rdmagw:0.1.0", IMAGE)
    text = text.replace("image: redis:7-bookworm", f"image: {APP_IMAGE}")
    secret = "      secret:\n        secretName: rdmagw-keys"
    assert secret in text, f"{name}: the keys volume changed: update this test"
    start = text.index(secret)
    end = text.index("\n", text.index("defaultMode", start))
    return text[:start] + f"      hostPath:\n        path: {keys_dir}\n        type: Directory" + text[end:]


@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    work = tmp_path_factory.mktemp("kube")
    seccomp_root = work / "seccomp"
    seccomp_root.mkdir()
    (seccomp_root / "rdmagw-seccomp.json").write_text((DOCKER / "seccomp.json").read_text())
    keys = work / "keys"
    keys.mkdir()
    (keys / "current").write_text(os.urandom(32).hex() + "\n")
    os.chown(keys / "current", 0, SIDECAR_UID)
    (keys / "current").chmod(0o440)
    files = {}
    for name in ("redis-server.yaml", "pod.yaml"):
        files[name] = work / name
        files[name].write_text(adapted(name, keys))

    def down():
        for name in ("pod.yaml", "redis-server.yaml"):
            podman("kube", "down", files[name], check=False, timeout=120)
        podman("network", "rm", "-f", NETWORK, check=False)

    down()
    podman("network", "create", "--subnet", SUBNET, NETWORK)
    try:
        play = ["kube", "play", "--network", NETWORK, "--seccomp-profile-root", seccomp_root]
        podman(*play, "--ip", SERVER_IP, files["redis-server.yaml"], timeout=120)
        podman(*play, files["pod.yaml"], timeout=120)
        yield files
    finally:
        for container in ("redis-client-rdmagw", "redis-client-app", "redis-server-rdmagw"):
            if exists(container):
                print(f"---- {container}\n{logs(container)[-3000:]}")
        down()


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
