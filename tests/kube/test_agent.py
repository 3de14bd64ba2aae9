# SPDX-License-Identifier: Apache-2.0
"""rdmagw-k8s, the node agent, against a real API server (tools/dev/kube-apiserver):
what it lists (--once), the rights it needs (docker/kubernetes/rdmagw-k8s-rbac.yaml
and no more), endpoint churn reaching the services file, and an API server
stopped and started again under it.

Objects are made through the API as a controller would (no controller manager,
scheduler or kubelet run): Services get their ClusterIP from the API server,
EndpointSlices and pods are written by the test. Each test works in a
namespace of its own and reads only its own entries of the file."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, Kube

RBAC = REPO / "docker" / "kubernetes" / "rdmagw-k8s-rbac.yaml"
SIDECAR_LABEL = "rdmagw.io/sidecar"


def service(name: str, port: int, target_port, port_name: str = "") -> dict:
    p = {"port": port, "targetPort": target_port, "protocol": "TCP"}
    if port_name:
        p["name"] = port_name
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [p]}}


def endpoint_slice(name: str, service_name: str, port: int, endpoints: list[dict], port_name: str = "") -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service_name}},
            "addressType": "IPv4",
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            "endpoints": endpoints}


def endpoint(address: str, pod: str, ready: bool = True, terminating: bool = False) -> dict:
    return {"addresses": [address], "nodeName": f"node-{pod}",
            "conditions": {"ready": ready, "serving": ready, "terminating": terminating},
            "targetRef": {"kind": "Pod", "name": pod}}


def pod(name: str, sidecar: bool) -> dict:
    labels = {"app": "redis"}
    if sidecar:
        labels[SIDECAR_LABEL] = "true"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "app", "image": "redis:7"}]}}


def once(agent_bin: str, kubeconfig: str, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([agent_bin, "--kubeconfig", kubeconfig, "--once", *extra], capture_output=True, text=True,
                          timeout=timeout)


def mine(file: dict, namespace: str) -> dict[str, dict]:
    return {s["name"]: s for s in file["services"] if s["namespace"] == namespace}


def test_once_prints_each_service_with_its_endpoints_states_and_sidecars(kube: Kube, agent_bin, namespace):
    kube.apply(service("redis", 6379, "redis-port"), namespace)
    kube.apply(endpoint_slice("redis-a", "redis", 6380, [
        endpoint("10.0.1.1", "redis-0"),
        endpoint("10.0.1.2", "redis-1", ready=False),
        endpoint("10.0.1.3", "redis-2", ready=True, terminating=True),
    ]), namespace)
    # The named target port resolved in a second slice, as the controller
    # splits large Services.
    kube.apply(endpoint_slice("redis-b", "redis", 6380, [endpoint("10.0.1.4", "redis-3")]), namespace)
    kube.apply(pod("redis-0", sidecar=True), namespace)
    kube.apply(pod("redis-3", sidecar=False), namespace)
    cluster_ip = kube.get("service", "redis", namespace)["spec"]["clusterIP"]

    proc = once(agent_bin, kube.kubeconfig)
    assert proc.returncode == 0, proc.stderr
    file = json.loads(proc.stdout)
    assert file["format"] == "rdmagw-services/1"
    assert file["api"]["reachable"] is True
    redis = mine(file, namespace)["redis"]
    assert redis["cluster_ips"] == [cluster_ip]
    assert [p["port"] for p in redis["ports"]] == [6379]
    got = [(e["address"], e["port"], e["state"], e["pod"], e["rdmagw"]) for e in redis["ports"][0]["endpoints"]]
    assert got == [
        ("10.0.1.1", 6380, "ready", "redis-0", True),
        ("10.0.1.2", 6380, "not-ready", "redis-1", False),
        ("10.0.1.3", 6380, "terminating", "redis-2", False),
        ("10.0.1.4", 6380, "ready", "redis-3", False),
    ]


def token_kubeconfig(kube: Kube, path: Path) -> str:
    token = kube.run("create", "token", "rdmagw-k8s", "-n", "kube-system", "--duration", "1h").stdout.strip()
    admin = json.loads(Path(kube.kubeconfig).read_text())
    config = {**admin, "users": [{"name": "agent", "user": {"token": token}}],
              "contexts": [{"name": "agent", "context": {"cluster": admin["clusters"][0]["name"], "user": "agent"}}],
              "current-context": "agent"}
    path.write_text(json.dumps(config))
    return str(path)


def node(name: str, node_mode: bool, tunnel: str = "") -> dict:
    labels = {"rdmagw.io/node-mode": ""} if node_mode else {}
    annotations = {"rdmagw.io/tunnel-address": tunnel} if tunnel else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels,
                                                             "annotations": annotations}}


def test_nodes_labelled_node_mode_are_written_with_their_tunnel_address(kube: Kube, agent_bin, namespace):
    """A node labelled rdmagw.io/node-mode is written with the address of its
    annotation, else its first IPv4 InternalIP, else its first IPv6 one; a
    node without the label is not, whatever it says; an annotation that is
    no address a node may hold leaves the node out, logged."""
    names = {n: f"{namespace}-{n}" for n in ("annotated", "internal", "unlabelled", "v6-only", "loopback")}
    made = []
    try:
        for key, manifest in [("annotated", node(names["annotated"], True, "10.0.9.1")),
                              ("internal", node(names["internal"], True)),
                              ("unlabelled", node(names["unlabelled"], False, "10.0.9.3")),
                              ("v6-only", node(names["v6-only"], True)),
                              ("loopback", node(names["loopback"], True, "127.0.0.1"))]:
            kube.apply(manifest)
            made.append(names[key])
        for key, addresses in [("internal", [{"type": "Hostname", "address": "h"},
                                             {"type": "InternalIP", "address": "fd00::2"},
                                             {"type": "InternalIP", "address": "10.0.9.2"}]),
                               ("v6-only", [{"type": "InternalIP", "address": "fd00::4"}])]:
            kube.run("patch", "node", names[key], "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": {"addresses": addresses}}))
        kube.apply(service("web", 80, 8080), namespace)
        on = [dict(endpoint(f"10.0.2.{i}", f"web-{i}"), nodeName=names[key])
              for i, key in enumerate(("annotated", "internal", "unlabelled"), start=1)]
        kube.apply(endpoint_slice("web-a", "web", 8080, on), namespace)

        proc = once(agent_bin, kube.kubeconfig)
        assert proc.returncode == 0, proc.stderr
        file = json.loads(proc.stdout)
        nodes = {n["name"]: n["tunnel"] for n in file["nodes"] if n["name"].startswith(namespace + "-")}
        assert nodes == {names["annotated"]: "10.0.9.1", names["internal"]: "10.0.9.2",
                         names["v6-only"]: "fd00::4"}, file["nodes"]
        web = mine(file, namespace)["web"]
        assert [e["node"] for e in web["ports"][0]["endpoints"]] == \
            [names["annotated"], names["internal"], names["unlabelled"]]
        assert "address_refused" in proc.stderr and names["loopback"] in proc.stderr, proc.stderr
    finally:
        for name in made:
            kube.run("delete", "node", name, "--wait=false", check=False)


def test_the_agent_works_with_its_rbac_and_has_no_other_right(kube: Kube, agent_bin, namespace, tmp_path):
    kube.apply(RBAC.read_text())
    kubeconfig = token_kubeconfig(kube, tmp_path / "agent.kubeconfig")
    kube.apply(service("web", 80, 8080), namespace)
    kube.apply(endpoint_slice("web-a", "web", 8080, [endpoint("10.0.2.1", "web-0")]), namespace)

    as_agent = once(agent_bin, kubeconfig)
    as_admin = once(agent_bin, kube.kubeconfig)
    assert as_agent.returncode == 0, as_agent.stderr
    assert mine(json.loads(as_agent.stdout), namespace) == mine(json.loads(as_admin.stdout), namespace)

    who = "system:serviceaccount:kube-system:rdmagw-k8s"
    for verb, resource in [("get", "secrets"), ("list", "secrets"), ("get", "services"), ("create", "services"),
                           ("update", "endpointslices.discovery.k8s.io"), ("get", "nodes"), ("update", "nodes"),
                           ("get", "pods"), ("create", "pods")]:
        answer = kube.run("auth", "can-i", verb, resource, "-A", "--as", who, check=False)
        assert answer.stdout.strip() == "no", f"{who} may {verb} {resource}"

    # Each rule is needed: without one, the first list fails and says which.
    role = kube.run("get", "clusterrole", "rdmagw-k8s", "-o", "json")
    full = json.loads(role.stdout)
    try:
        for missing in ("services", "pods", "endpointslices", "nodes"):
            reduced = json.loads(json.dumps(full))
            for rule in reduced["rules"]:
                rule["resources"] = [r for r in rule["resources"] if r != missing]
            reduced["rules"] = [r for r in reduced["rules"] if r["resources"]]
            for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
                reduced["metadata"].pop(key, None)
            kube.run("replace", "-f", "-", input=json.dumps(reduced))
            proc = once(agent_bin, kubeconfig, "--sync-timeout", "4s")
            assert proc.returncode == 1, f"without {missing}: exit {proc.returncode}\n{proc.stdout}"
            assert "did not finish within 4s" in proc.stderr and missing in proc.stderr, proc.stderr
    finally:
        kube.apply(RBAC.read_text())


class Agent:
    """rdmagw-k8s --output FILE, running."""

    def __init__(self, agent_bin: str, kubeconfig: str, output: Path, log: Path, table: Path | None = None):
        self.output = output
        self.log = log
        extra = ["--table", str(table)] if table else []
        self.proc = subprocess.Popen([agent_bin, "--kubeconfig", kubeconfig, "--output", str(output),
                                      "--settle", "50ms", *extra], stdout=subprocess.DEVNULL, stderr=open(log, "w"))

    def read(self) -> dict | None:
        try:
            return json.loads(self.output.read_text())
        except FileNotFoundError:
            return None

    def wait_for(self, what: str, predicate, timeout: float = 15) -> tuple[dict, float]:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            file = self.read()
            if file is not None and predicate(file):
                return file, time.monotonic() - started
            assert self.proc.poll() is None, f"the agent exited ({self.proc.returncode}):\n{self.log.read_text()}"
            time.sleep(0.01)
        raise AssertionError(f"{what}: not in {self.output} within {timeout} s; last:\n"
                             f"{json.dumps(self.read(), indent=1)}\nlog:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(timeout=10) == 0, self.log.read_text()


@pytest.fixture
def agent(kube: Kube, agent_bin, tmp_path):
    a = Agent(agent_bin, kube.kubeconfig, tmp_path / "services.json", tmp_path / "agent.log")
    yield a
    a.stop()


def ready_addresses(file: dict, namespace: str, name: str) -> list[str] | None:
    svc = mine(file, namespace).get(name)
    if svc is None:
        return None
    return [e["address"] for e in svc["ports"][0]["endpoints"] if e["state"] == "ready"]


def test_endpoint_churn_reaches_the_file_and_each_change_is_timed(kube: Kube, agent, namespace):
    kube.apply(service("cache", 11211, 11211), namespace)
    sets = [["10.0.4.1", "10.0.4.2", "10.0.4.3"], [], ["10.0.4.11", "10.0.4.12", "10.0.4.13", "10.0.4.14", "10.0.4.15"],
            ["10.0.4.11", "10.0.4.12"], ["10.0.4.1", "10.0.4.2", "10.0.4.3"]]
    delays = []
    for _ in range(2):
        for addresses in sets:
            kube.apply(endpoint_slice("cache-a", "cache", 11211,
                                      [endpoint(a, f"c-{a.rsplit('.', 1)[1]}") for a in addresses]), namespace)
            applied = time.monotonic()
            agent.wait_for(f"endpoints {addresses}", lambda f: ready_addresses(f, namespace, "cache") == addresses)
            delays.append(time.monotonic() - applied)
    # kubectl's own return is the start: the write reached etcd then.
    print(f"propagation from kubectl apply to the services file: median {statistics.median(delays) * 1000:.0f} ms, "
          f"max {max(delays) * 1000:.0f} ms over {len(delays)} changes (--settle 50ms)")
    # The file is replaced whole, by rename: no reader saw it empty or cut.
    assert json.loads(agent.output.read_text())["format"] == "rdmagw-services/1"
    # Not one rewrite per event: unchanged content is not written again.
    written = agent.log.read_text().count("event=services_written")
    assert written <= 1 + 2 * len(sets) + 2, agent.log.read_text()


def test_an_api_server_outage_keeps_the_last_services_and_the_file_says_so(kube: Kube, agent, namespace):
    kube.apply(service("db", 5432, 5432), namespace)
    kube.apply(endpoint_slice("db-a", "db", 5432, [endpoint("10.0.5.1", "db-0")]), namespace)
    before, _ = agent.wait_for("db with one endpoint", lambda f: ready_addresses(f, namespace, "db") == ["10.0.5.1"])
    assert before["api"]["reachable"] is True

    kube.tool("stop-apiserver")
    try:
        during, delay = agent.wait_for("api unreachable", lambda f: f["api"]["reachable"] is False)
        print(f"outage noticed after {delay:.1f} s: {during['api']}")
        assert during["api"]["error"], during["api"]
        assert mine(during, namespace) == mine(before, namespace), "the services were dropped in the outage"
        time.sleep(3)
        assert mine(agent.read(), namespace) == mine(before, namespace)
        assert agent.proc.poll() is None, "the agent exited in the outage"
    finally:
        kube.tool("start-apiserver")
    after, delay = agent.wait_for("api reachable again", lambda f: f["api"]["reachable"] is True, timeout=30)
    print(f"reachable again {delay:.1f} s after the API server was ready")
    # Changes made after the restart arrive: the watches came back.
    kube.apply(endpoint_slice("db-a", "db", 5432, [endpoint("10.0.5.1", "db-0"), endpoint("10.0.5.2", "db-1")]),
               namespace)
    agent.wait_for("db with two endpoints", lambda f: ready_addresses(f, namespace, "db") == ["10.0.5.1", "10.0.5.2"],
                   timeout=30)
    assert "event=api_unreachable" in agent.log.read_text()
    assert "event=api_reachable" in agent.log.read_text()


def test_the_command_line_says_what_is_wrong(agent_bin, tmp_path):
    def run(*args, env=None):
        return subprocess.run([agent_bin, *args], capture_output=True, text=True, timeout=30,
                              env=env if env is not None else {k: v for k, v in os.environ.items() if k != "KUBECONFIG"})

    help_ = run("--help")
    assert help_.returncode == 0 and "--once" in help_.stderr and "RBAC" in help_.stderr
    assert run("--version").stdout.strip() == "rdmagw-k8s 0.1.0"
    both = run("--once", "--output", str(tmp_path / "f"))
    assert both.returncode == 2 and "exactly one of --output FILE and --once" in both.stderr
    neither = run("--once")
    assert neither.returncode == 2 and "neither --kubeconfig nor $KUBECONFIG" in neither.stderr
    missing = run("--once", "--kubeconfig", str(tmp_path / "absent"))
    assert missing.returncode == 2 and "kubeconfig" in missing.stderr and "absent" in missing.stderr
    stray = run("--once", "extra")
    assert stray.returncode == 2 and "unexpected argument" in stray.stderr
