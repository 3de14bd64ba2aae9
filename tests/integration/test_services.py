# SPDX-License-Identifier: Apache-2.0
"""Kubernetes Services through `action: service` routes (docs/kubernetes.md),
with the services file written here as rdmagw-k8s writes it (tests/kube runs
the agent against a real API server).

The shape of a cluster, in network namespaces made for each test:

    pod  --veth--  node  --bridge--  ep1 ep2 ep3 (each with its rdmagw)
                                     ep4         (no rdmagw)

The client pod has an injected rdmagw (transparent capture of the
ClusterIP range and of the endpoints' port) and no route of its own but
through its node, whose iptables hold kube-proxy's DNAT of the ClusterIPs
to a "kube-proxy" echo server on ep4:8001. So a connection that rdmagw
carries by Service never meets kube-proxy's rule (the sentinel counts none),
and one rdmagw does not know goes on to its next route, passthrough, where
kube-proxy does its job.

Endpoints count the connections they accept; every connection's echo is
checked by SHA-256 (fleet_client.py, one thread per client, resets read as
resets).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from clients import require_root_and, wait_for
from conftest import REPO, RDMAGWCTL_BIN, ManagedProcess, key_file
from fleet_hosts import ECHO_SERVER, fleet_hosts
from netns_hosts import run

SUBNET = "10.77.0"  # node .1, ep1..ep4 .2-.5
POD_IP, POD_GW = "10.78.0.2", "10.78.0.1"
CLUSTER_IP, OTHER_CLUSTER_IP = "10.96.0.10", "10.96.0.99"
PORT, SENTINEL_PORT = 8000, 8001
NOBODY = 65534
CLIENT = str(Path(__file__).with_name("fleet_client.py"))

def pod_config(services_file: Path) -> str:
    return f"""node: pod
workers: 2
admin: "127.0.0.1:9901"
tunnel:
  address: {POD_IP}
  tcp_port: 7471
  transport: tcp
  peer_cidrs: ["{SUBNET}.0/24"]
  auth: {{mode: psk, key_files: [{key_file()}]}}
services: {{file: {services_file}}}
listeners:
  - name: out
    listen: "transparent:127.0.0.1:15001"
    routes:
      - {{match: "10.96.0.0/16", action: service}}
      - {{match: "{SUBNET}.0/24", action: service}}
      - {{match: "{SUBNET}.0/24:{PORT}", peer: destination}}
      - {{match: "10.96.0.0/16", action: passthrough}}
shutdown_timeout_ms: 2000
"""


def endpoint_config(i: int, ip: str) -> str:
    return f"""node: ep{i}
workers: 1
admin: "127.0.0.1:9901"
tunnel:
  address: {ip}
  tcp_port: 7471
  transport: tcp
  auth: {{mode: psk, key_files: [{key_file()}]}}
targets: ["tcp:{ip}:{PORT}"]
shutdown_timeout_ms: 2000
"""


def endpoint(ip: str, port: int = PORT, state: str = "ready", rdmagw: bool = True, pod: str = "") -> dict:
    return {"address": ip, "port": port, "state": state, "rdmagw": rdmagw, "node": "n-" + ip, "pod": pod or "p-" + ip}


def services_file(endpoints: list[dict], reachable: bool = True, headless: list[dict] | None = None) -> dict:
    services = [{"namespace": "default", "name": "echo", "cluster_ips": [CLUSTER_IP],
                 "ports": [{"name": "echo", "port": 80, "endpoints": endpoints}]}]
    if headless is not None:
        services.append({"namespace": "default", "name": "echo-headless", "cluster_ips": [],
                         "ports": [{"port": PORT, "endpoints": headless}]})
    api = {"reachable": reachable, "since": "2026-11-28T04:00:00Z"}
    if not reachable:
        api["error"] = "Get \"https://127.0.0.1:6443/readyz\": connection refused"
    return {"format": "rdmagw-services/1", "api": api, "services": services}


class Cluster:
    def __init__(self, pod_ns: str, hosts, pod: ManagedProcess, servers: list[ManagedProcess], path: Path):
        self.pod_ns = pod_ns
        self.hosts = hosts  # [(namespace, address)]: node, ep1..ep4
        self.pod = pod
        self.servers = servers  # ep1..ep4's echo servers
        self.path = path

    def ip(self, i: int) -> str:
        return self.hosts[i][1]

    def write(self, content) -> None:
        """As the agent writes: a new file renamed over the old one."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(content if isinstance(content, str) else json.dumps(content))
        os.rename(tmp, self.path)

    def admin(self, path: str) -> str:
        return run("ip", "netns", "exec", self.pod_ns, "curl", "-sS", "--max-time", "5",
                   f"http://127.0.0.1:9901{path}").stdout

    def status(self) -> dict:
        return json.loads(self.admin("/stats"))["services"]

    def wait_loaded(self, loads: int) -> dict:
        return wait_for(lambda: (s := self.status())["loads"] >= loads and s, 5, f"services load #{loads}")

    def metric(self, name: str) -> float:
        for line in self.admin("/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no metric {name}")

    def accepted(self) -> list[int]:
        """Connections each endpoint host's echo server accepted so far (ep1..ep4)."""
        return [s.log_text().count("accepted") for s in self.servers]

    def client(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.pod_ns, "setpriv", f"--reuid={NOBODY}",
                                 f"--regid={NOBODY}", "--clear-groups", sys.executable, CLIENT, *args],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run_client(self, dest: str, count: int, size: int) -> list[str]:
        p = self.client("run", f"{dest}:{count}:{size}")
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
        return [r["end"] for r in json.loads(out)]

    def sessions_to(self) -> set[str]:
        peers = json.loads(self.admin("/peers"))["peers"]
        return {p["name"] for p in peers if p["discovered"] and p["sessions"]}


