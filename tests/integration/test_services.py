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

import json
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from clients import require_root_and, wait_for
from conftest import RDMAGWCTL_BIN, ManagedProcess, key_file
from fleet_hosts import ECHO_SERVER
from netns_hosts import run
from service_cluster import CLUSTER_IP, OTHER_CLUSTER_IP, POD_IP, PORT, Cluster, service_cluster, serving_config


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


def two_services(first: list[dict], other: list[dict]) -> dict:
    """The file's Service "echo" at CLUSTER_IP with `first`, and "other" at
    OTHER_CLUSTER_IP with `other`."""
    content = services_file(first)
    content["services"].append({"namespace": "default", "name": "other", "cluster_ips": [OTHER_CLUSTER_IP],
                                "ports": [{"name": "echo", "port": 80, "endpoints": other}]})
    return content


def set_direct(c: Cluster, mode: str | None) -> None:
    """Reloads the pod's rdmagw with services.direct: `mode` (None: the key
    left out, so the default) and checks /services says it."""
    config = c.pod.config_path.read_text()
    line = re.search(r"^services: \{.*\}$", config, re.M)
    assert line, config
    wanted = f"services: {{file: {c.path}" + (f", direct: {mode}" if mode else "") + "}"
    c.pod.config_path.write_text(config.replace(line.group(0), wanted))
    answer = json.loads(run("ip", "netns", "exec", c.pod_ns, "curl", "-sS", "--max-time", "5", "-X", "POST",
                            "http://127.0.0.1:9901/reload").stdout)
    assert answer["ok"], answer
    assert json.loads(c.admin("/services"))["direct"] == (mode or "without_rdmagw")


def endpoint_tunnels(c: Cluster) -> dict[str, dict]:
    """/services: each endpoint with rdmagw of the first Service, by address:
    its tunnel state and error."""
    eps = json.loads(c.admin("/services"))["table"][0]["ports"][0]["endpoints"]
    return {e["address"]: {"tunnel": e["tunnel"], "tunnel_error": e["tunnel_error"]} for e in eps if e["rdmagw"]}


def node_iptables(c: Cluster, *args: str):
    return run("ip", "netns", "exec", c.hosts[0][0], "iptables", *args)


@contextmanager
def forward_rules(c: Cluster, *rules: list[str]):
    """Inserts `rules` at the top of the node's FORWARD chain (the router
    between the pod and the endpoints) and deletes them after."""
    added = []
    try:
        for rule in rules:
            node_iptables(c, "-I", "FORWARD", *rule)
            added.append(rule)
        yield
    finally:
        for rule in reversed(added):
            node_iptables(c, "-D", "FORWARD", *rule)


def forward_packets(c: Cluster, comment: str) -> int:
    """Packets the node's FORWARD rule commented `comment` counted."""
    for line in node_iptables(c, "-nvx", "-L", "FORWARD").stdout.splitlines():
        if f"/* {comment} */" in line:
            return int(line.split()[0])
    raise AssertionError(f"no FORWARD rule /* {comment} */ in the node")


