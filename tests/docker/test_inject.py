# SPDX-License-Identifier: Apache-2.0
"""tools/rdmagw-inject: run as a subprocess on real files, its output parsed
and checked piece by piece (and once against a golden file), including
that what it adds agrees with the hand-written docker/kubernetes/pod.yaml,
so that the two cannot drift apart.

After an intended change of the output, regenerate the golden file with
RDMAGW_UPDATE_GOLDEN=1 and review the diff.  Needs PyYAML (python3-yaml),
as the tool does.
"""

from __future__ import annotations

import copy
import os
import re
import sys
import time
from pathlib import Path

import pytest

from container_support import DEFAULT_ADMIN, DOCKER, IMAGE_RDMAGWCTL, REPO, SIDECAR_UID, run

yaml = pytest.importorskip("yaml", reason="PyYAML not installed (apt-get install python3-yaml): rdmagw-inject needs it")

TOOL = REPO / "tools" / "rdmagw-inject"
IPTABLES_TOOL = REPO / "tools" / "rdmagw-iptables"
REDIS = DOCKER / "kubernetes" / "redis-deployment.yaml"
POD_YAML = DOCKER / "kubernetes" / "pod.yaml"
GOLDEN = Path(__file__).resolve().parent / "golden" / "redis-deployment.injected.yaml"
UPDATE = os.environ.get("RDMAGW_UPDATE_GOLDEN") == "1"

CAPTURE = "192.168.10.20/32:6379"
INJECTED = "rdmagw.io/injected"
SIDECAR_LABEL = "rdmagw.io/sidecar"
CAPTURE_ANNOTATION = "rdmagw.io/capture"
SECCOMP_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/rdmagw"
DEFAULT_PROFILE = "rdmagw-seccomp.json"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


def project_version() -> str:
    text = (REPO / "CMakeLists.txt").read_text()
    return re.search(r"project\(rdmagw VERSION ([0-9.]+)", text).group(1)


VERSION = project_version()


# ---------------------------------------------------------------------------
# Running the tool


