# SPDX-License-Identifier: Apache-2.0
"""Named peers on demand (`connect: on_demand`, the default; docs/configuration.md,
"Fleet"): no session until a stream needs one, the first stream carried while
the session is dialled, the session closed after tunnel.session_idle_ms
without streams (on both ends) and dialled again by the next stream. A peer
with `connect: always` keeps its session however idle."""

from __future__ import annotations

import os
import time

from admin_client import admin_json, parse_metrics, admin_request
from backends import EchoServer
from clients import connect, echo_roundtrip, wait_for
from conftest import TEST_TRANSPORT


def peer_b(sc) -> dict:
    return next(p for p in admin_json(sc.admin_port, "/peers")["peers"] if p["name"] == "host-b")


def test_a_named_peer_on_demand_dials_on_first_use_and_closes_when_idle(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], peer_connect="on_demand",
             a_tunnel={"session_idle_ms": 1000}, workers=1)
    a, b = p.a, p.b
    time.sleep(0.5)
    peer = peer_b(a)
    assert peer["state"] == "idle" and peer["sessions"] == [] and peer["connect"] == "on_demand", peer
    assert "event=session_open" not in a.log_text()
    assert admin_json(b.admin_port, "/peers")["peers"] == []

    # The first stream: the session is dialled for it, its bytes carried.
    payload = os.urandom(256 * 1024)
    assert echo_roundtrip(p.address("echo"), payload, timeout=15) == payload
    assert a.log_text().count("event=session_open") == 1
    # Streams while it is up share it.
    for _ in range(5):
        assert echo_roundtrip(p.address("echo"), payload[:1000], timeout=15) == payload[:1000]
    assert a.log_text().count("event=session_open") == 1

    # 1 s without streams: closed, on both ends, as meant (no resume attempt).
    wait_for(lambda: peer_b(a)["sessions"] == [], timeout=10, what="the idle session closed")
    peer = peer_b(a)
    assert peer["state"] == "idle" and "idle for 1000 ms" in peer["last_close"], peer
    wait_for(lambda: admin_json(b.admin_port, "/peers")["peers"] == [], timeout=10,
             what="host-b's end of the idle session closed")
    assert "event=session_suspended" not in b.log_text()
    m = parse_metrics(admin_request(a.admin_port, "/metrics").text)
    assert m["rdmagw_tunnel_sessions_idle_closed_total"] == 1

    # The next stream dials again.
    assert echo_roundtrip(p.address("echo"), payload, timeout=15) == payload
    assert a.log_text().count("event=session_open") == 2


def test_a_peer_that_is_always_connected_keeps_its_idle_session(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], peer_connect="always",
             a_tunnel={"session_idle_ms": 300}, workers=1)
    wait_for(lambda: peer_b(p.a)["state"] == "up", timeout=30 if TEST_TRANSPORT != "tcp" else 10,
             what="host-b up without any stream")
    assert echo_roundtrip(p.address("echo"), b"x" * 1000, timeout=15) == b"x" * 1000
    time.sleep(1.5)  # five idle periods
    peer = peer_b(p.a)
    assert peer["state"] == "up" and len(peer["sessions"]) == 1 and peer["connect"] == "always", peer
    assert p.a.log_text().count("event=session_open") == 1


def test_sessions_per_peer_one_worker_carries_every_stream_to_the_peer(pair, backend):
    """tunnel.sessions_per_peer: 1 with 2 workers: one session to host-b, however
    the kernel spreads the application's connections over the workers; the
    streams the other worker accepts are handed over and carried byte-exact."""
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], peer_connect="on_demand",
             a_tunnel={"sessions_per_peer": 1}, workers=2)
    conns = []
    for i in range(32):
        s = connect(p.address("echo"), timeout=15)
        conns.append((s, os.urandom(3000 + i)))
    for s, data in conns:
        s.sendall(data)
    for s, data in conns:
        got = b""
        while len(got) < len(data):
            chunk = s.recv(65536)
            assert chunk, "EOF before the echo"
            got += chunk
        assert got == data
    sessions = peer_b(p.a)["sessions"]
    assert len(sessions) == 1 and sessions[0]["streams"] == 32, sessions
    m = parse_metrics(admin_request(p.a.admin_port, "/metrics").text)
    # 32 connections spread by SO_REUSEPORT's hash: the other worker got some.
    assert m["rdmagw_tunnel_streams_handed_over_total"] >= 1
    assert sum(w["streams_active"] for w in admin_json(p.a.admin_port, "/stats")["per_worker"]) == 32
    for s, _ in conns:
        s.close()


def test_sessions_per_peer_caps_always_connected_peers_too(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], peer_connect="always",
             a_tunnel={"sessions_per_peer": 1}, workers=2, start=False)
    p.b.start()
    p.a.start()
    wait_for(lambda: peer_b(p.a)["state"] == "up", timeout=30 if TEST_TRANSPORT != "tcp" else 10,
             what="host-b up")
    time.sleep(1.0)  # the other worker's link asks again meanwhile, and is told no
    assert len(peer_b(p.a)["sessions"]) == 1, peer_b(p.a)
    for i in range(8):
        payload = os.urandom(10000)
        assert echo_roundtrip(p.address("echo"), payload, timeout=15) == payload
    assert len(peer_b(p.a)["sessions"]) == 1