@pytest.fixture
def cluster(sidecar, procs, tmp_path):
    require_root_and(("ip", "iptables", "setpriv", "curl", "sysctl"), "services test")

    def start_rdmagw(name: str, config: str, netns: str):
        return sidecar(name, config, netns=netns).start()

    def start_process(name: str, argv: list[str], log: Path):
        process = ManagedProcess(name, argv, log)
        procs.append(process)
        return process.start()

    with service_cluster(start_rdmagw, start_process, tmp_path, tmp_path / "services.json", key_file()) as c:
        yield c


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
    wait_for(lambda: c.sentinel() == 4, 5, "the sentinel's 4 connections")
    before = c.accepted()

    c.write(services_file(ready_three_plus_direct(c)))
    status = c.wait_loaded(1)
    assert status["services"] == 1 and status["endpoints"] == 6 and status["error"] == "", status
    assert status["api"]["reachable"] is True

    ends = c.run_client(f"{CLUSTER_IP}:80", 200, 20000)
    assert ends == ["ok"] * 200, {e: ends.count(e) for e in set(ends)}
    got = [a - b for a, b in zip(c.accepted(), before)]
    assert sum(got) == 200 and c.sentinel() == 4, got  # none of them through kube-proxy's rule
    assert all(n >= 20 for n in got), f"not spread over the 4 ready endpoints: {got}"
    # ep1-ep3 through their rdmagw (a session each); ep4 directly (none).
    assert c.sessions_to() == {c.ip(1), c.ip(2), c.ip(3)}
    assert "ep4" not in c.pod.log_text() and "stream_rejected" not in c.pod.log_text()

    # A ClusterIP the file does not list: passthrough, so kube-proxy's.
    assert c.run_client(f"{OTHER_CLUSTER_IP}:80", 3, 1000) == ["ok"] * 3
    wait_for(lambda: c.sentinel() == 7, 5, "3 more at the sentinel")

    # What the pod's rdmagw knows, by the admin endpoint and by rdmagwctl.
    def endpoints() -> list[dict]:
        return json.loads(c.admin("/services"))["table"][0]["ports"][0]["endpoints"]

    # An endpoint's count drops when rdmagw lets go of the stream, which
    # may be after its client saw the end.
    wait_for(lambda: all(e["streams"] == 0 for e in endpoints()), 5, "no stream counted on any endpoint")
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
        # Counted per endpoint while open. (Which endpoints: each of the two
        # workers picks among its own counts; the unit test pins the choice.)
        assert sum(streams.values()) == 6 and len([n for n in streams.values() if n]) >= 2, streams

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
        # Logged after the table (and /stats) took the file in.
        wait_for(lambda: "event=services_api_unreachable" in c.pod.log_text(), 5, "event=services_api_unreachable")
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
        # Logged after /stats counted it.
        wait_for(lambda: "event=services_load_failed" in c.pod.log_text(), 5, "event=services_load_failed")
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


def test_an_endpoint_whose_label_lies_is_reached_directly_once_its_tunnel_port_refuses(cluster):
    """ep4 has no rdmagw, but the file says it has (a label that lies, or a
    sidecar gone while its endpoint is still listed ready): the connections
    waiting for the dial to its tunnel port go to ep4 directly once it is
    refused, and the next ones go directly from the start.

    This is the opt-in `services.direct: fallback`, not the default
    (without_rdmagw, under which these connections would be reset, see
    test_a_reset_of_the_tunnel_port_on_the_path_does_not_take_service_connections_out_of_the_tunnel):
    a reset of the tunnel port by a host on the path sends them out in clear
    just the same."""
    c = cluster
    set_direct(c, "fallback")
    c.write(services_file([endpoint(c.ip(4), rdmagw=True)]))
    c.wait_loaded(1)
    before = c.accepted()
    for batch in (20, 20):  # the first waits for the refused dial, the second knows
        ends = c.run_client(f"{CLUSTER_IP}:80", batch, 5000)
        assert ends == ["ok"] * batch, ends
    got = [a - b for a, b in zip(c.accepted(), before)]
    assert got == [0, 0, 0, 40] and c.sentinel() == 0, got
    log = c.pod.log_text()
    assert "event=streams_diverted" in log, c.pod.tail()
    assert "event=service_endpoint_direct" in log and "refused the connection" in log, c.pod.tail()
    assert "stream_failed" not in log and "end=reset" not in log, c.pod.tail()
    assert c.sessions_to() == set()


