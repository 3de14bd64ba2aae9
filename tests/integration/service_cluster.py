# SPDX-License-Identifier: Apache-2.0
"""The shape of a cluster for the Kubernetes Services tests, in network
namespaces made for one test: a client pod with rdmagw behind its node, whose
iptables hold kube-proxy's DNAT of the ClusterIPs to a sentinel echo server,
and endpoint hosts with and without rdmagw:

    pod  --veth--  node  --bridge--  ep1 ep2 ep3 (each with its rdmagw)
                                     ep4         (none; also the sentinel on :8001
                                                  and a second endpoint on :8005)

tests/integration/test_services.py writes the services file itself;
tests/kube/test_sidecar_services.py has the node agent write it from a real
API server. Both start processes through the callables they pass in, so each
suite's own process bookkeeping (and sanitizer checks) applies."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Callable

from clients import wait_for
from fleet_hosts import ECHO_SERVER, fleet_hosts
from netns_hosts import run

SUBNET = "10.77.0"  # node .1, ep1..ep4 .2-.5
POD_IP, POD_GW = "10.78.0.2", "10.78.0.1"
CLUSTER_IP, OTHER_CLUSTER_IP = "10.96.0.10", "10.96.0.99"  # when the test picks them
PORT, SENTINEL_PORT = 8000, 8001
NOBODY = 65534
CLIENT = str(Path(__file__).with_name("fleet_client.py"))
REPO = Path(__file__).resolve().parents[2]


def pod_config(services_file: Path, key: str) -> str:
    return f"""node: pod
workers: 2
admin: "127.0.0.1:9901"
tunnel:
  address: {POD_IP}
  tcp_port: 7471
  transport: tcp
  peer_cidrs: ["{SUBNET}.0/24"]
  auth: {{mode: psk, key_files: [{key}]}}
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


def serving_config(node: str, ip: str, key: str, serves: str) -> str:
    """An rdmagw that accepts tunnels at `ip` and opens what `serves` (its
    targets, and what they need) allows."""
    return f"""node: {node}
workers: 1
admin: "127.0.0.1:9901"
tunnel:
  address: {ip}
  tcp_port: 7471
  transport: tcp
  auth: {{mode: psk, key_files: [{key}]}}
{serves}
shutdown_timeout_ms: 2000
"""


def endpoint_config(i: int, ip: str, key: str) -> str:
    # tcp:self: this pod's own address, as a ConfigMap shared by replicas writes it.
    return serving_config(f"ep{i}", ip, key, f'targets: ["tcp:self:{PORT}"]')


class Cluster:
    """The namespaces and processes of service_cluster(): `pod` is the pod's
    rdmagw, `servers` ep1..ep4's echo servers (processes with .log_text())."""

    def __init__(self, pod_ns: str, hosts, pod, servers: list, path: Path):
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

    def sentinel(self) -> int:
        """Connections kube-proxy's DNAT brought to the sentinel."""
        return self.servers[3].log_text().count(f"accepted {SENTINEL_PORT}\n")

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




@contextlib.contextmanager
def service_cluster(start_rdmagw: Callable, start_process: Callable, tmp_path: Path, services_path: Path, key: str,
                    cluster_ips=(CLUSTER_IP, OTHER_CLUSTER_IP)):
    """Yields a Cluster whose pod's rdmagw reads `services_path`; kube-proxy's
    DNAT sends each of `cluster_ips`:80 to the sentinel. start_rdmagw(name,
    config_text, netns) and start_process(name, argv, log_path) return
    started processes (with .log_text(), .running())."""
    with fleet_hosts(5, SUBNET) as hosts, pod_namespace(hosts[0][0]) as pod_ns:
        node_ns = hosts[0][0]
        for ip in cluster_ips:
            run("ip", "netns", "exec", node_ns, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", ip, "-p", "tcp",
                "--dport", "80", "-j", "DNAT", "--to-destination", f"{SUBNET}.5:{SENTINEL_PORT}")
        servers = []
        for i, (ns, ip) in enumerate(hosts[1:], start=1):
            run("ip", "-n", ns, "route", "add", f"{POD_IP.rsplit('.', 1)[0]}.0/24", "via", hosts[0][1])
            ports = [str(PORT)] + ([str(SENTINEL_PORT), "8005"] if i == 4 else [])
            servers.append(start_process(f"echo-ep{i}", ["ip", "netns", "exec", ns, sys.executable, "-u", "-c",
                                                         ECHO_SERVER, ip, *ports], tmp_path / f"echo-ep{i}.log"))
            if i <= 3:
                start_rdmagw(f"ep{i}", endpoint_config(i, ip, key), ns)
        pod = start_rdmagw("pod", pod_config(services_path, key), pod_ns)
        run("ip", "netns", "exec", pod_ns, str(REPO / "tools" / "rdmagw-iptables"), "install", "--uid", "0",
            "--capture", "10.96.0.0/16:80", "--capture", f"{SUBNET}.0/24:{PORT}", "--redirect-port", "15001")
        for ns, _ in hosts[1:]:
            wait_for(lambda ns=ns: run("ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{PORT}").stdout, 5,
                     f"the echo server in {ns}")
        yield Cluster(pod_ns, hosts, pod, servers, services_path)
