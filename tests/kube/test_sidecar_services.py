# SPDX-License-Identifier: Apache-2.0
"""A Service from the real API server, through the node agent, to a pod's
rdmagw that carries connections to its endpoints: the whole path of
docs/kubernetes.md, in the network namespaces of
tests/integration/service_cluster.py (client pod behind its node, kube-proxy's
DNAT of the ClusterIP to a sentinel, endpoints with and without rdmagw).

Service, EndpointSlices and pods are made through the API (no controller
manager, scheduler or kubelet run; the ClusterIP is the API server's). The
agent writes the services file that the pod's rdmagw reads. Measured: how
long an EndpointSlice change takes from `kubectl apply` returning to rdmagw
routing by it. Then endpoint churn 3 -> 0 -> 5 under open connections, and
the API server stopped and started again under traffic."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pytest

from conftest import Kube, integration
from test_agent import Agent, endpoint, endpoint_slice, pod, service

from clients import require_root_and, wait_for  # noqa: E402
from netns_hosts import run  # noqa: E402
from service_cluster import PORT, Cluster, service_cluster  # noqa: E402


def endpoints_seen(c: Cluster, namespace: str) -> list[tuple[str, int, str]] | None:
    """What the pod's rdmagw routes `namespace`/echo by: (address, port, state)."""
    for s in json.loads(c.admin("/services"))["table"]:
        if s["namespace"] == namespace and s["name"] == "echo":
            return sorted((e["address"], e["port"], e["state"]) for e in s["ports"][0]["endpoints"])
    return None


def test_a_service_from_the_api_server_is_carried_by_rdmagw_through_churn_and_an_outage(
        kube: Kube, agent_bin, namespace, tmp_path, procs):
    require_root_and(("ip", "iptables", "setpriv", "curl", "sysctl"), "the sidecar services test")
    if not os.path.exists(integration.RDMAGW_BIN):
        pytest.fail(f"no rdmagw at {integration.RDMAGW_BIN}: build it first (tools/dev/build)")
    kube.apply(service("echo", 80, PORT), namespace)
    cluster_ip = kube.get("service", "echo", namespace)["spec"]["clusterIP"]
    for name, sidecar in (("ep1", True), ("ep2", True), ("ep3", True), ("ep4", False)):
        kube.apply(pod(name, sidecar), namespace)
    # The pod's rdmagw maps the table the agent writes beside the JSON file
    # (the agent's Go writer, rdmagw's reader: the deployment's way).
    services, table = tmp_path / "services.json", tmp_path / "services.table"
    agent = Agent(agent_bin, kube.kubeconfig, services, tmp_path / "agent.log", table=table)

    def start_rdmagw(name: str, config: str, netns: str):
        path = tmp_path / f"{name}.yaml"
        path.write_text(config)
        sc = integration.Sidecar(name, path, tmp_path / f"{name}.log", integration.RDMAGW_BIN, netns=netns)
        procs.append(sc)
        return sc.start()

    def start_process(name: str, argv: list[str], log: Path):
        p = integration.ManagedProcess(name, argv, log)
        procs.append(p)
        return p.start()

    try:
        with service_cluster(start_rdmagw, start_process, tmp_path, table, integration.key_file(),
                             cluster_ips=(cluster_ip,)) as c:
            run_scenario(kube, namespace, cluster_ip, c)
    finally:
        agent.stop()


def apply_and_time(kube: Kube, namespace: str, c: Cluster, slices: list[dict], delete: tuple[str, ...],
                   want: list[tuple[str, int, str]], delays: list[float]) -> None:
    for s in slices:
        kube.apply(s, namespace)
    for name in delete:
        kube.run("delete", "endpointslice", name, "-n", namespace)
    started = time.monotonic()  # the API server has the change now
    wait_for(lambda: endpoints_seen(c, namespace) == sorted(want), 15, f"rdmagw routing by {want}")
    delays.append(time.monotonic() - started)


