# SPDX-License-Identifier: Apache-2.0
"""Kubernetes Services through rdmagw, in containers, with the Service data
from a real API server (docs/kubernetes.md):

- the API server on this host's loopback (tools/dev/kube-apiserver);
- the node agent from its image, as docker/kubernetes/rdmagw-k8s-daemonset.yaml
  runs it, with the rights of rdmagw-k8s-rbac.yaml (a ServiceAccount token),
  writing the node's services file;
- three Redis "hosts": docker/kubernetes/redis-deployment.yaml injected by
  rdmagw-inject with redis-service.yaml's ConfigMap, played as three pods;
- the client: redis-client-deployment.yaml, injected the same way, reaching
  the Service `redis` by its ClusterIP (which the API server gave it).

The Service, the ConfigMap and the pods go through the API as manifests;
the EndpointSlice is written by the test, as the EndpointSlice controller
would write it from the pods' addresses (no controller runs).  podman 4.3
adaptations, besides kube_support.py's: kube play knows no DaemonSet, so the
agent's pod template is played as a pod, on the host's network (the API
server listens on the host's loopback), with the token and CA mounted where
a ServiceAccount's are and KUBERNETES_SERVICE_HOST/PORT set, as the kubelet
does; a Deployment plays one pod, so the three replicas are three
Deployments, redis-0..2, at fixed addresses, without the containerPort
(podman 4.3 publishes it on the host's port, where only one can be); the kubelet's Service variables
(REDIS_SERVICE_HOST, REDIS_SERVICE_PORT) are set in the client's app
container."""

from __future__ import annotations

import copy
import json
import os
import select
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e_support import AGENT_IMAGE, DOCKER, IMAGE, REPO, logs, podman, run, wait_for
from kube_support import KubeLab, example

KUBE_TOOL = REPO / "tools" / "dev" / "kube-apiserver"
ENDPOINTS = {"redis-0": "192.168.10.31", "redis-1": "192.168.10.32", "redis-2": "192.168.10.33"}
CLIENT_IP = "192.168.10.40"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class Api:
    """kubectl against the API server tools/dev/kube-apiserver started."""

    def __init__(self, work: Path):
        self.state = work / "apiserver"
        r = run([KUBE_TOOL, "start", "--dir", self.state], timeout=1800)
        values = dict(shlex.split(line)[0].split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        self.kubeconfig, self.kubectl = values["KUBECONFIG"], values["KUBECTL"]

    def __call__(self, *args: str, input: str | None = None) -> str:
        return run([self.kubectl, *args], input=input, env=dict(os.environ, KUBECONFIG=self.kubeconfig)).stdout

    def apply(self, docs: list) -> None:
        self("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def stop(self) -> None:
        run([KUBE_TOOL, "stop", "--dir", self.state], check=False, timeout=60)


def inject(manifest: str, services_dir: Path) -> list:
    r = run([REPO / "tools" / "rdmagw-inject", "-f", DOCKER / "kubernetes" / manifest, "--image", IMAGE,
             "--config-map", "rdmagw", "--services-dir", services_dir, "--capture", "10.96.0.0/12:6379"])
    return list(yaml.safe_load_all(r.stdout))


def agent_pod(api: Api, work: Path, services_dir: Path) -> dict:
    """The DaemonSet's pod template as the kubelet would run it on this node."""
    (daemonset,) = example("rdmagw-k8s-daemonset.yaml")
    spec = copy.deepcopy(daemonset["spec"]["template"]["spec"])
    for key in ("serviceAccountName", "priorityClassName", "tolerations"):
        spec.pop(key)
    spec["hostNetwork"] = True
    (container,) = spec["containers"]
    container["image"] = AGENT_IMAGE
    # What the kubelet mounts for the ServiceAccount: its token (from the
    # TokenRequest API), the cluster's CA, the namespace.
    sa = work / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(api("create", "token", "rdmagw-k8s", "-n", "kube-system").strip())
    config = json.loads(api("config", "view", "--raw", "-o", "json"))
    cluster = config["clusters"][0]["cluster"]
    (sa / "ca.crt").write_text(Path(cluster["certificate-authority"]).read_text())
    (sa / "namespace").write_text("kube-system")
    host, port = cluster["server"].removeprefix("https://").rsplit(":", 1)
    container["env"] = [{"name": "KUBERNETES_SERVICE_HOST", "value": host},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": port}]
    container["volumeMounts"].append({"name": "serviceaccount", "mountPath": SA_DIR, "readOnly": True})
    spec["volumes"].append({"name": "serviceaccount", "hostPath": {"path": str(sa), "type": "Directory"}})
    (services,) = [v for v in spec["volumes"] if v["name"] == "services"]
    services["hostPath"]["path"] = str(services_dir)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rdmagw-k8s"}, "spec": spec}


def container(prefix: str, suffix: str) -> str:
    names = podman("ps", "--format", "{{.Names}}").stdout.split()
    found = [n for n in names if n.startswith(prefix) and n.endswith(suffix)]
    assert len(found) == 1, (prefix, suffix, names)
    return found[0]


def endpoint_slice(ready: list[str], cluster_ip: str) -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "redis-e2e", "labels": {"kubernetes.io/service-name": "redis"}},
            "addressType": "IPv4", "ports": [{"name": "redis", "port": 6379, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ENDPOINTS[name]], "conditions": {"ready": True},
                           "targetRef": {"kind": "Pod", "namespace": "default", "name": name}}
                          for name in ready]}