@contextlib.contextmanager
def pod_namespace(node_ns: str):
    """The client pod: its own namespace, a veth to its node, default route there."""
    tag = secrets.token_hex(2)
    ns, inner, outer = f"rgsp{tag}", f"rgsp{tag}a", f"rgsp{tag}b"
    run("ip", "netns", "add", ns)
    try:
        run("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
        run("ip", "link", "set", inner, "netns", ns)
        run("ip", "link", "set", outer, "netns", node_ns)
        run("ip", "-n", ns, "addr", "add", f"{POD_IP}/24", "dev", inner)
        run("ip", "-n", ns, "link", "set", inner, "up")
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", ns, "route", "add", "default", "via", POD_GW)
        run("ip", "-n", node_ns, "addr", "add", f"{POD_GW}/24", "dev", outer)
        run("ip", "-n", node_ns, "link", "set", outer, "up")
        run("ip", "netns", "exec", node_ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        yield ns
    finally:
        run("ip", "netns", "del", ns, check=False)


@pytest.fixture
def cluster(sidecar, procs, tmp_path):
    require_root_and(("ip", "iptables", "setpriv", "curl", "sysctl"), "services test")
    with fleet_hosts(5, SUBNET) as hosts, pod_namespace(hosts[0][0]) as pod_ns:
        node_ns = hosts[0][0]
        # kube-proxy, in the node: both ClusterIPs to the sentinel.
        for ip in (CLUSTER_IP, OTHER_CLUSTER_IP):
            run("ip", "netns", "exec", node_ns, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", ip, "-p", "tcp",
                "--dport", "80", "-j", "DNAT", "--to-destination", f"{SUBNET}.5:{SENTINEL_PORT}")
        servers = []
        for i, (ns, ip) in enumerate(hosts[1:], start=1):
            run("ip", "-n", ns, "route", "add", f"{POD_IP.rsplit('.', 1)[0]}.0/24", "via", hosts[0][1])
            ports = [str(PORT)] + ([str(SENTINEL_PORT), "8005"] if i == 4 else [])
            server = ManagedProcess(f"echo-ep{i}", ["ip", "netns", "exec", ns, sys.executable, "-u", "-c",
                                                   ECHO_SERVER, ip, *ports], tmp_path / f"echo-ep{i}.log")
            procs.append(server)
            server.start()
            servers.append(server)
            if i <= 3:
                sidecar(f"ep{i}", endpoint_config(i, ip), netns=ns).start()
        path = tmp_path / "services.json"
        pod = sidecar("pod", pod_config(path), netns=pod_ns)
        pod.start()
        run("ip", "netns", "exec", pod_ns, str(REPO / "tools" / "rdmagw-iptables"), "install", "--uid", "0",
            "--capture", "10.96.0.0/16:80", "--capture", f"{SUBNET}.0/24:{PORT}", "--redirect-port", "15001")
        for (ns, ip), s in zip(hosts[1:], servers):
            wait_for(lambda ns=ns: run("ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{PORT}").stdout, 5,
                     f"the echo server in {ns}")
        yield Cluster(pod_ns, hosts, pod, servers, path)


def ready_three_plus_direct(c: Cluster) -> list[dict]:
    """ep1-ep3 with rdmagw, ep4 without, and two that must get nothing."""
    return [endpoint(c.ip(1)), endpoint(c.ip(2)), endpoint(c.ip(3)), endpoint(c.ip(4), rdmagw=False),
            endpoint(c.ip(4), 8003, state="not-ready", rdmagw=False),
            endpoint(c.ip(3), 8004, state="terminating")]


def test_a_service_spreads_over_its_ready_endpoints_through_their_rdmagw_or_directly(cluster):
    c = cluster
    # No file yet: said so, and the Service's connections go on to the next
    # route (passthrough), where kube-proxy's DNAT sends them to the sentinel.
    status = wait_for(lambda: (s := c.status())["error"] and s, 5, "the missing file reported")
    assert status["loaded"] is False and "No such file" in status["error"], status
    assert c.run_client(f"{CLUSTER_IP}:80", 4, 1000) == ["ok"] * 4
    wait_for(lambda: c.accepted()[3] >= 4, 5, "the sentinel's 4 connections")
    before = c.accepted()

    c.write(services_file(ready_three_plus_direct(c)))
    status = c.wait_loaded(1)
    assert status["services"] == 1 and status["endpoints"] == 6 and status["error"] == "", status
    assert status["api"]["reachable"] is True

    ends = c.run_client(f"{CLUSTER_IP}:80", 200, 20000)
    assert ends == ["ok"] * 200, {e: ends.count(e) for e in set(ends)}
    got = [a - b for a, b in zip(c.accepted(), before)]
    # ep4 counts its :8000 (chosen, direct) and the sentinel together: the
    # sentinel must have had none, so ep4's are all rdmagw's choice.
    assert sum(got) == 200, got
    assert all(n >= 20 for n in got), f"not spread over the 4 ready endpoints: {got}"
    # ep1-ep3 through their rdmagw (a session each); ep4 directly (none).
    assert c.sessions_to() == {c.ip(1), c.ip(2), c.ip(3)}
    assert "ep4" not in c.pod.log_text() and "stream_rejected" not in c.pod.log_text()

    # A ClusterIP the file does not list: passthrough, so kube-proxy's.
    before = c.accepted()
    assert c.run_client(f"{OTHER_CLUSTER_IP}:80", 3, 1000) == ["ok"] * 3
    wait_for(lambda: c.accepted()[3] - before[3] == 3, 5, "3 more at the sentinel")

    # What the pod's rdmagw knows, by the admin endpoint and by rdmagwctl.
    table = json.loads(c.admin("/services"))
    eps = table["table"][0]["ports"][0]["endpoints"]
    assert [(e["address"], e["port"], e["state"], e["rdmagw"]) for e in eps] == [
        (c.ip(1), PORT, "ready", True), (c.ip(2), PORT, "ready", True), (c.ip(3), PORT, "ready", True),
        (c.ip(4), PORT, "ready", False), (c.ip(4), 8003, "not-ready", False), (c.ip(3), 8004, "terminating", True)]
    assert all(e["streams"] == 0 for e in eps)
    text = run("ip", "netns", "exec", c.pod_ns, RDMAGWCTL_BIN, "services").stdout
    assert "default/echo" in text and "API server: reachable" in text, text
    assert f"{c.ip(4)}:{PORT}" in text and "no (direct)" in text and "terminating" in text, text
    as_json = json.loads(run("ip", "netns", "exec", c.pod_ns, RDMAGWCTL_BIN, "services", "--json").stdout)
    assert as_json["table"] == table["table"]
    assert c.metric("rdmagw_services") == 1 and c.metric("rdmagw_service_endpoints") == 6
    assert c.metric("rdmagw_services_api_reachable") == 1
    assert c.metric('rdmagw_services_file_loads_total{result="failed"}') >= 1  # the missing file


def test_endpoint_churn_keeps_open_streams_and_moves_new_ones(cluster):
    c = cluster
    c.write(services_file([endpoint(c.ip(1)), endpoint(c.ip(2)), endpoint(c.ip(3))]))
    c.wait_loaded(1)
    holder = c.client("hold", *[f"{CLUSTER_IP}:80"] * 6)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        streams = {e["address"]: e["streams"]
                   for e in json.loads(c.admin("/services"))["table"][0]["ports"][0]["endpoints"]}
        assert sum(streams.values()) == 6, streams
        # Least loaded of two: 6 streams over 3 endpoints, none left without one.
        assert all(n >= 1 for n in streams.values()), streams

        def echo_all() -> int:
            holder.stdin.write("echo\n")
            holder.stdin.flush()
            return int(holder.stdout.readline().split()[1])

        # 3 -> 0: new connections are refused at once (a reset, as kube-proxy
        # rejects), the open ones carry on.
        c.write(services_file([]))
        c.wait_loaded(2)
        assert c.run_client(f"{CLUSTER_IP}:80", 5, 1000) == ["reset"] * 5
        assert "the Service has no ready endpoint" in c.pod.log_text()
        assert echo_all() == 6

        # 0 -> 5 (ep4 twice: :8000 and :8005, both direct): new ones spread
        # over all five, the open ones still carry on.
        five = [endpoint(c.ip(1)), endpoint(c.ip(2)), endpoint(c.ip(3)), endpoint(c.ip(4), rdmagw=False),
                endpoint(c.ip(4), 8005, rdmagw=False)]
        c.write(services_file(five))
        c.wait_loaded(3)
        before = c.accepted()
        assert c.run_client(f"{CLUSTER_IP}:80", 100, 4000) == ["ok"] * 100
        got = [a - b for a, b in zip(c.accepted(), before)]
        assert sum(got) == 100 and all(n >= 8 for n in got[:3]) and got[3] >= 25, got
        assert echo_all() == 6

        # The API server lost: the agent says so and keeps what it knew;
        # rdmagw keeps routing by it, says so, and stays ready.
        c.write(services_file(five, reachable=False))
        status = c.wait_loaded(4)
        assert status["api"]["reachable"] is False and "connection refused" in status["api"]["error"]
        assert c.metric("rdmagw_services_api_reachable") == 0
        assert "event=services_api_unreachable" in c.pod.log_text()
        assert run("ip", "netns", "exec", c.pod_ns, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                   "http://127.0.0.1:9901/ready").stdout == "200"
        assert c.run_client(f"{CLUSTER_IP}:80", 10, 4000) == ["ok"] * 10
        assert echo_all() == 6

        # A file that does not parse changes nothing: counted, shown, logged.
        failed = c.metric('rdmagw_services_file_loads_total{result="failed"}')  # the file missing at start
        c.write(json.dumps({"format": "rdmagw-services/1", "api": {"reachable": True}, "services": [{"name": 7}]}))
        status = wait_for(lambda: (s := c.status())["load_failures"] > failed and s, 5, "the bad file refused")
        assert status["loaded"] is True and "services[0]" in status["error"], status
        assert c.metric('rdmagw_services_file_loads_total{result="failed"}') == failed + 1
        assert "event=services_load_failed" in c.pod.log_text()
        assert c.run_client(f"{CLUSTER_IP}:80", 10, 4000) == ["ok"] * 10
        assert echo_all() == 6
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_a_headless_services_endpoints_go_through_their_rdmagw_or_directly(cluster):
    c = cluster
    headless = [endpoint(c.ip(2)), endpoint(c.ip(4), rdmagw=False), endpoint(c.ip(3), state="not-ready")]
    c.write(services_file([], headless=headless))
    c.wait_loaded(1)
    before = c.accepted()
    for i in (2, 3, 4):
        assert c.run_client(f"{c.ip(i)}:{PORT}", 3, 5000) == ["ok"] * 3, i
    got = [a - b for a, b in zip(c.accepted(), before)]
    assert got == [0, 3, 3, 3], got
    # ep2 and ep3 (the client's choice, even not ready) through their rdmagw;
    # ep4 directly.
    assert c.sessions_to() == {c.ip(2), c.ip(3)}
    # Not in the file: the next route (peer: destination).
    assert c.run_client(f"{c.ip(1)}:{PORT}", 2, 5000) == ["ok"] * 2
    assert c.sessions_to() == {c.ip(1), c.ip(2), c.ip(3)}