def run_scenario(kube: Kube, namespace: str, cluster_ip: str, c: Cluster) -> None:
    ip = c.ip
    delays: list[float] = []
    three = [endpoint(ip(i), f"ep{i}") for i in (1, 2, 3)]
    apply_and_time(kube, namespace, c, [endpoint_slice("echo-a", "echo", PORT, three)], (),
                   [(ip(i), PORT, "ready") for i in (1, 2, 3)], delays)
    # A few more changes, for the measurement: ep3 not ready, ready again.
    for _ in range(4):
        not_ready = three[:2] + [endpoint(ip(3), "ep3", ready=False)]
        apply_and_time(kube, namespace, c, [endpoint_slice("echo-a", "echo", PORT, not_ready)], (),
                       [(ip(1), PORT, "ready"), (ip(2), PORT, "ready"), (ip(3), PORT, "not-ready")], delays)
        apply_and_time(kube, namespace, c, [endpoint_slice("echo-a", "echo", PORT, three)], (),
                       [(ip(i), PORT, "ready") for i in (1, 2, 3)], delays)
    before = c.accepted()
    assert c.run_client(f"{cluster_ip}:80", 60, 8000) == ["ok"] * 60
    got = [a - b for a, b in zip(c.accepted(), before)]
    assert got[3] == 0 and all(n >= 8 for n in got[:3]), got
    assert c.sentinel() == 0, "a connection went through kube-proxy's rule"

    holder = c.client("hold", *[f"{cluster_ip}:80"] * 6)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()

        def echo_all() -> int:
            holder.stdin.write("echo\n")
            holder.stdin.flush()
            return int(holder.stdout.readline().split()[1])

        # 3 -> 0: refused at once; the held ones carry on.
        apply_and_time(kube, namespace, c, [endpoint_slice("echo-a", "echo", PORT, [])], (), [], delays)
        assert c.run_client(f"{cluster_ip}:80", 5, 1000) == ["reset"] * 5
        assert echo_all() == 6

        # 0 -> 5: ep4 without rdmagw, and ep4 again on another port in a
        # second slice (the Service's target port by slice).
        four = three + [endpoint(ip(4), "ep4")]
        apply_and_time(kube, namespace, c, [endpoint_slice("echo-a", "echo", PORT, four),
                                            endpoint_slice("echo-b", "echo", 8005, [endpoint(ip(4), "ep4")])], (),
                       [(ip(i), PORT, "ready") for i in (1, 2, 3, 4)] + [(ip(4), 8005, "ready")], delays)
        before = c.accepted()
        assert c.run_client(f"{cluster_ip}:80", 100, 4000) == ["ok"] * 100
        got = [a - b for a, b in zip(c.accepted(), before)]
        assert sum(got) == 100 and all(n >= 8 for n in got[:3]) and got[3] >= 25, got
        assert echo_all() == 6
        services = json.loads(c.admin("/services"))["table"]
        (mine,) = [s for s in services if s["namespace"] == namespace]
        assert {(e["address"], e["rdmagw"]) for e in mine["ports"][0]["endpoints"]} == {
            (ip(1), True), (ip(2), True), (ip(3), True), (ip(4), False)}

        # The API server stopped under traffic: the agent says so, rdmagw
        # keeps routing by what it knew, stays ready, drops nothing.
        traffic = c.client("run", f"{cluster_ip}:80:200:20000")
        kube.tool("stop-apiserver")
        try:
            wait_for(lambda: not c.status()["api"]["reachable"], 15, "the agent reporting the outage")
            # Logged after the table (and /stats) took the file in.
            wait_for(lambda: "event=services_api_unreachable" in c.pod.log_text(), 5,
                     "event=services_api_unreachable")
            out, err = traffic.communicate(timeout=90)
            assert traffic.returncode == 0, err
            ends = [r["end"] for r in json.loads(out)]
            assert ends == ["ok"] * 200, {e: ends.count(e) for e in set(ends)}
            assert c.run_client(f"{cluster_ip}:80", 20, 4000) == ["ok"] * 20
            assert echo_all() == 6
            assert c.metric("rdmagw_services_api_reachable") == 0
            ready = run("ip", "netns", "exec", c.pod_ns, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                        "http://127.0.0.1:9901/ready").stdout
            assert ready == "200"
        finally:
            kube.tool("start-apiserver")
        wait_for(lambda: c.status()["api"]["reachable"], 15, "the agent reaching the API server again")
        # A change made after the restart arrives and is routed by.
        apply_and_time(kube, namespace, c, [], ("echo-b",), [(ip(i), PORT, "ready") for i in (1, 2, 3, 4)],
                       delays)
        assert c.run_client(f"{cluster_ip}:80", 20, 4000) == ["ok"] * 20
        assert echo_all() == 6
        assert c.sentinel() == 0, "a connection went through kube-proxy's rule"
    finally:
        if holder.poll() is None:
            holder.stdin.close()
            holder.wait(timeout=30)
    # The last change came right after the API server's restart, while the
    # agent's watches were being re-established: reported apart.
    steady = delays[:-1]
    print(f"kubectl to rdmagw routing by the change ({len(steady)} changes): median "
          f"{statistics.median(steady) * 1000:.0f} ms, max {max(steady) * 1000:.0f} ms; the first change "
          f"after the API server's restart: {delays[-1] * 1000:.0f} ms "
          f"(agent --settle 50ms, rdmagw checks the file every 100 ms; each: "
          f"{', '.join(f'{d * 1000:.0f}' for d in delays)} ms)")
