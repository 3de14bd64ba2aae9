# SPDX-License-Identifier: Apache-2.0
"""IPv6 Services through `action: service` routes (docs/kubernetes.md), in
two network namespaces made for the test and joined by a veth pair: the
client pod (A) with an injected rdmagw that ip6tables' redirect gives the
connections to the ClusterIP range and to the endpoints' port, and a host B
that holds two IPv6 endpoints, one with its rdmagw, one without:

    A fd00:203::1  --veth--  B fd00:203::2 (rdmagw, echo :8000)
                               fd00:203::3 (echo :8000, no rdmagw)

A's route to the ClusterIP range goes to B, which holds no ClusterIP: a
connection rdmagw did not carry would find nothing there. Every echo is
checked by SHA-256 (fleet_client.py: one thread per client, resets read as
resets)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clients import require_root_and, wait_for
from conftest import ManagedProcess, key_file
from fleet_hosts import ECHO_SERVER
from netns_hosts import run, two_hosts

A, B1, B2 = "fd00:203::1", "fd00:203::2", "fd00:203::3"
CLUSTER_IP = "fd96::10"
PORT = 8000
NOBODY = 65534
CLIENT = str(Path(__file__).with_name("fleet_client.py"))
REPO = Path(__file__).resolve().parents[2]


def pod_config(services: Path) -> str:
    return f"""node: pod
workers: 2
admin: "127.0.0.1:9901"
tunnel:
  address: "{A}"
  tcp_port: 7471
  transport: tcp
  peer_cidrs: ["fd00:203::/64"]
  auth: {{mode: psk, key_files: [{key_file()}]}}
services: {{file: {services}}}
listeners:
  - name: out
    listen: "transparent:[::1]:15001"
    routes:
      - {{match: "fd96::/112", action: service}}
      - {{match: "[fd00:203::/64]:{PORT}", action: service}}
shutdown_timeout_ms: 2000
"""


def endpoint_config() -> str:
    return f"""node: ep
workers: 1
admin: "127.0.0.1:9901"
tunnel:
  address: "{B1}"
  tcp_port: 7471
  transport: tcp
  auth: {{mode: psk, key_files: [{key_file()}]}}
targets: ["tcp:self:{PORT}"]
shutdown_timeout_ms: 2000
"""


def services(cluster_ips: list[str]) -> dict:
    endpoints = [{"address": B1, "port": PORT, "state": "ready", "rdmagw": True, "node": "b", "pod": "ep-0"},
                 {"address": B2, "port": PORT, "state": "ready", "rdmagw": False, "node": "b", "pod": "ep-1"}]
    return {"format": "rdmagw-services/1", "api": {"reachable": True, "since": "2026-11-29T00:00:00Z"},
            "services": [{"namespace": "default", "name": "echo6", "cluster_ips": cluster_ips,
                          "ports": [{"name": "echo", "port": 80, "endpoints": endpoints}]}]}


@pytest.fixture
def six(sidecar, procs, tmp_path):
    require_root_and(("ip", "ip6tables", "setpriv", "curl"), "IPv6 services test")
    with two_hosts(A, B1, 64) as h:
        run("ip", "-n", h.b, "addr", "add", f"{B2}/64", "dev", h.veth_b, "nodad")
        run("ip", "-n", h.a, "-6", "route", "add", "fd96::/112", "via", B1)
        echo = ManagedProcess("echo6", ["ip", "netns", "exec", h.b, sys.executable, "-u", "-c", ECHO_SERVER, "::",
                                        str(PORT)], tmp_path / "echo6.log")
        procs.append(echo)
        echo.start()
        sidecar("ep", endpoint_config(), netns=h.b).start()
        path = tmp_path / "services.json"
        path.write_text(json.dumps(services([CLUSTER_IP])))
        pod = sidecar("pod", pod_config(path), netns=h.a).start()
        run("ip", "netns", "exec", h.a, str(REPO / "tools" / "rdmagw-iptables"), "install", "--ipv6", "--uid", "0",
            "--capture", "fd96::/112:80", "--capture", f"fd00:203::/64:{PORT}", "--redirect-port", "15001")
        wait_for(lambda: run("ip", "netns", "exec", h.b, "ss", "-Hltn", f"sport = :{PORT}").stdout, 5,
                 "the echo server")
        yield h, pod, echo, path


def admin(ns: str, path: str) -> str:
    return run("ip", "netns", "exec", ns, "curl", "-sS", "--max-time", "5", f"http://127.0.0.1:9901{path}").stdout


def run_client(ns: str, dest: str, count: int, size: int) -> list[str]:
    p = subprocess_client(ns, f"{dest}:{count}:{size}")
    out, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    return [r["end"] for r in json.loads(out)]


def subprocess_client(ns: str, spec: str):
    import subprocess
    return subprocess.Popen(["ip", "netns", "exec", ns, "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                             "--clear-groups", sys.executable, CLIENT, "run", spec],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def accepted(ns: str) -> int:
    """Connections the pod's transparent listener took (every one that
    reached rdmagw, carried through a tunnel or directly)."""
    return json.loads(admin(ns, "/stats"))["listeners"][0]["accepted"]


def test_an_ipv6_service_goes_to_its_ipv6_endpoints_through_their_rdmagw_or_directly(six):
    h, pod, echo, _ = six
    wait_for(lambda: json.loads(admin(h.a, "/stats"))["services"]["loads"] >= 1, 5, "the services file read")
    ends = run_client(h.a, f"{CLUSTER_IP}:80", 40, 20000)
    assert ends == ["ok"] * 40, ends
    assert echo.log_text().count(f"accepted {PORT}\n") == 40
    assert accepted(h.a) == 40
    # Through ep's rdmagw (a session to B1, whose streams its rdmagw
    # opened) and directly to B2: each pick is the less loaded of the two,
    # so both got some.
    peers = json.loads(admin(h.a, "/peers"))["peers"]
    assert {p["name"] for p in peers if p["discovered"] and p["sessions"]} == {B1}, peers
    through = json.loads(admin(h.a, "/stats"))["peers"]
    opened = sum(p["streams_opened"] for p in through if p["name"] == B1)
    assert 0 < opened < 40, through
    table = json.loads(admin(h.a, "/services"))["table"][0]
    assert table["cluster_ips"] == [CLUSTER_IP]
    shown = {e["address"]: e for e in table["ports"][0]["endpoints"]}
    assert set(shown) == {B1, B2} and shown[B1]["tunnel"] == "up", shown
    # The endpoint's own address (a headless Service's client dials it),
    # through rdmagw too.
    assert run_client(h.a, f"{B2}:{PORT}", 3, 5000) == ["ok"] * 3
    assert accepted(h.a) == 43


def test_a_dual_stack_service_is_found_by_its_ipv6_cluster_ip(six):
    """Both ClusterIPs in the file (the agent writes a dual-stack Service's
    both): the IPv6 one finds the Service; the IPv4 one is in the table too
    (/services) though this pod has no IPv4 route to capture."""
    h, pod, echo, path = six
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(services(["10.96.0.10", CLUSTER_IP])))
    tmp.rename(path)
    wait_for(lambda: json.loads(admin(h.a, "/stats"))["services"]["loads"] >= 2, 5, "the second services file")
    assert json.loads(admin(h.a, "/services"))["table"][0]["cluster_ips"] == ["10.96.0.10", CLUSTER_IP]
    assert run_client(h.a, f"{CLUSTER_IP}:80", 10, 5000) == ["ok"] * 10
    assert "stream_rejected" not in pod.log_text(), pod.tail()