class Cluster:
    def __init__(self, api: Api, cluster_ip: str):
        self.api = api
        self.cluster_ip = cluster_ip
        self.client_app = container("redis-client", "-app")
        self.client_sidecar = container("redis-client", "-rdmagw")
        self.redis = {name: container(name + "-", "-redis") for name in ENDPOINTS}

    def set_endpoints(self, ready: list[str]) -> None:
        """The slice through the API; then wait until the client's rdmagw
        routes by it (the agent writes the file, rdmagw reads it)."""
        self.api.apply([endpoint_slice(ready, self.cluster_ip)])
        want = sorted(ENDPOINTS[name] for name in ready)
        wait_for(f"the client's rdmagw to route to {ready}", lambda: self.ready_endpoints() == want, timeout=30)

    def services(self) -> list:
        return json.loads(podman("exec", self.client_sidecar, "rdmagwctl", "services", "--json").stdout)["table"]

    def ready_endpoints(self) -> list[str] | None:
        for s in self.services():
            if (s["namespace"], s["name"]) == ("default", "redis"):
                return sorted(e["address"] for e in s["ports"][0]["endpoints"] if e["state"] == "ready")
        return None

    def connections(self, count: int, key: str) -> subprocess.CompletedProcess:
        """`count` connections from the client's app to the ClusterIP, one
        INCR each; stops at the first that fails."""
        script = (f'for i in $(seq {count}); do redis-cli -h {self.cluster_ip} -p 6379 incr {key} >/dev/null '
                  '|| exit 1; done')
        return podman("exec", self.client_app, "sh", "-c", script, check=False, timeout=120)

    def counts(self, key: str) -> dict[str, int]:
        return {name: int(podman("exec", c, "redis-cli", "get", key).stdout.strip() or 0)
                for name, c in self.redis.items()}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("services")
    services_dir = work / "node-run-rdmagw-k8s"  # the node's /run/rdmagw-k8s
    api = Api(work)
    lab = KubeLab(work)
    try:
        api.apply(example("rdmagw-k8s-rbac.yaml"))
        api.apply(example("redis-service.yaml"))
        cluster_ip = json.loads(api("get", "service", "redis", "-o", "json"))["spec"]["clusterIP"]
        (configmap,) = [d for d in example("redis-service.yaml") if d["kind"] == "ConfigMap"]

        lab.play("rdmagw-k8s.yaml", [agent_pod(api, work, services_dir)])
        servers = inject("redis-deployment.yaml", services_dir)
        assert servers[0]["spec"]["template"]["metadata"]["labels"]["rdmagw.io/sidecar"] == "true"
        for name, ip in ENDPOINTS.items():
            deployment = copy.deepcopy(servers[0])
            deployment["metadata"]["name"] = name
            for c in deployment["spec"]["template"]["spec"]["containers"]:
                c.pop("ports", None)  # podman publishes a containerPort on the host: replicas would collide
            lab.play(f"{name}.yaml", [configmap, deployment], ip=ip)
            # The pod as the API knows it: the injected template, whose
            # label tells the agent it has rdmagw.
            template = deployment["spec"]["template"]
            api.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": name},
                        "spec": template["spec"]}])
        api.apply([endpoint_slice(list(ENDPOINTS), cluster_ip)])

        (client,) = inject("redis-client-deployment.yaml", services_dir)
        (app,) = [c for c in client["spec"]["template"]["spec"]["containers"] if c["name"] == "app"]
        app["env"] = [{"name": "REDIS_SERVICE_HOST", "value": cluster_ip},
                      {"name": "REDIS_SERVICE_PORT", "value": "6379"}]
        lab.play("redis-client.yaml", [configmap, client], ip=CLIENT_IP)
        c = Cluster(api, cluster_ip)
        wait_for("the client's sidecar to be ready",
                 lambda: podman("exec", c.client_sidecar, "rdmagwctl", "--timeout", "2", "ready",
                                check=False).returncode == 0, timeout=60)
        yield c
    finally:
        names = podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
        lab.close([n for n in names if n.startswith(("rdmagw-k8s", "redis-"))])
        api.stop()