def test_a_reset_of_the_tunnel_port_on_the_path_does_not_take_service_connections_out_of_the_tunnel(cluster):
    """An attacker on the path (here the node, the router between the pod and
    the endpoints) answers ep1's tunnel port with resets. ep1 has rdmagw, so
    by default (services.direct: without_rdmagw) its connections wait for a
    session, are reset after tunnel.connect_timeout_ms, and not one byte goes
    to ep1 in clear; /services shows why. `direct: fallback` is the opt-in
    that sends them directly instead: what the attacker wanted (in clear,
    past the tunnel's authentication). Once the path is clean again, with
    the default back, they go through ep1's rdmagw."""
    c = cluster
    ep1 = c.ip(1)
    refuse = ["-p", "tcp", "-d", ep1, "--dport", "7471", "-j", "REJECT", "--reject-with", "tcp-reset"]
    clear = ["-p", "tcp", "-d", ep1, "--dport", str(PORT), "-m", "comment", "--comment", "rdmagw-test-clear"]
    assert json.loads(c.admin("/services"))["direct"] == "without_rdmagw"  # the default
    c.write(services_file([endpoint(ep1)]))
    c.wait_loaded(1)
    n = 10
    with forward_rules(c, clear, refuse):
        before = c.accepted()
        t0 = time.monotonic()
        ends = c.run_client(f"{CLUSTER_IP}:80", n, 5000)
        waited = time.monotonic() - t0
        assert ends == ["reset"] * n, ends
        assert waited >= 2.9, f"reset after {waited:.1f}s, before tunnel.connect_timeout_ms (3 s)"
        assert [a - b for a, b in zip(c.accepted(), before)] == [0, 0, 0, 0] and c.sentinel() == 0
        assert forward_packets(c, "rdmagw-test-clear") == 0, "bytes went to ep1 in clear"
        assert c.sessions_to() == set()
        tunnel = wait_for(lambda: (t := endpoint_tunnels(c)[ep1])["tunnel"] == "down" and t, 10,
                          f"ep1's tunnel down in /services: {endpoint_tunnels(c)}")
        assert "refused" in tunnel["tunnel_error"], tunnel
        log = c.pod.log_text()
        assert "event=streams_diverted" not in log and "event=service_endpoint_direct" not in log, c.pod.tail()
        assert "no session to peer" in log, c.pod.tail()

        # The opt-in: the same connections go to ep1 directly, in clear.
        set_direct(c, "fallback")
        before = c.accepted()
        ends = c.run_client(f"{CLUSTER_IP}:80", n, 5000)
        assert ends == ["ok"] * n, ends
        assert [a - b for a, b in zip(c.accepted(), before)] == [n, 0, 0, 0] and c.sentinel() == 0
        clear_packets = forward_packets(c, "rdmagw-test-clear")
        assert clear_packets > 0, "the counting rule saw no direct connection"
        assert c.sessions_to() == set()
        assert "event=service_endpoint_direct" in c.pod.log_text(), c.pod.tail()

    # The path clean, the default back: through ep1's rdmagw.
    set_direct(c, None)
    with forward_rules(c, clear):
        before = c.accepted()
        ends = c.run_client(f"{CLUSTER_IP}:80", n, 5000)
        assert ends == ["ok"] * n, ends
        assert [a - b for a, b in zip(c.accepted(), before)] == [n, 0, 0, 0] and c.sentinel() == 0
        assert forward_packets(c, "rdmagw-test-clear") == 0, "bytes went to ep1 in clear"
        assert ep1 in c.sessions_to()
        assert endpoint_tunnels(c)[ep1] == {"tunnel": "up", "tunnel_error": ""}


def test_direct_never_refuses_endpoints_without_rdmagw_at_once(cluster):
    """services.direct: never: an endpoint without rdmagw (ep4) is not
    reached at all: its connections are reset at once, logged naming
    services.direct; an endpoint with rdmagw (ep1) is still reached
    through its tunnel."""
    c = cluster
    set_direct(c, "never")
    c.write(two_services([endpoint(c.ip(4), rdmagw=False)], [endpoint(c.ip(1))]))
    c.wait_loaded(1)
    before = c.accepted()
    t0 = time.monotonic()
    ends = c.run_client(f"{CLUSTER_IP}:80", 10, 5000)
    waited = time.monotonic() - t0
    assert ends == ["reset"] * 10, ends
    assert waited < 2.0, f"reset after {waited:.1f}s: not at once"
    assert [a - b for a, b in zip(c.accepted(), before)] == [0, 0, 0, 0] and c.sentinel() == 0
    line = wait_for(lambda: next((l for l in c.pod.log_text().splitlines() if "event=stream_rejected" in l), None),
                    5, "event=stream_rejected")
    assert "services.direct is never" in line and f"{c.ip(4)}:{PORT}" in line, line

    ends = c.run_client(f"{OTHER_CLUSTER_IP}:80", 10, 5000)
    assert ends == ["ok"] * 10, ends
    assert [a - b for a, b in zip(c.accepted(), before)] == [10, 0, 0, 0] and c.sentinel() == 0
    assert c.sessions_to() == {c.ip(1)}


