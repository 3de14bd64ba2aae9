# SPDX-License-Identifier: Apache-2.0
"""podman kube play of the Kubernetes examples, shared by test_kube.py and
test_inject.py.

What the tests change in the manifests they play, and why:
- image names: registry.example.com/rdmagw:0.1.0, rdmagw:latest and
  redis:7-bookworm become the images tests/docker/e2e/run built (no
  registry here);
- the Secret volume becomes a hostPath directory holding the same key file
  (root:1337, 0440, as the kubelet writes it with fsGroup 1337): podman 4.3's
  kube play crashes on secret volumes (nil pointer in VolumeFromSecret);
- a workload's pod template (a Deployment's) gets restartPolicy OnFailure:
  podman 4.3 applies the pod's Always to its init containers as well and
  restarts the finished rdmagw-init forever, so kube play fails ("failed to
  remove once init container ... as it is running").  Kubernetes allows only
  Always in a Deployment and runs init containers once all the same.
The seccomp profile is docker/seccomp.json under the name the manifests give
(rdmagw-seccomp.json) in the --seccomp-profile-root directory."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from e2e_support import AGENT_IMAGE, APP_IMAGE, DOCKER, IMAGE, SIDECAR_UID, exists, logs, podman

NETWORK = "rdmagw-e2e-kube"
SUBNET = "192.168.10.0/24"
SERVER_IP = "192.168.10.20"  # pod.yaml's peer address


def pod_specs(doc: dict):
    """The pod specs of a manifest: a Pod's, or a workload's template's."""
    if doc.get("kind") == "Pod":
        yield doc["spec"]
    elif isinstance(doc.get("spec", {}).get("template"), dict):
        yield doc["spec"]["template"]["spec"]


def running(prefix: str, suffix: str) -> str | None:
    """A running container whose name starts and ends so (a workload's pod
    names have a generated part between)."""
    names = podman("ps", "--format", "{{.Names}}").stdout.split()
    found = [n for n in names if n.startswith(prefix) and n.endswith(suffix)]
    return found[0] if found else None


def example(name: str) -> list:
    return list(yaml.safe_load_all((DOCKER / "kubernetes" / name).read_text()))


class KubeLab:
    """A podman network standing for the cluster's pod network, the seccomp
    root and the key directory; plays manifests and tears them down."""

    def __init__(self, work: Path):
        self.work = work
        self.seccomp_root = work / "seccomp"
        self.seccomp_root.mkdir()
        (self.seccomp_root / "rdmagw-seccomp.json").write_text((DOCKER / "seccomp.json").read_text())
        self.keys = work / "keys"
        self.keys.mkdir()
        key = self.keys / "current"
        key.write_text(os.urandom(32).hex() + "\n")
        os.chown(key, 0, SIDECAR_UID)
        key.chmod(0o440)
        self.played: list[Path] = []
        podman("network", "rm", "-f", NETWORK, check=False)
        podman("network", "create", "--subnet", SUBNET, NETWORK)

    def adapted(self, docs: list) -> str:
        images = {"registry.example.com/rdmagw:0.1.0": IMAGE, "rdmagw:latest": IMAGE, "redis:7-bookworm": APP_IMAGE,
                  "registry.example.com/rdmagw-k8s:0.1.0": AGENT_IMAGE}
        for doc in docs:
            for spec in pod_specs(doc):
                if doc["kind"] != "Pod" and spec.get("initContainers"):
                    spec["restartPolicy"] = "OnFailure"
                for container in spec.get("initContainers", []) + spec["containers"]:
                    container["image"] = images.get(container["image"], container["image"])
                for volume in spec.get("volumes", []):
                    if "secret" in volume:
                        assert volume["secret"]["secretName"] == "rdmagw-keys", volume
                        del volume["secret"]
                        volume["hostPath"] = {"path": str(self.keys), "type": "Directory"}
        return yaml.safe_dump_all(docs, sort_keys=False)

    def play(self, name: str, docs: list, ip: str | None = None) -> Path:
        path = self.work / name
        path.write_text(self.adapted(docs))
        podman("kube", "down", path, check=False, timeout=120)
        self.played.append(path)
        host_network = any(spec.get("hostNetwork") for doc in docs for spec in pod_specs(doc))
        network = [] if host_network else ["--network", NETWORK]
        podman("kube", "play", *network, "--seccomp-profile-root", self.seccomp_root,
               *(["--ip", ip] if ip else []), path, timeout=120)
        return path

    def close(self, containers=()):
        for container in containers:
            if exists(container):
                print(f"---- {container}\n{logs(container)[-3000:]}")
        for path in reversed(self.played):
            podman("kube", "down", path, check=False, timeout=120)
        podman("network", "rm", "-f", NETWORK, check=False)