def test_the_agent_writes_the_service_from_the_api_server_with_its_rights_only(cluster):
    agent = container("rdmagw-k8s", "rdmagw-k8s")
    wait_for("the agent's file", lambda: cluster.ready_endpoints() == sorted(ENDPOINTS.values()), timeout=30)
    (redis,) = [s for s in cluster.services() if (s["namespace"], s["name"]) == ("default", "redis")]
    assert redis["cluster_ips"] == [cluster.cluster_ip], redis
    assert all(e["rdmagw"] and e["port"] == 6379 for e in redis["ports"][0]["endpoints"]), redis
    # The agent logs the write after the rename that made the file visible.
    wait_for("the agent's event=services_written line", lambda: "event=services_written" in logs(agent) or None,
             timeout=10)
    # As the DaemonSet runs it: a read-only root, no capability; the
    # ServiceAccount's token (in-cluster configuration, no kubeconfig).
    assert podman("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}} {{.EffectiveCaps}}", agent).stdout.split() \
        == ["true", "[]"]
    assert "--kubeconfig" not in " ".join(json.loads(podman("inspect", "--format", "{{json .Args}}", agent).stdout))


def test_the_injected_client_reaches_the_service_over_three_endpoints_through_rdmagw(cluster):
    # The app's own loop (INCR visits every 5 s, to $REDIS_SERVICE_HOST).
    wait_for("the app's first reply", lambda: any(line.strip().isdigit() for line in
                                                  logs(cluster.client_app).splitlines()), timeout=60)
    r = cluster.connections(90, "spread")
    assert r.returncode == 0, r.stdout + r.stderr
    counts = cluster.counts("spread")
    assert sum(counts.values()) == 90 and min(counts.values()) >= 15, counts
    # Over the tunnel: the ClusterIP is routed nowhere in this network (no
    # kube-proxy); sessions to the three endpoints' sidecars carried it.
    peers = json.loads(podman("exec", cluster.client_sidecar, "rdmagwctl", "peers", "--json").stdout)["peers"]
    with_sessions = {p["name"] for p in peers if p["discovered"] and p["sessions"]}
    assert with_sessions == set(ENDPOINTS.values()), peers
    log = logs(cluster.client_sidecar)
    assert "event=streams_diverted" not in log and "event=service_endpoint_direct" not in log, log[-3000:]
    assert "direction=passthrough" not in log, log[-3000:]


def test_endpoint_churn_applies_to_new_connections_and_drops_no_open_one(cluster):
    held = subprocess.Popen(["podman", "exec", "-i", cluster.client_app, "redis-cli", "-h", cluster.cluster_ip,
                             "-p", "6379"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def held_incr(expected: int) -> None:
        held.stdin.write("incr held\n")
        held.stdin.flush()
        ready, _, _ = select.select([held.stdout], [], [], 30)
        assert ready, "the held connection did not answer within 30 s"
        assert held.stdout.readline().strip() == str(expected)

    try:
        held_incr(1)
        (home,) = [name for name, n in cluster.counts("held").items() if n == 1]
        others = [name for name in ENDPOINTS if name != home]

        cluster.set_endpoints([])  # 3 -> 0: new connections reset, the open one goes on
        r = cluster.connections(1, "none")
        assert r.returncode != 0 and "connection reset by peer" in (r.stdout + r.stderr).lower(), r
        held_incr(2)

        cluster.set_endpoints(others[:1])  # -> 1, not the held connection's
        assert cluster.connections(30, "one").returncode == 0
        assert cluster.counts("one") == {name: 30 if name == others[0] else 0 for name in ENDPOINTS}
        held_incr(3)

        cluster.set_endpoints(list(ENDPOINTS))  # -> 3 again
        held_incr(4)
        assert cluster.counts("held")[home] == 4
    finally:
        held.stdin.close()
        held.wait(timeout=30)
    # Spread again once the held connection is gone (while it is open, its
    # endpoint loses every pick against an idle one, by design).
    wait_for("the held connection's end to reach the client's rdmagw",
             lambda: all(e["streams"] == 0 for s in cluster.services() if s["name"] == "redis"
                         for e in s["ports"][0]["endpoints"]), timeout=15)
    assert cluster.connections(60, "three").returncode == 0
    counts = cluster.counts("three")
    assert sum(counts.values()) == 60 and min(counts.values()) >= 6, counts