def test_an_endpoint_on_rdmagws_own_tunnel_port_is_refused(cluster):
    """A services file whose endpoint is the pod's own address at rdmagw's
    tunnel port (7471; a loopback address would refuse the whole file):
    rdmagw opens no connection to its own tunnel port; the application's
    connections are reset, and the log says why. Endpoints elsewhere in the
    same file still work."""
    c = cluster
    c.write(two_services([endpoint(POD_IP, 7471, rdmagw=False)], [endpoint(c.ip(4), rdmagw=False)]))
    c.wait_loaded(1)
    before = c.accepted()
    assert c.run_client(f"{CLUSTER_IP}:80", 5, 1000) == ["reset"] * 5
    line = wait_for(lambda: next((l for l in c.pod.log_text().splitlines() if "event=stream_rejected" in l), None),
                    5, "event=stream_rejected")
    assert f"tcp:{POD_IP}:7471 is rdmagw's own admin or tunnel port on this host" in line, line
    assert "event=handshake_failed" not in c.pod.log_text() and "auth_failed" not in c.pod.log_text(), c.pod.tail()
    assert c.run_client(f"{OTHER_CLUSTER_IP}:80", 5, 1000) == ["ok"] * 5
    assert [a - b for a, b in zip(c.accepted(), before)] == [0, 0, 0, 5] and c.sentinel() == 0


def node_mode_config(ip: str, services: Path) -> str:
    """A node-mode rdmagw on the node (the pod's router here): it accepts
    tunnels at the node's address and admits what the table puts on its
    node, nothing else."""
    return serving_config("node-b", ip, key_file(), f'services: {{file: {services}}}\ntargets: ["services:this-node"]')


def test_an_endpoint_behind_a_node_mode_rdmagw_goes_through_the_node_and_the_node_admits_only_its_own(
        cluster, sidecar, procs, tmp_path):
    """ep4 has no sidecar, but the file says its node runs a node-mode
    rdmagw at the node's address: the pod's connections to the Service go
    through a tunnel to that rdmagw, which connects to ep4 (not one packet
    from the pod to ep4 in clear). The node's rdmagw reads its own copy of
    the table: an endpoint that copy puts on another node is refused with
    RESET(not-allowed), however the client's copy placed it; so is one on
    the node's own address (a pod on the host's network, or a slice that
    names the host to reach its ports), even though its table lists it."""
    c = cluster
    node_ns, node_ip = c.hosts[0]
    on_node = {**endpoint(c.ip(4), rdmagw=False), "node": "node-b"}
    elsewhere = {**endpoint(c.ip(4), 8005, rdmagw=False), "node": "node-b"}
    pod_view = two_services([on_node], [elsewhere])
    pod_view["nodes"] = [{"name": "node-b", "tunnel": node_ip}]
    node_view = two_services([on_node], [{**elsewhere, "node": "node-c"}])
    node_view["nodes"] = [{"name": "node-b", "tunnel": node_ip}]
    host_port = {**endpoint(node_ip, rdmagw=False), "node": "node-b"}  # something listens there: it would answer
    node_view["services"].append({"namespace": "default", "name": "on-host", "cluster_ips": [],
                                  "ports": [{"port": PORT, "endpoints": [host_port]}]})
    host_echo = ManagedProcess("echo-node", ["ip", "netns", "exec", node_ns, sys.executable, "-u", "-c", ECHO_SERVER,
                                             node_ip, str(PORT)], tmp_path / "echo-node.log")
    procs.append(host_echo)
    host_echo.start()
    node_file = c.path.with_name("node-services.json")
    node_file.write_text(json.dumps(node_view))
    node = sidecar("node-b", node_mode_config(node_ip, node_file), netns=node_ns).start()
    wait_for(lambda: run("ip", "netns", "exec", node_ns, "ss", "-Hltn", "sport = :7471").stdout, 5,
             "the node's rdmagw")
    c.write(pod_view)
    c.wait_loaded(1)

    clear = ["-p", "tcp", "-d", c.ip(4), "-m", "comment", "--comment", "rdmagw-test-clear"]
    with forward_rules(c, clear):
        before = c.accepted()
        ends = c.run_client(f"{CLUSTER_IP}:80", 10, 20000)
        assert ends == ["ok"] * 10, ends
        assert [a - b for a, b in zip(c.accepted(), before)] == [0, 0, 0, 10] and c.sentinel() == 0
        assert forward_packets(c, "rdmagw-test-clear") == 0, "bytes went from the pod to ep4 in clear"
        assert c.sessions_to() == {node_ip}
        shown = json.loads(c.admin("/services"))["table"][0]["ports"][0]["endpoints"][0]
        assert shown["node"] == "node-b" and shown["node_rdmagw"] == node_ip and shown["tunnel"] == "up", shown

        # ep4:8005, on node-c by the node's table: refused there.
        before = c.accepted()
        ends = c.run_client(f"{OTHER_CLUSTER_IP}:80", 5, 1000)
        assert ends == ["reset"] * 5, ends
        assert [a - b for a, b in zip(c.accepted(), before)] == [0, 0, 0, 0] and c.sentinel() == 0
        assert forward_packets(c, "rdmagw-test-clear") == 0
    line = wait_for(lambda: next((l for l in node.log_text().splitlines() if "event=stream_refused" in l), None), 5,
                    "event=stream_refused on the node")
    assert "reason=not-allowed" in line and f"tcp:{c.ip(4)}:8005" in line, line
    assert "nor an endpoint the services table puts on this node" in line, line

    # The node's own address, not in the pod's table: its next route
    # tunnels it to the node's rdmagw (peer: destination), which refuses it.
    wait_for(lambda: run("ip", "netns", "exec", node_ns, "ss", "-Hltn", f"src {node_ip}", f"sport = :{PORT}").stdout,
             5, "the echo server on the node")
    assert c.run_client(f"{node_ip}:{PORT}", 3, 1000) == ["reset"] * 3
    assert host_echo.log_text().count("accepted") == 0
    refused = [l for l in node.log_text().splitlines() if "event=stream_refused" in l and f"tcp:{node_ip}:{PORT}" in l]
    assert refused and "reason=not-allowed" in refused[0], node.tail()


