# SPDX-License-Identifier: Apache-2.0
"""The admin endpoint (docs/admin.md) of real sidecars: every endpoint, the
Prometheus text checked by promtool, and counters that move by exactly the
traffic sent."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from admin_client import admin_json, admin_request, parse_metrics
from backends import EchoServer, prng_bytes
from clients import wait_for, connect, echo_roundtrip, free_port, recv_exact, send_all
from conftest import TEST_TRANSPORT

ENDPOINTS = ["/live", "/ready", "/stats", "/metrics", "/peers", "/streams", "/services", "/config", "/reload",
             "/drain", "/undrain"]


def listener_stats(port: int, name: str) -> dict:
    for entry in admin_json(port, "/stats")["listeners"]:
        if entry["name"] == name:
            return entry
    return {"accepted": 0, "active": 0, "bytes_received": 0, "bytes_sent": 0}


def peer_stats(port: int, name: str) -> dict:
    for entry in admin_json(port, "/stats")["peers"]:
        if entry["name"] == name:
            return entry
    return {"bytes_sent": 0, "bytes_received": 0, "streams_opened": 0}


def test_every_endpoint_answers_as_documented(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    port = p.a.admin_port

    # curl, as an operator would: every GET endpoint answers 200.
    for path in ["/live", "/ready", "/stats", "/metrics", "/peers", "/streams", "/config"]:
        r = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}{path}"],
                           capture_output=True, timeout=10)
        assert r.stdout.decode() == "200", f"curl {path}: {r.stdout!r} {r.stderr!r}"

    live = admin_request(port, "/live")
    assert live.status == 200 and live.text.strip() == "live"
    ready = admin_request(port, "/ready")
    assert ready.status == 200 and ready.text.strip() == "ready"

    stats = admin_json(port, "/stats")
    for key in ["version", "commit", "node", "uptime_seconds", "ready", "draining", "workers", "transport",
                "transport_reason", "io_uring", "config", "listeners", "peers", "streams", "rdma", "latency"]:
        assert key in stats, f"/stats lacks {key}"
    assert stats["node"] == "host-a" and stats["ready"] is True and stats["workers"] == 2
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?|unknown", stats["commit"]), stats["commit"]
    assert stats["config"]["generation"] == 1
    assert [entry["name"] for entry in stats["listeners"]] == ["echo"]
    assert stats["listeners"][0]["listen"] == p.listeners["echo"]["listen"]

    metrics = admin_request(port, "/metrics")
    assert metrics.status == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE rdmagw_connections_accepted_total counter" in metrics.text

    def host_b_fully_up():
        for x in admin_json(port, "/peers")["peers"]:
            opened = [s for s in x["sessions"] if s["role"] == "dialer" and s["state"] == "open"]
            if x["name"] == "host-b" and x["state"] == "up" and len(opened) == 2:
                return x
        return None

    peer = wait_for(host_b_fully_up, what="peer host-b up on both workers")
    assert peer["configured"] is True and peer["tcp_port"] == p.b.tunnel_port
    assert peer["transport"] == ("tcp" if TEST_TRANSPORT == "tcp" else "rdma")
    assert peer["transport_reason"]
    dialed = [s for s in peer["sessions"] if s["role"] == "dialer"]
    assert len(dialed) == 2, peer  # one per worker
    assert all(s["state"] == "open" and s["peer_node"] == "host-b" for s in dialed)

    config = admin_json(port, "/config")
    assert config["node"] == "host-a" and config["generation"] == 1
    assert [entry["name"] for entry in config["listeners"]] == ["echo"]
    assert config["listeners"][0]["target"] == echo.endpoint

    # An open stream is listed with its listener, peer and target.
    sock = connect(p.address("echo"))
    try:
        send_all(sock, b"hello", time.monotonic() + 5)
        assert recv_exact(sock, 5, time.monotonic() + 5) == b"hello"
        streams = admin_json(port, "/streams")
        assert streams["total"] == 1 and streams["offset"] == 0 and streams["limit"] == 100
        s = streams["streams"][0]
        assert (s["side"], s["listener"], s["peer"], s["target"], s["state"]) == \
            ("client", "echo", "host-b", echo.endpoint, "open")
        assert s["bytes_from_app"] == 5 and s["bytes_to_app"] == 5 and s["stream_id"] > 0
        far = admin_json(p.b.admin_port, "/streams")
        assert far["total"] == 1 and far["streams"][0]["side"] == "target", far
        assert far["streams"][0]["target"] == echo.endpoint
    finally:
        sock.close()


def test_wrong_method_unknown_path_and_bad_query_are_refused(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    port = p.a.admin_port
    r = admin_request(port, "/reload", "GET")
    assert r.status == 405 and r.headers["allow"] == "POST"
    r = admin_request(port, "/stats", "POST")
    assert r.status == 405 and "GET" in r.headers["allow"]
    r = admin_request(port, "/no-such-thing")
    assert r.status == 404
    for endpoint in ENDPOINTS:
        assert endpoint in r.text, f"404 body does not list {endpoint}: {r.text}"
    for query in ["limit=abc", "offset=-1", "limit=100001", "offset=1x"]:
        r = admin_request(port, "/streams?" + query)
        assert r.status == 400, f"/streams?{query}: {r.status} {r.text}"


def test_promtool_accepts_metrics(pair, backend):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: tools/dev/install-deps installs the prometheus package"
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    assert echo_roundtrip(p.address("echo"), b"x" * 1000) == b"x" * 1000
    for port in (p.a.admin_port, p.b.admin_port):
        text = admin_request(port, "/metrics").text
        check = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True,
                               timeout=30)
        assert check.returncode == 0, f"promtool: {check.stdout.decode()} {check.stderr.decode()}"
        assert "127.0.0.1" not in text, "client addresses must not appear in labels"
    # The standard process metrics, of the process itself, and what it was built from.
    text = admin_request(p.a.admin_port, "/metrics").text
    values = parse_metrics(text)
    fds = len(os.listdir(f"/proc/{p.a.proc.pid}/fd"))
    assert abs(values["process_open_fds"] - fds) <= 4, (values["process_open_fds"], fds)
    assert abs(values["process_start_time_seconds"] - time.time()) < 600, values["process_start_time_seconds"]
    assert values["process_resident_memory_bytes"] > 1 << 20
    assert values["process_max_fds"] >= values["process_open_fds"]
    version = subprocess.run([p.a.binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    build = re.search(r'^rdmagw_build_info\{version="([^"]+)",commit="([^"]+)"\} 1$', text, re.M)
    assert build and build.group(1) in version and build.group(2) in version, (build, version)


def test_counters_move_by_exactly_the_traffic_sent(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    a, b = p.a.admin_port, p.b.admin_port
    wait_for(lambda: peer_stats(a, "host-b").get("sessions_tcp", 0) + peer_stats(a, "host-b").get("sessions_rdma", 0)
             >= 2, what="sessions up")
    before_l = listener_stats(a, "echo")
    before_pa = peer_stats(a, "host-b")
    before_pb = peer_stats(b, "host-a")
    before_m = parse_metrics(admin_request(a, "/metrics").text)

    sizes = [1, 1000, 70000, 300000]
    total = sum(sizes)
    for i, n in enumerate(sizes):
        data = prng_bytes(i, n)
        assert echo_roundtrip(p.address("echo"), data, timeout=20) == data
    wait_for(lambda: listener_stats(a, "echo")["active"] == 0, what="streams closed")

    after_l = listener_stats(a, "echo")
    assert after_l["accepted"] - before_l["accepted"] == len(sizes)
    assert after_l["bytes_received"] - before_l["bytes_received"] == total
    assert after_l["bytes_sent"] - before_l["bytes_sent"] == total
    after_pa = peer_stats(a, "host-b")
    assert after_pa["bytes_sent"] - before_pa["bytes_sent"] == total
    assert after_pa["bytes_received"] - before_pa["bytes_received"] == total
    assert after_pa["streams_opened"] - before_pa["streams_opened"] == len(sizes)
    # The far side counts the same bytes under the dialer's node name.
    after_pb = peer_stats(b, "host-a")
    assert after_pb["bytes_received"] - before_pb["bytes_received"] == total
    assert after_pb["bytes_sent"] - before_pb["bytes_sent"] == total

    after_m = parse_metrics(admin_request(a, "/metrics").text)

    def delta(key):
        return after_m.get(key, 0) - before_m.get(key, 0)

    assert delta('rdmagw_connections_accepted_total{listener="echo"}') == len(sizes)
    assert delta('rdmagw_listener_received_bytes_total{listener="echo"}') == total
    assert delta('rdmagw_listener_sent_bytes_total{listener="echo"}') == total
    assert delta('rdmagw_peer_sent_bytes_total{peer="host-b"}') == total
    assert delta('rdmagw_streams_opened_total{direction="outbound"}') == len(sizes)
    assert delta("rdmagw_stream_open_seconds_count") == len(sizes)
    assert after_m['rdmagw_connections_active{listener="echo"}'] == 0
    failed = [k for k in after_m if k.startswith("rdmagw_streams_failed_total") and delta(k) != 0]
    assert failed == [], f"clean streams counted as failed: {failed}"
    if TEST_TRANSPORT != "tcp":
        assert delta('rdmagw_rdma_completions_total{kind="send"}') > 0
        assert delta('rdmagw_rdma_completions_total{kind="recv"}') > 0


def test_refused_target_counts_one_failure_on_each_side(pair, backend):
    echo = backend(EchoServer())
    # host-b's allowlist does not hold the target.
    p = pair([{"name": "echo", "target": echo.endpoint}], ["tcp:127.0.0.1:1"])
    # The refusal may come back before the first byte goes out, even before
    # connect() returns: the stream's OPEN leaves at accept, with the session
    # already up. A reset at any of these steps is the answer; EOF is not.
    with pytest.raises((ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        sock = connect(p.address("echo"))
        try:
            sock.sendall(b"x")
            for _ in range(100):
                if not sock.recv(1):
                    raise AssertionError("clean EOF instead of a reset")
        finally:
            sock.close()
    key = 'rdmagw_streams_failed_total{reason="not-allowed"}'
    wait_for(lambda: parse_metrics(admin_request(p.a.admin_port, "/metrics").text)[key] == 1, what="A counts it")
    assert parse_metrics(admin_request(p.b.admin_port, "/metrics").text)[key] == 1


def test_stats_per_worker_shows_where_sessions_and_bytes_are(pair, backend):
    """Each of host-a's 4 workers dials its own session; /stats and /metrics
    of host-b say which of its workers accepted each, as /peers does. On
    RDMA, worker 0 places new sessions with the workers in turn, so all four
    carry one (RDMA CM has no SO_REUSEPORT); on TCP the kernel spreads them."""
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], workers=4)
    b = p.b.admin_port
    kind = "sessions_rdma" if TEST_TRANSPORT == "rdma" else "sessions_tcp"
    wait_for(lambda: sum(w[kind] for w in admin_json(b, "/stats")["per_worker"]) == 4, timeout=30,
             what="host-b's 4 accepted sessions in per_worker")
    payload = prng_bytes(7, 1 << 20)
    assert echo_roundtrip(p.address("echo"), payload, timeout=30) == payload
    stats = admin_json(b, "/stats")
    per_worker = {w["worker"]: w[kind] for w in stats["per_worker"]}
    accepted = {i: 0 for i in range(4)}
    for peer in admin_json(b, "/peers")["peers"]:
        for s in peer["sessions"]:
            accepted[s["worker"]] += 1
    assert per_worker == accepted, (per_worker, accepted)
    print(f"host-b's accepted sessions by worker: {per_worker}")
    if TEST_TRANSPORT == "rdma":
        assert per_worker == {0: 1, 1: 1, 2: 1, 3: 1}
    m = parse_metrics(admin_request(b, "/metrics").text)
    for i in range(4):
        assert m[f'rdmagw_worker_sessions{{worker="{i}",transport="{kind[9:]}"}}'] == per_worker[i]
    # Bytes: the workers' shares add up to the peer's total, both ways.
    peer_total = sum(x["bytes_received"] for x in stats["peers"])
    assert sum(w["bytes_received"] for w in stats["per_worker"]) == peer_total >= len(payload)
    assert sum(m[f'rdmagw_worker_received_bytes_total{{worker="{i}"}}'] for i in range(4)) == peer_total


@pytest.mark.skipif(TEST_TRANSPORT == "tcp", reason="RDMA queue pair state: runs in the RDMA lab")
def test_peers_show_rdma_queue_pair_and_credits(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    assert echo_roundtrip(p.address("echo"), b"y" * 5000, timeout=20) == b"y" * 5000
    peer = [x for x in admin_json(p.a.admin_port, "/peers")["peers"] if x["name"] == "host-b"][0]
    rdma = [s for s in peer["sessions"] if s["transport"] == "rdma"]
    assert rdma, peer
    for s in rdma:
        assert s["rdma"]["qp_state"] == "RTS"
        assert 0 < s["rdma"]["send_credits"] <= s["rdma"]["peer_recv_depth"]
        assert s["rdma"]["completions"] > 0


def test_drain_refuses_new_connections_keeps_open_streams_and_turns_not_ready(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    port = p.a.admin_port
    sock = connect(p.address("echo"))
    try:
        send_all(sock, b"before", time.monotonic() + 5)
        assert recv_exact(sock, 6, time.monotonic() + 5) == b"before"
        r = admin_request(port, "/drain", "POST")
        assert r.status == 200 and r.json()["draining"] is True and r.json()["streams_open"] == 1
        ready = admin_request(port, "/ready")
        assert ready.status == 503 and "draining" in ready.text
        with pytest.raises(ConnectionRefusedError):
            connect(p.address("echo"), timeout=2).close()
        # The open stream still carries data both ways.
        send_all(sock, b"after", time.monotonic() + 5)
        assert recv_exact(sock, 5, time.monotonic() + 5) == b"after"
        assert admin_json(port, "/stats")["draining"] is True
        r = admin_request(port, "/reload", "POST")
        assert r.status == 400 and "draining" in r.text
    finally:
        sock.close()
    assert p.a.running(), "a drain must not stop the process"
    p.a.send_signal(signal.SIGTERM)
    assert p.a.wait(timeout=10) == 0


def test_admin_port_in_use_fails_start_naming_the_key(sidecar):
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    try:
        sc = sidecar("host-a", tunnel_port=free_port(), admin_port=blocker.getsockname()[1])
        sc.start(wait=False)
        assert sc.wait(timeout=10) == 1
        line = sc.wait_log("event=listen_failed", 1)
        assert line and "key=admin" in line and "in use" in line, sc.tail()
    finally:
        blocker.close()