def inject(*args, rc=0, stdin=None, env=None):
    """The tool's CompletedProcess; RDMAGW_IMAGE from this environment is
    dropped so that defaults are the tool's own."""
    environment = {k: v for k, v in os.environ.items() if k != "RDMAGW_IMAGE"}
    environment.update(env or {})
    proc = run([sys.executable, TOOL, *args], env=environment, input=stdin)
    assert proc.returncode == rc, (f"rdmagw-inject {' '.join(map(str, args))}: exit {proc.returncode}, wanted {rc}\n"
                                   f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def injected(*args, **kw) -> list:
    return list(yaml.safe_load_all(inject(*args, **kw).stdout))


def write(tmp_path: Path, text: str, name: str = "app.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def pod_spec(obj: dict) -> dict:
    """The spec of a Pod, or of a workload's pod template."""
    kind = obj["kind"]
    if kind == "Pod":
        return obj["spec"]
    if kind == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def pod_annotations(obj: dict) -> dict:
    metadata = obj["metadata"] if obj["kind"] == "Pod" else obj["spec"]["template"]["metadata"]
    return metadata["annotations"]


def by_name(items: list) -> dict:
    return {item["name"]: item for item in items}


def env_of(container: dict) -> dict:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def exec_command(handler: dict) -> list:
    return handler["exec"]["command"]


# ---------------------------------------------------------------------------
# Inputs

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  annotations:
    team: payments
    rdmagw.io/capture: "10.1.0.0/16:7000-7999, 10.2.0.0/16"
spec:
  terminationGracePeriodSeconds: 60
  securityContext:
    runAsUser: 1000
    fsGroup: 2000
  initContainers:
    - name: migrate
      image: web:1
      command: [migrate]
  containers:
    - name: web
      image: web:1
  volumes:
    - name: data
      emptyDir: {}
"""

WORKLOAD = """\
apiVersion: apps/v1
kind: {kind}
metadata:
  name: app
spec:
  template:
    metadata:
      labels: {{app: app}}
    spec:
      {extra}containers:
        - name: app
          image: app:1
"""

CRONJOB = """\
apiVersion: batch/v1
kind: CronJob
metadata:
  name: report
spec:
  schedule: "0 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
            - name: report
              image: report:1
"""

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: rdmagw
data:
  rdmagw.yaml: |
    node: app
    admin: 127.0.0.1:9901
"""

SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: redis
spec:
  selector: {app: redis}
  ports:
    - port: 6379
"""


def workload(kind: str, extra: str = "") -> str:
    return WORKLOAD.format(kind=kind, extra=extra)


def as_list(*texts: str) -> str:
    items = [yaml.safe_load(t) for t in texts]
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, sort_keys=False)


# ---------------------------------------------------------------------------
# The redis Deployment: exactly the pieces, and nothing else changed

SIDECAR_SECURITY = {
    "runAsUser": SIDECAR_UID,
    "runAsGroup": SIDECAR_UID,
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
    "seccompProfile": {"type": "Localhost", "localhostProfile": DEFAULT_PROFILE},
}
INIT_SECURITY = {
    "runAsUser": 0,
    "runAsGroup": 0,
    "runAsNonRoot": False,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW"]},
}


def without(mapping: dict, key: str) -> dict:
    return {k: v for k, v in mapping.items() if k != key}


def test_redis_deployment_gets_exactly_the_rdmagw_pieces():
    (original,) = yaml.safe_load_all(REDIS.read_text())
    proc = inject("-f", REDIS, "--capture", CAPTURE)
    assert proc.stderr == ""
    (out,) = yaml.safe_load_all(proc.stdout)

    # Nothing outside the pod template changes, nor the application container.
    assert without(out, "spec") == without(original, "spec")
    assert without(out["spec"], "template") == without(original["spec"], "template")
    template, original_template = out["spec"]["template"], original["spec"]["template"]
    metadata, original_metadata = template["metadata"], original_template["metadata"]
    assert without(without(metadata, "annotations"), "labels") == without(original_metadata, "labels")
    assert metadata["labels"] == {**original_metadata["labels"], SIDECAR_LABEL: "true"}
    assert template["metadata"]["annotations"] == {SECCOMP_ANNOTATION: f"localhost/{DEFAULT_PROFILE}",
                                                   INJECTED: VERSION}
    spec = template["spec"]
    assert list(spec) == ["initContainers", "containers", "volumes", "securityContext",
                          "terminationGracePeriodSeconds"]
    (init,) = spec["initContainers"]
    app, sidecar = spec["containers"]
    assert app == original_template["spec"]["containers"][0]

    assert init == {
        "name": "rdmagw-init",
        "image": "rdmagw:latest",
        "command": ["/usr/local/bin/init.sh"],
        "env": [{"name": "RDMAGW_CAPTURE", "value": CAPTURE},
                {"name": "RDMAGW_UID", "value": str(SIDECAR_UID)},
                {"name": "RDMAGW_REDIRECT_PORT", "value": "15001"}],
        "securityContext": INIT_SECURITY,
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
    }

    assert sidecar["name"] == "rdmagw" and sidecar["image"] == "rdmagw:latest"
    assert "command" not in sidecar and "args" not in sidecar, "the image's entrypoint must run"
    assert env_of(sidecar) == {"RDMAGW_CONFIG": "/etc/rdmagw/rdmagw.yaml", "RDMAGW_ADMIN": DEFAULT_ADMIN,
                               "RDMAGW_UID": str(SIDECAR_UID)}
    ctl = [IMAGE_RDMAGWCTL, "--timeout", "2"]
    assert exec_command(sidecar["readinessProbe"]) == [*ctl, "ready"]
    assert exec_command(sidecar["livenessProbe"]) == [*ctl, "status"]
    assert exec_command(sidecar["lifecycle"]["preStop"]) == [*ctl, "drain", "--wait", "--wait-timeout", "15"]
    assert sidecar["securityContext"] == SIDECAR_SECURITY
    assert sidecar["resources"] == {"requests": {"cpu": "500m", "memory": "512Mi"},
                                    "limits": {"memory": "512Mi", "aliyun/erdma": 1}}
    assert sidecar["volumeMounts"] == [
        {"name": "rdmagw-config", "mountPath": "/etc/rdmagw", "readOnly": True},
        {"name": "rdmagw-keys", "mountPath": "/etc/rdmagw-keys", "readOnly": True},
    ]
    assert spec["volumes"] == [
        {"name": "rdmagw-config", "configMap": {"name": "rdmagw", "defaultMode": 0o444}},
        {"name": "rdmagw-keys", "secret": {"secretName": "rdmagw-keys", "defaultMode": 0o440}},
    ]
    assert spec["securityContext"] == {"fsGroup": SIDECAR_UID}
    assert spec["terminationGracePeriodSeconds"] == 30


def test_redis_deployment_sample_is_plain():
    """The example's input has nothing of rdmagw: the injection adds it all."""
    text = REDIS.read_text()
    (deployment,) = yaml.safe_load_all(text)
    assert deployment["kind"] == "Deployment"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "redis:7-bookworm"
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert "rdmagw" not in body
    assert "input of the injection example" in text


def test_redis_deployment_golden():
    args = ["-f", "docker/kubernetes/redis-deployment.yaml", "--capture", CAPTURE,
            "--image", "registry.example.com/rdmagw:0.1.0"]
    environment = {k: v for k, v in os.environ.items() if k != "RDMAGW_IMAGE"}
    proc = run([sys.executable, TOOL, *args], env=environment, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    if UPDATE:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(proc.stdout)
    assert proc.stdout == GOLDEN.read_text(), "output differs from the golden file (RDMAGW_UPDATE_GOLDEN=1 to update)"
    assert "defaultMode: 0444" in proc.stdout and "defaultMode: 0440" in proc.stdout, "modes in octal, as written"


# ---------------------------------------------------------------------------
# Idempotence

IDEMPOTENCE_CASES = {
    "redis": (None, ["--capture", CAPTURE]),
    "pod": (POD, []),
    "statefulset": (workload("StatefulSet"), ["--capture", "10.0.0.0/8"]),
    "cronjob-native": (CRONJOB, ["--capture", "10.0.0.0/8", "--native-sidecar"]),
    "list": (as_list(workload("Deployment"), CONFIGMAP, POD), ["--capture", "10.0.0.0/8"]),
    "no-keys-ipv6": (workload("Deployment"), ["--capture", "fd00::/64:6379 10.0.0.0/8", "--no-keys"]),
    "unconfined": (workload("DaemonSet"), ["--capture", "10.0.0.0/8", "--seccomp-profile", "unconfined"]),
}


@pytest.mark.parametrize("case", sorted(IDEMPOTENCE_CASES))
def test_injecting_twice_is_injecting_once(tmp_path, case):
    text, args = IDEMPOTENCE_CASES[case]
    source = REDIS if text is None else write(tmp_path, text)
    once = inject("-f", source, *args).stdout
    twice = inject("-f", write(tmp_path, once, "once.yaml"), *args)
    assert twice.stdout == once
    # The only warning a second run may give: POD's own fsGroup, as the first did.
    assert all("fsGroup is 2000" in line for line in twice.stderr.splitlines()), twice.stderr


def test_reinjecting_with_other_options_replaces_what_was_injected(tmp_path):
    once = inject("-f", REDIS, "--capture", CAPTURE, "--image", "rdmagw:1").stdout
    (out,) = injected("-f", write(tmp_path, once), "--capture", "10.9.0.0/16", "--image", "rdmagw:2", "--no-keys",
                      "--native-sidecar")
    spec = pod_spec(out)
    assert [c["name"] for c in spec["initContainers"]] == ["rdmagw-init", "rdmagw"]
    assert [c["name"] for c in spec["containers"]] == ["redis"]
    assert [v["name"] for v in spec["volumes"]] == ["rdmagw-config"]
    assert {c["image"] for c in spec["initContainers"]} == {"rdmagw:2"}
    assert env_of(spec["initContainers"][0])["RDMAGW_CAPTURE"] == "10.9.0.0/16"


# ---------------------------------------------------------------------------
# Kinds


def test_pod_keeps_its_own_settings_and_takes_capture_from_its_annotation(tmp_path):
    proc = inject("-f", write(tmp_path, POD))
    (out,) = yaml.safe_load_all(proc.stdout)
    spec = out["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["migrate", "rdmagw-init"], "ours after the pod's own"
    assert [c["name"] for c in spec["containers"]] == ["web", "rdmagw"], "the application stays the default container"
    assert [v["name"] for v in spec["volumes"]] == ["data", "rdmagw-config", "rdmagw-keys"]
    assert spec["terminationGracePeriodSeconds"] == 60, "a longer grace period is kept"
    assert spec["securityContext"] == {"runAsUser": 1000, "fsGroup": 2000}, "the pod's own fsGroup is kept"
    assert "fsGroup is 2000, not 1337" in proc.stderr and "warning" in proc.stderr
    annotations = out["metadata"]["annotations"]
    assert annotations["team"] == "payments" and annotations[INJECTED] == VERSION
    assert annotations[SECCOMP_ANNOTATION] == f"localhost/{DEFAULT_PROFILE}"
    # The annotation's list, as init.sh takes it: separated by spaces.
    assert env_of(spec["initContainers"][1])["RDMAGW_CAPTURE"] == "10.1.0.0/16:7000-7999 10.2.0.0/16"


def test_capture_annotation_wins_over_the_option(tmp_path):
    (out,) = injected("-f", write(tmp_path, POD), "--capture", "10.9.0.0/16")
    assert env_of(pod_spec(out)["initContainers"][1])["RDMAGW_CAPTURE"] == "10.1.0.0/16:7000-7999 10.2.0.0/16"


def test_short_grace_period_is_raised(tmp_path):
    text = workload("Deployment", extra="terminationGracePeriodSeconds: 5\n      ")
    (out,) = injected("-f", write(tmp_path, text), "--capture", "10.0.0.0/8")
    assert pod_spec(out)["terminationGracePeriodSeconds"] == 30


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_workload_pod_templates_are_injected(tmp_path, kind):
    extra = "restartPolicy: Never\n      " if kind == "Job" else ""
    proc = inject("-f", write(tmp_path, workload(kind, extra)), "--capture", "10.0.0.0/8")
    (out,) = yaml.safe_load_all(proc.stdout)
    spec = pod_spec(out)
    assert [c["name"] for c in spec["initContainers"]] == ["rdmagw-init"]
    assert [c["name"] for c in spec["containers"]] == ["app", "rdmagw"]
    assert out["spec"]["template"]["metadata"]["annotations"][INJECTED] == VERSION
    assert out["spec"]["template"]["metadata"]["labels"] == {"app": "app", SIDECAR_LABEL: "true"}
    assert "annotations" not in out["metadata"], "annotations go on the pod template, not the workload"
    assert SIDECAR_LABEL not in out["metadata"].get("labels", {}), "and so does the label"
    if kind == "Job":  # a sidecar that never exits holds a Job's pod forever
        assert "restartPolicy is Never" in proc.stderr and "--native-sidecar" in proc.stderr
    else:
        assert proc.stderr == ""


def test_cronjob_native_sidecar(tmp_path):
    proc = inject("-f", write(tmp_path, CRONJOB), "--capture", "10.0.0.0/8", "--native-sidecar")
    assert proc.stderr == ""
    (out,) = yaml.safe_load_all(proc.stdout)
    template = out["spec"]["jobTemplate"]["spec"]["template"]
    assert template["metadata"]["annotations"][INJECTED] == VERSION
    assert list(template) == ["metadata", "spec"], "a template without metadata gets it first"
    spec = template["spec"]
    init, sidecar = spec["initContainers"]
    assert (init["name"], sidecar["name"]) == ("rdmagw-init", "rdmagw"), "the redirect before the sidecar"
    assert sidecar["restartPolicy"] == "Always"
    assert exec_command(sidecar["startupProbe"]) == [IMAGE_RDMAGWCTL, "--timeout", "2", "ready"]
    assert [c["name"] for c in spec["containers"]] == ["report"]


def test_cronjob_without_native_sidecar_warns(tmp_path):
    proc = inject("-f", write(tmp_path, CRONJOB), "--capture", "10.0.0.0/8")
    assert "restartPolicy is OnFailure" in proc.stderr and "never complete" in proc.stderr
    (out,) = yaml.safe_load_all(proc.stdout)
    assert [c["name"] for c in pod_spec(out)["containers"]] == ["report", "rdmagw"]


def test_list_items_are_injected_one_by_one(tmp_path):
    text = as_list(workload("Deployment"), CONFIGMAP, POD)
    (out,) = injected("-f", write(tmp_path, text), "--capture", "10.0.0.0/8")
    deployment, configmap, pod = out["items"]
    assert configmap == yaml.safe_load(CONFIGMAP)
    assert env_of(pod_spec(deployment)["initContainers"][0])["RDMAGW_CAPTURE"] == "10.0.0.0/8"
    assert env_of(pod_spec(pod)["initContainers"][1])["RDMAGW_CAPTURE"] == "10.1.0.0/16:7000-7999 10.2.0.0/16"


def test_other_kinds_pass_through(tmp_path):
    path = write(tmp_path, CONFIGMAP + "---\n" + SERVICE)
    proc = inject("-f", path)
    assert list(yaml.safe_load_all(proc.stdout)) == [yaml.safe_load(CONFIGMAP), yaml.safe_load(SERVICE)]
    assert "nothing injected" in proc.stderr
    assert "rdmagw.yaml: |" in proc.stdout, "a ConfigMap's file stays a readable block"


def test_documents_keep_their_order_across_files(tmp_path):
    first = write(tmp_path, CONFIGMAP + "---\n" + workload("Deployment"), "a.yaml")
    second = write(tmp_path, SERVICE, "b.yaml")
    out = injected("-f", first, "-f", second, "--capture", "10.0.0.0/8")
    assert [d["kind"] for d in out] == ["ConfigMap", "Deployment", "Service"]


def test_ipv6_capture_turns_on_ip6tables(tmp_path):
    (out,) = injected("-f", REDIS, "--capture", "10.0.0.0/8,[fd00::1]:6379")
    env = env_of(pod_spec(out)["initContainers"][0])
    assert env["RDMAGW_CAPTURE"] == "10.0.0.0/8 [fd00::1]:6379" and env["RDMAGW_IPV6"] == "1"
    (out,) = injected("-f", REDIS, "--capture", "10.0.0.0/8")
    assert "RDMAGW_IPV6" not in env_of(pod_spec(out)["initContainers"][0])


# ---------------------------------------------------------------------------
# Options


def test_options_reach_every_place_they_belong():
    (out,) = injected("-f", REDIS, "--capture", CAPTURE, "--image", "reg.example/rdmagw:9", "--config-map", "cm-a",
                      "--key-secret", "keys-a", "--redirect-port", "16001", "--admin", "127.0.0.1:9911",
                      "--uid", "2000", "--seccomp-profile", "profiles/rdmagw.json", "--memory", "1Gi",
                      "--rdma-resource", "rdma/hca")
    spec = pod_spec(out)
    (init,) = spec["initContainers"]
    sidecar = by_name(spec["containers"])["rdmagw"]
    assert init["image"] == sidecar["image"] == "reg.example/rdmagw:9"
    assert env_of(init) == {"RDMAGW_CAPTURE": CAPTURE, "RDMAGW_UID": "2000", "RDMAGW_REDIRECT_PORT": "16001"}
    assert env_of(sidecar)["RDMAGW_ADMIN"] == "127.0.0.1:9911" and env_of(sidecar)["RDMAGW_UID"] == "2000"
    assert sidecar["securityContext"]["runAsUser"] == sidecar["securityContext"]["runAsGroup"] == 2000
    assert sidecar["securityContext"]["seccompProfile"] == {"type": "Localhost",
                                                            "localhostProfile": "profiles/rdmagw.json"}
    assert out["spec"]["template"]["metadata"]["annotations"][SECCOMP_ANNOTATION] == "localhost/profiles/rdmagw.json"
    assert sidecar["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"},
                                    "limits": {"memory": "1Gi", "rdma/hca": 1}}
    volumes = by_name(spec["volumes"])
    assert volumes["rdmagw-config"]["configMap"]["name"] == "cm-a"
    assert volumes["rdmagw-keys"]["secret"]["secretName"] == "keys-a"
    assert spec["securityContext"]["fsGroup"] == 2000


def test_local_legs_make_the_sidecar_root_with_its_group_bpf_net_admin_and_the_cgroup_fs():
    (plain,) = injected("-f", REDIS, "--capture", CAPTURE)
    (out,) = injected("-f", REDIS, "--capture", CAPTURE, "--local-legs", "--cgroup-fs", "/sys/fs/cgroup/unified")
    spec = pod_spec(out)
    (init,) = spec["initContainers"]
    sidecar = by_name(spec["containers"])["rdmagw"]
    assert sidecar["securityContext"] == {
        "runAsUser": 0, "runAsGroup": SIDECAR_UID, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK", "BPF", "NET_ADMIN"]},
        "seccompProfile": {"type": "Localhost", "localhostProfile": DEFAULT_PROFILE}}
    # The redirect exempts the group as well as the uid, and the entrypoint knows.
    assert env_of(init)["RDMAGW_GID"] == env_of(sidecar)["RDMAGW_GID"] == str(SIDECAR_UID)
    assert by_name(spec["volumes"])["rdmagw-cgroup"] == {"name": "rdmagw-cgroup", "hostPath": {
        "path": "/sys/fs/cgroup/unified", "type": "Directory"}}
    assert by_name(sidecar["volumeMounts"])["rdmagw-cgroup"] == {"name": "rdmagw-cgroup", "mountPath": "/host/cgroup",
                                                                 "readOnly": True}
    # Nothing else differs from a plain injection, and the default mount is /sys/fs/cgroup.
    plain_sidecar = by_name(pod_spec(plain)["containers"])["rdmagw"]
    assert plain_sidecar["securityContext"]["runAsUser"] == SIDECAR_UID
    assert "RDMAGW_GID" not in env_of(plain_sidecar) and "RDMAGW_GID" not in env_of(pod_spec(plain)["initContainers"][0])
    (default,) = injected("-f", REDIS, "--capture", CAPTURE, "--local-legs")
    assert by_name(pod_spec(default)["volumes"])["rdmagw-cgroup"]["hostPath"]["path"] == "/sys/fs/cgroup"
    # Injected again, with or without the mode: replaced, not added twice.
    again = yaml.safe_dump(out, sort_keys=False)
    (twice,) = injected("-f", "-", "--capture", CAPTURE, "--local-legs", "--cgroup-fs", "/sys/fs/cgroup/unified",
                        stdin=again)
    assert twice == out
    (off,) = injected("-f", "-", "--capture", CAPTURE, stdin=again)
    assert off == plain


def test_no_keys_unconfined_and_no_rdma_resource():
    (out,) = injected("-f", REDIS, "--capture", CAPTURE, "--no-keys", "--seccomp-profile", "unconfined",
                      "--rdma-resource", "none")
    spec = pod_spec(out)
    sidecar = by_name(spec["containers"])["rdmagw"]
    assert [v["name"] for v in spec["volumes"]] == ["rdmagw-config"]
    assert [m["name"] for m in sidecar["volumeMounts"]] == ["rdmagw-config"]
    assert "securityContext" not in spec, "no key, no fsGroup"
    assert sidecar["securityContext"]["seccompProfile"] == {"type": "Unconfined"}
    assert pod_annotations(out)[SECCOMP_ANNOTATION] == "unconfined"
    assert sidecar["resources"]["limits"] == {"memory": "512Mi"}


def test_services_dir_mounts_the_agents_directory_read_only(tmp_path):
    (out,) = injected("-f", REDIS, "--capture", CAPTURE, "--services-dir", "/run/rdmagw-k8s/")
    spec = pod_spec(out)
    sidecar = by_name(spec["containers"])["rdmagw"]
    assert by_name(spec["volumes"])["rdmagw-services"] == {
        "name": "rdmagw-services", "hostPath": {"path": "/run/rdmagw-k8s", "type": "DirectoryOrCreate"}}
    assert by_name(sidecar["volumeMounts"])["rdmagw-services"] == {
        "name": "rdmagw-services", "mountPath": "/run/rdmagw-k8s", "readOnly": True}
    # Without the option, no host directory; the label either way.
    (plain,) = injected("-f", REDIS, "--capture", CAPTURE)
    assert "rdmagw-services" not in by_name(pod_spec(plain)["volumes"])
    assert plain["spec"]["template"]["metadata"]["labels"][SIDECAR_LABEL] == "true"
    # Injected again without it, the volume goes.
    again = write(tmp_path, yaml.safe_dump(out, sort_keys=False))
    (out,) = injected("-f", again, "--capture", CAPTURE)
    assert "rdmagw-services" not in by_name(pod_spec(out)["volumes"])
    for bad in ("run/rdmagw", "/", "/run/../etc", "/run/a b"):
        proc = inject("-f", REDIS, "--capture", CAPTURE, "--services-dir", bad, rc=2)
        assert f"--services-dir {bad!r}: must be an absolute directory" in proc.stderr


def test_a_pod_without_labels_gets_the_sidecar_label(tmp_path):
    path = write(tmp_path, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
                           "  containers: [{name: app, image: app:1}]\n")
    (out,) = injected("-f", path, "--capture", CAPTURE)
    assert out["metadata"]["labels"] == {SIDECAR_LABEL: "true"}
    path = write(tmp_path, "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: [a]}\nspec:\n"
                           "  containers: [{name: app, image: app:1}]\n")
    proc = inject("-f", path, "--capture", CAPTURE, rc=2)
    assert "metadata.labels: a list, not a mapping" in proc.stderr


def test_image_from_environment():
    (out,) = injected("-f", REDIS, "--capture", CAPTURE, env={"RDMAGW_IMAGE": "env.example/rdmagw:7"})
    assert {c["image"] for c in pod_spec(out)["initContainers"]} == {"env.example/rdmagw:7"}
    (out,) = injected("-f", REDIS, "--capture", CAPTURE, "--image", "opt:1", env={"RDMAGW_IMAGE": "env:1"})
    assert {c["image"] for c in pod_spec(out)["initContainers"]} == {"opt:1"}


def test_stdin_and_output_file(tmp_path):
    expected = inject("-f", REDIS, "--capture", CAPTURE).stdout
    assert inject("-f", "-", "--capture", CAPTURE, stdin=REDIS.read_text()).stdout == expected
    target = tmp_path / "out.yaml"
    proc = inject("-f", REDIS, "--capture", CAPTURE, "-o", target)
    assert proc.stdout == "" and target.read_text() == expected


def test_help_version_and_executable():
    proc = inject("--help")
    for text in ("-f", "--capture", "rdmagw.io/capture", "rdmagw.io/injected", SECCOMP_ANNOTATION, "comments",
                 "--native-sidecar", "exit status", SIDECAR_LABEL, "--services-dir"):
        assert text in proc.stdout, text
    assert os.access(TOOL, os.X_OK), "tools/rdmagw-inject must be executable"
    proc = run([TOOL, "--version"])
    assert proc.returncode == 0 and proc.stdout.strip() == f"rdmagw-inject {VERSION}", proc.stdout + proc.stderr


# ---------------------------------------------------------------------------
# Errors: exit 2, nothing on stdout, a message naming the place and why

def with_line(text: str, after: str, line: str) -> str:
    """text with `line` inserted after the first line that is `after`."""
    return text.replace(f"{after}\n", f"{after}\n{line}\n", 1)


DEPLOYMENT_APP_1337 = with_line(workload("Deployment"), "          image: app:1",
                                "          securityContext: {runAsUser: 1337}")
DEPLOYMENT_POD_1337 = workload("Deployment", extra="securityContext: {runAsUser: 1337}\n      ")
DEPLOYMENT_OWN_RDMAGW = with_line(workload("Deployment"), "          image: app:1",
                                  "        - name: rdmagw\n          image: mine")
DEPLOYMENT_OWN_INIT = workload("Deployment", extra="initContainers: [{name: rdmagw-init, image: mine}]\n      ")
DEPLOYMENT_OWN_VOLUME = workload("Deployment", extra="volumes: [{name: rdmagw-config, emptyDir: {}}]\n      ")
DEPLOYMENT_NATIVE_1337 = workload(
    "Deployment", extra="initContainers: [{name: agent, image: a, restartPolicy: Always, "
                        "securityContext: {runAsUser: 1337}}]\n      ")
DEPLOYMENT_OUTER_CAPTURE = with_line(workload("Deployment"), "  name: app",
                                     "  annotations: {rdmagw.io/capture: 10.0.0.0/8}")
DEPLOYMENT_BAD_ANNOTATION = workload("Deployment").replace("labels: {app: app}",
                                                           "annotations: {rdmagw.io/capture: 10.0.0.0/33}")
DEPLOYMENT_GRACE = workload("Deployment", extra="terminationGracePeriodSeconds: 30s\n      ")
DEPLOYMENT_GROUP_1337 = workload("Deployment", extra="securityContext: {runAsGroup: 1337}\n      ")
DEPLOYMENT_NO_TEMPLATE = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app}\nspec: {replicas: 1}\n"
DEPLOYMENT_NO_CONTAINERS = "kind: Deployment\nmetadata: {name: app}\nspec: {template: {spec: {containers: []}}}\n"
CRONJOB_NO_JOB_TEMPLATE = "kind: CronJob\nmetadata: {name: r}\nspec: {schedule: '* * * * *'}\n"
ROLLOUT = workload("Deployment").replace("apps/v1\nkind: Deployment", "argoproj.io/v1alpha1\nkind: Rollout")

C = ["--capture", "10.0.0.0/8"]
# name: (input text or None for REDIS, arguments, what stderr must contain)
ERRORS = {
    "capture-missing": (None, [], ["redis-deployment.yaml:13: Deployment redis: nothing to capture", "--capture",
                                   CAPTURE_ANNOTATION]),
    "capture-on-workload": (DEPLOYMENT_OUTER_CAPTURE, [],
                            ["nothing to capture", "only the pod template's (spec.template.metadata.annotations)"]),
    "capture-empty": (None, ["--capture", ""], ["--capture ''", "empty"]),
    "cidr-host-bits": (None, ["--capture", "10.0.0.1/8"], ["--capture '10.0.0.1/8'", "host bits", "10.0.0.0/8?"]),
    "cidr-garbage": (None, ["--capture", "300.1.2.0/24"], ["--capture '300.1.2.0/24'", "not a valid"]),
    "cidr-prefix": (None, ["--capture", "10.0.0.0/33"], ["--capture '10.0.0.0/33'", "not a valid"]),
    "cidr-in-annotation": (DEPLOYMENT_BAD_ANNOTATION, C, ["app.yaml:1: Deployment app: annotation rdmagw.io/capture "
                                                          "'10.0.0.0/33': not a valid"]),
    "port-big": (None, ["--capture", "10.0.0.0/8:70000"], ["'10.0.0.0/8:70000'", "port 70000 is out of range 1-65535"]),
    "port-zero": (None, ["--capture", "10.0.0.0/8:0"], ["port 0 is out of range"]),
    "port-text": (None, ["--capture", "10.0.0.0/8:redis"], ["port 'redis' is not a number"]),
    "port-empty": (None, ["--capture", "10.0.0.0/8:"], ["empty port"]),
    "port-range-reversed": (None, ["--capture", "10.0.0.0/8:9000-8000"], ["9000-8000 has LO > HI"]),
    "every-capture-error": (None, ["--capture", "10.0.0.1/8,10.0.0.0/8:0"], ["'10.0.0.1/8'", "'10.0.0.0/8:0'"]),
    "app-uid-1337": (DEPLOYMENT_APP_1337, C, ["app.yaml:1: Deployment app: spec.template.spec.containers[0] (app): "
                                              "runs as uid 1337 (its securityContext.runAsUser)", "bypass rdmagw",
                                              "--uid"]),
    "pod-uid-1337": (DEPLOYMENT_POD_1337, C, ["containers[0] (app): runs as uid 1337 (the pod's "
                                              "spec.template.spec.securityContext.runAsUser)"]),
    "app-uid-is-option": (DEPLOYMENT_APP_1337.replace("1337", "2000"), [*C, "--uid", "2000"], ["runs as uid 2000"]),
    "native-sidecar-uid-1337": (DEPLOYMENT_NATIVE_1337, C, ["initContainers[0] (agent): runs as uid 1337"]),
    "clash-container": (DEPLOYMENT_OWN_RDMAGW, C, ["app.yaml:1: Deployment app: spec.template.spec.containers[1]: a "
                                                   "container of the pod's own is named 'rdmagw'",
                                                   "rdmagw.io/injected"]),
    "clash-init-container": (DEPLOYMENT_OWN_INIT, C, ["initContainers[0]: a container of the pod's own is named "
                                                      "'rdmagw-init'"]),
    "clash-volume": (DEPLOYMENT_OWN_VOLUME, C, ["volumes[0]: a volume of the pod's own is named 'rdmagw-config'"]),
    "clash-hand-written-pod": (POD_YAML.read_text(), C, ["Pod redis-client: spec.containers[1]: a container of the "
                                                         "pod's own is named 'rdmagw'"]),
    "workload-without-template": (DEPLOYMENT_NO_TEMPLATE, C, ["app.yaml:1: Deployment app: spec.template: missing"]),
    "template-without-containers": (DEPLOYMENT_NO_CONTAINERS, C, ["Deployment app: spec.template.spec.containers: "
                                                                  "missing or empty: no pod to inject"]),
    "cronjob-without-job-template": (CRONJOB_NO_JOB_TEMPLATE, C, ["CronJob r: spec.jobTemplate: missing"]),
    "unknown-kind-with-pods": (ROLLOUT, C, ["app.yaml:1: Rollout app: kind Rollout is not one rdmagw-inject injects",
                                            "spec.template.spec.containers holds containers"]),
    "malformed-yaml": ("kind: Pod\nmetadata: {name: [x}\n", C, ["app.yaml:2:20: malformed YAML",
                                                                  "expected ',' or ']'"]),
    "bad-tag": ("kind: Pod\nspec: !vault x\n", C, ["app.yaml:2:7: malformed YAML", "!vault"]),
    "not-a-mapping": ("- a\n- b\n", C, ["app.yaml:1: a list, not a Kubernetes object"]),
    "no-kind": ("metadata: {name: x}\n", C, ["app.yaml:1: a mapping without kind"]),
    "grace-not-a-number": (DEPLOYMENT_GRACE, C, ["terminationGracePeriodSeconds: '30s' is not a whole number"]),
    "list-items-not-a-list": ("kind: List\nitems: {a: 1}\n", C, ["List (no name): items: a mapping, not a list"]),
    "empty-input": ("# nothing\n", C, ["no Kubernetes objects in"]),
    "redirect-port": (None, [*C, "--redirect-port", "0"], ["--redirect-port '0': port 0 is out of range"]),
    "uid-root": (None, [*C, "--uid", "0"], ["--uid '0'", "root"]),
    "uid-name": (None, [*C, "--uid", "rdmagw"], ["--uid 'rdmagw': not a number"]),
    "admin-no-port": (None, [*C, "--admin", "127.0.0.1"], ["--admin '127.0.0.1': expected HOST:PORT"]),
    "admin-ipv6-bare": (None, [*C, "--admin", "::1:9901"], ["--admin '::1:9901'", "brackets"]),
    "config-map-name": (None, [*C, "--config-map", "Bad_Name"],
                        ["--config-map 'Bad_Name': not a Kubernetes object name"]),
    "key-secret-name": (None, [*C, "--key-secret", ""], ["--key-secret ''"]),
    "seccomp-absolute": (None, [*C, "--seccomp-profile", "/etc/x.json"], ["--seccomp-profile '/etc/x.json'"]),
    "seccomp-dotdot": (None, [*C, "--seccomp-profile", "a/../../x.json"], ["without '..'"]),
    "memory": (None, [*C, "--memory", "lots"], ["--memory 'lots': not a Kubernetes quantity"]),
    "rdma-resource": (None, [*C, "--rdma-resource", "erdma"], ["--rdma-resource 'erdma'"]),
    "image": (None, [*C, "--image", "a b"], ["--image 'a b'"]),
    "keys-and-no-keys": (None, [*C, "--key-secret", "k", "--no-keys"], ["not allowed with argument"]),
    "unknown-option": (None, [*C, "--frobnicate"], ["unrecognized arguments: --frobnicate"]),
    "cgroup-fs-alone": (None, [*C, "--cgroup-fs", "/sys/fs/cgroup"], ["--cgroup-fs '/sys/fs/cgroup': used only "
                                                                      "with --local-legs"]),
    "cgroup-fs-relative": (None, [*C, "--local-legs", "--cgroup-fs", "sys/fs/cgroup"],
                           ["--cgroup-fs 'sys/fs/cgroup': must be an absolute directory"]),
    "local-legs-group-clash": (DEPLOYMENT_GROUP_1337, [*C, "--local-legs"],
                               ["runs as gid 1337 (the pod's spec.template.spec.securityContext.runAsGroup)",
                                "the redirect exempts that gid"]),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_bad_input_exits_2_saying_where_and_why(tmp_path, case):
    text, args, wanted = ERRORS[case]
    source = REDIS if text is None else write(tmp_path, text)
    proc = inject("-f", source, *args, rc=2)
    assert proc.stdout == ""
    for piece in wanted:
        assert piece in proc.stderr, f"{case}: {piece!r} not in:\n{proc.stderr}"
    assert "see rdmagw-inject --help" in proc.stderr


def test_every_object_error_is_reported_at_once(tmp_path):
    text = DEPLOYMENT_APP_1337 + "---\n" + DEPLOYMENT_OWN_VOLUME.replace("name: app\n", "name: other\n", 1)
    proc = inject("-f", write(tmp_path, text), *C, rc=2)
    assert "app.yaml:1: Deployment app: " in proc.stderr
    assert "app.yaml:15: Deployment other: " in proc.stderr, proc.stderr


def test_our_names_in_the_wrong_list_of_an_injected_pod_are_refused(tmp_path):
    (out,) = injected("-f", REDIS, *C)
    pod_spec(out)["containers"].insert(0, {"name": "rdmagw-init", "image": "mine"})
    proc = inject("-f", write(tmp_path, yaml.safe_dump(out, sort_keys=False)), *C, rc=2)
    assert ("spec.template.spec.containers[0]: a container of the pod's own is named 'rdmagw-init', the name of one "
            "rdmagw-inject adds, where rdmagw-inject puts none of that name") in proc.stderr, proc.stderr


def test_every_bad_entry_of_an_annotation_is_reported_with_its_place(tmp_path):
    text = workload("Deployment").replace("labels: {app: app}",
                                          "annotations: {rdmagw.io/capture: '10.0.0.1/8 1.2.3.0/24:0'}")
    proc = inject("-f", write(tmp_path, text), rc=2)
    assert "app.yaml:1: Deployment app: annotation rdmagw.io/capture '10.0.0.1/8': " in proc.stderr
    assert "app.yaml:1: Deployment app: annotation rdmagw.io/capture '1.2.3.0/24:0': " in proc.stderr


def test_list_item_errors_name_the_items_line(tmp_path):
    text = ("kind: List\nitems:\n  - kind: ConfigMap\n    metadata: {name: a}\n"
            "  - kind: Deployment\n    metadata: {name: b}\n")
    proc = inject("-f", write(tmp_path, text), *C, rc=2)
    assert "app.yaml:5: Deployment b: spec: missing" in proc.stderr


def alias_bomb(levels: int) -> str:
    """A ConfigMap whose data aliases multiply by 10 per level: 10**levels
    strings from a few hundred bytes."""
    lines = ["kind: ConfigMap", "metadata: {name: bomb}", "x:", '  l0: &l0 ["lol","lol","lol","lol","lol",'
             '"lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        p = f"*l{i - 1}"
        lines.append(f"  l{i}: &l{i} [{', '.join([p] * 10)}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    text = alias_bomb(7)
    assert len(text) < 800
    started = time.monotonic()
    proc = inject("-f", write(tmp_path, text), *C, rc=2)
    assert time.monotonic() - started < 5, "the aliases were expanded"
    assert re.search(r"app\.yaml:1: its aliases expand \d+ YAML nodes to \d{9};", proc.stderr), proc.stderr
    assert proc.stdout == ""


def test_aliases_that_only_share_a_little_still_inject(tmp_path):
    text = alias_bomb(2) + "---\n" + workload("Deployment")
    docs = injected("-f", write(tmp_path, text), *C)
    assert docs[0]["x"]["l2"][9][9][9] == "lol"
    assert any(c["name"] == "rdmagw" for c in pod_spec(docs[1])["containers"])


def test_stdin_twice_and_not_utf8(tmp_path):
    proc = inject("-f", "-", "-f", "-", *C, rc=2, stdin="")
    assert "-f - given more than once" in proc.stderr
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"kind: ConfigMap\ndata: {a: caf\xe9}\n")
    proc = inject("-f", path, *C, rc=2)
    assert "not UTF-8" in proc.stderr and "0xe9" in proc.stderr


def test_io_failures_exit_1(tmp_path):
    proc = inject("-f", tmp_path / "missing.yaml", *C, rc=1)
    assert "cannot read" in proc.stderr and "missing.yaml" in proc.stderr and proc.stdout == ""
    proc = inject("-f", REDIS, *C, "-o", tmp_path / "no-such-dir" / "out.yaml", rc=1)
    assert "cannot write" in proc.stderr


# ---------------------------------------------------------------------------
# Capture entries: accepted exactly when rdmagw-iptables (which the init
# container runs) accepts them, so a mistake fails here, not in the pod.

CAPTURE_ENTRIES = [
    "10.0.0.0/8", "10.0.0.0/8:6379", "10.1.0.0/16:7000-7999", "192.168.1.5", "192.168.1.5:80", "0.0.0.0/0",
    "10.0.0.0/255.0.0.0", "fd00::/64", "fd00::/64:6379", "[fd00::1]:80", "[fd00::/64]:80-90", "fd00::1",
    "10.0.0.1/8", "10.0.0.0/33", "300.1.2.0/24", "10.0.0.0/8:0", "10.0.0.0/8:65536", "10.0.0.0/8:http",
    "10.0.0.0/8:", "10.0.0.0/8:9000-8000", "10.0.0.0/8:9000-", "fe80::1%eth0", "[fd00::1", "[fd00::1]x",
    "10.0.0.0/abc", "fd00::/64:", "redis.example:6379", "fd00::1/64",
]


def iptables_accepts(entry: str) -> bool:
    ipv6 = entry.startswith("[") or entry.count(":") >= 2
    # A missing iptables-save: the dry run then assumes an empty table and
    # touches nothing on this machine.
    proc = run([sys.executable, IPTABLES_TOOL, "install", "--dry-run", "--uid", "1337", "--capture", entry,
                "--iptables-cmd", "/nonexistent/iptables", *(["--ipv6"] if ipv6 else [])])
    assert proc.returncode in (0, 2), proc.stderr
    return proc.returncode == 0


@pytest.mark.parametrize("entry", CAPTURE_ENTRIES)
def test_capture_validation_agrees_with_rdmagw_iptables(entry):
    proc = run([sys.executable, TOOL, "-f", REDIS, "--capture", entry])
    assert proc.returncode in (0, 2), proc.stderr
    assert (proc.returncode == 0) == iptables_accepts(entry), proc.stderr


# ---------------------------------------------------------------------------
# docker/kubernetes/pod.yaml, written by hand, and the injection agree


def hand_written_pod() -> dict:
    (pod,) = [d for d in yaml.safe_load_all(POD_YAML.read_text()) if d["kind"] == "Pod"]
    return pod


def application_only(pod: dict) -> dict:
    """pod.yaml's pod as it was before anyone added rdmagw to it."""
    app = copy.deepcopy(pod)
    spec = app["spec"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] != "rdmagw"]
    for key in ("initContainers", "volumes", "terminationGracePeriodSeconds"):
        spec.pop(key, None)
    spec.get("securityContext", {}).pop("fsGroup", None)
    app["metadata"]["labels"].pop(SIDECAR_LABEL, None)
    return app


def options_of(pod: dict) -> list[str]:
    """The rdmagw-inject options that make what pod.yaml has."""
    spec = pod["spec"]
    (init,) = spec["initContainers"]
    sidecar = by_name(spec["containers"])["rdmagw"]
    volumes = by_name(spec["volumes"])
    profile = sidecar["securityContext"]["seccompProfile"]
    return ["--capture", env_of(init)["RDMAGW_CAPTURE"], "--image", sidecar["image"],
            "--config-map", volumes["rdmagw-config"]["configMap"]["name"],
            "--key-secret", volumes["rdmagw-keys"]["secret"]["secretName"],
            "--redirect-port", env_of(init)["RDMAGW_REDIRECT_PORT"], "--admin", env_of(sidecar)["RDMAGW_ADMIN"],
            "--uid", env_of(init)["RDMAGW_UID"],
            "--memory", sidecar["resources"]["limits"]["memory"],
            "--seccomp-profile", profile.get("localhostProfile", "unconfined")]


def test_injected_pieces_agree_with_the_hand_written_pod(tmp_path):
    hand = hand_written_pod()
    path = write(tmp_path, yaml.safe_dump(application_only(hand), sort_keys=False))
    (out,) = injected("-f", path, *options_of(hand))
    spec, hand_spec = out["spec"], hand["spec"]

    # The init container: image, init.sh's path, its settings, privileges.
    assert spec["initContainers"] == hand_spec["initContainers"]

    sidecar = by_name(spec["containers"])["rdmagw"]
    hand_sidecar = by_name(hand_spec["containers"])["rdmagw"]
    assert set(sidecar) == set(hand_sidecar), "a field one has and the other lacks"
    for key in ("image", "readinessProbe", "livenessProbe", "lifecycle", "securityContext", "resources",
                "volumeMounts"):
        assert sidecar[key] == hand_sidecar[key], key
    assert "command" not in hand_sidecar and "command" not in sidecar, "both run the image's entrypoint"
    assert exec_command(sidecar["readinessProbe"])[0] == IMAGE_RDMAGWCTL
    hand_env = env_of(hand_sidecar)
    assert {k: v for k, v in env_of(sidecar).items() if k in hand_env} == hand_env
    assert sidecar["securityContext"]["runAsUser"] == SIDECAR_UID

    assert spec["volumes"] == hand_spec["volumes"]
    assert spec["securityContext"]["fsGroup"] == hand_spec["securityContext"]["fsGroup"]
    assert spec["terminationGracePeriodSeconds"] == hand_spec["terminationGracePeriodSeconds"]
    # The key the ConfigMap names is where the Secret is mounted.
    (configmap,) = [d for d in yaml.safe_load_all(POD_YAML.read_text()) if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(configmap["data"]["rdmagw.yaml"])
    (key_file,) = config["tunnel"]["auth"]["key_files"]
    keys_mount = by_name(sidecar["volumeMounts"])["rdmagw-keys"]["mountPath"]
    assert key_file.startswith(keys_mount + "/")
    assert hand["metadata"]["labels"][SIDECAR_LABEL] == out["metadata"]["labels"][SIDECAR_LABEL] == "true"
    # A seccomp annotation by hand must be the one the tool writes.
    hand_annotations = hand["metadata"].get("annotations") or {}
    if SECCOMP_ANNOTATION in hand_annotations:
        assert out["metadata"]["annotations"][SECCOMP_ANNOTATION] == hand_annotations[SECCOMP_ANNOTATION]


def test_tool_version_is_the_projects():
    assert inject("--version").stdout.strip() == f"rdmagw-inject {VERSION}"