def test_a_reload_that_moves_services_file_reads_the_new_one(cluster):
    c = cluster
    c.write(services_file([endpoint(c.ip(1))]))
    c.wait_loaded(1)
    other = c.path.with_name("other.json")
    other.write_text(json.dumps(services_file([endpoint(c.ip(2))])))
    config = c.pod.config_path.read_text()
    c.pod.config_path.write_text(config.replace(str(c.path), str(other)))
    answer = json.loads(run("ip", "netns", "exec", c.pod_ns, "curl", "-sS", "-X", "POST",
                            "http://127.0.0.1:9901/reload").stdout)
    assert answer["ok"] and any(ch.startswith("services.file: ") for ch in answer["changes"]), answer
    # Read by the reload itself, before its answer: no window in which the
    # routes are new and the table old.
    status = c.status()
    assert status["loads"] == 2 and status["file"] == status["table_file"] == str(other), status
    before = c.accepted()
    assert c.run_client(f"{CLUSTER_IP}:80", 5, 1000) == ["ok"] * 5
    assert [a - b for a, b in zip(c.accepted(), before)] == [0, 5, 0, 0]
    # The old file changes nothing any more (checked every 100 ms: 5 chances).
    c.write(services_file([endpoint(c.ip(3))]))
    time.sleep(0.5)
    assert c.status()["loads"] == 2
    assert c.run_client(f"{CLUSTER_IP}:80", 5, 1000) == ["ok"] * 5
    assert [a - b for a, b in zip(c.accepted(), before)] == [0, 10, 0, 0]

    # Moved to a file that is not there: the last table stays, and /stats
    # says which file it came from.
    missing = c.path.with_name("missing.json")
    c.pod.config_path.write_text(config.replace(str(c.path), str(missing)))
    answer = json.loads(run("ip", "netns", "exec", c.pod_ns, "curl", "-sS", "-X", "POST",
                            "http://127.0.0.1:9901/reload").stdout)
    assert answer["ok"], answer
    status = c.status()
    assert status["file"] == str(missing) and status["table_file"] == str(other), status
    assert status["loaded"] and "No such file" in status["error"], status
    assert f'kept="the table read from {other}"' in c.pod.log_text()
    assert c.run_client(f"{CLUSTER_IP}:80", 5, 1000) == ["ok"] * 5
    assert [a - b for a, b in zip(c.accepted(), before)] == [0, 15, 0, 0]
