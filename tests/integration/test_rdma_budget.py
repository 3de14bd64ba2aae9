# SPDX-License-Identifier: Apache-2.0
"""tunnel.rdma.max_pinned (docs/configuration.md, "Fleet"): the slab memory a
worker's RDMA sessions may hold with their posted receives. Past it, an idle
RDMA session of another peer is closed first, and the new session goes to TCP
(`transport: auto`); on the accepting side a new session's RDMA connect is
rejected, and the dialer in auto goes to TCP. Runs in the RDMA lab only."""

from __future__ import annotations

import time

import pytest

from admin_client import admin_json, admin_request, parse_metrics
from backends import EchoServer
from clients import connect, echo_roundtrip, free_port, wait_for
from conftest import TEST_TRANSPORT, render_config

pytestmark = pytest.mark.skipif(TEST_TRANSPORT == "tcp", reason="needs an RDMA device (tests/lab)")

# One session of 16 receives of 32.5 KiB (the default buffer_size) is 520
# KiB: 1 MiB holds one.
ONE_SESSION = "{slab_size: 64MiB, recv_depth: 16, max_pinned: 1MiB}"
PLAIN = "{slab_size: 64MiB, recv_depth: 32}"
# These tests need host-a's sessions on RDMA whenever there is room. The
# lab's Soft-RoCE can take more than the default head start (1 s) to connect
# a fresh pair, and TCP beside it would then win (test_rdma_hang.py tests
# that); without a head start TCP is dialled only once RDMA fails.
RDMA_FIRST = {"rdma_probe_interval_ms": 0, "rdma_head_start_ms": 0}


def with_rdma(text: str, rdma: str) -> str:
    lines = [f"  rdma: {rdma}" if line.startswith("  rdma: ") else line for line in text.splitlines()]
    return "\n".join(lines) + "\n"


def far_side(sidecar, name: str, echo, rdma: str = PLAIN, workers: int = 1):
    tcp, rdma_port, admin = free_port(), free_port(), free_port()
    text = with_rdma(render_config(name, tcp, admin, targets=[echo.endpoint], workers=workers, transport="auto",
                                   rdma_port=rdma_port), rdma)
    sc = sidecar(name, text, tunnel_port=tcp, admin_port=admin)
    sc.start()
    return sc, tcp, rdma_port


def sessions_of(sc, peer: str) -> list[dict]:
    for p in admin_json(sc.admin_port, "/peers")["peers"]:
        if p["name"] == peer:
            return p["sessions"]
    return []


def pinned_limit(sc) -> dict:
    m = parse_metrics(admin_request(sc.admin_port, "/metrics").text)
    return {action: m.get(f'rdmagw_tunnel_rdma_pinned_limit_total{{action="{action}"}}', 0)
            for action in ("closed_idle", "tcp_instead", "refused", "rejected")}


def test_past_max_pinned_idle_rdma_sessions_close_first_then_new_ones_go_to_tcp(sidecar, backend):
    echo = backend(EchoServer())
    hosts = {name: far_side(sidecar, name, echo) for name in ("host-b", "host-c", "host-d")}
    admin, listen = free_port(), {name: free_port() for name in hosts}
    text = render_config("host-a", free_port(), admin, workers=1, transport="auto",
                         peers=[(name, tcp, rdma) for name, (_, tcp, rdma) in hosts.items()],
                         listeners=[{"name": name, "listen": f"tcp:127.0.0.1:{listen[name]}", "peer": name,
                                     "target": echo.endpoint} for name in hosts],
                         peer_connect="on_demand", tunnel_extra=RDMA_FIRST)
    a = sidecar("host-a", with_rdma(text, ONE_SESSION), admin_port=admin)
    a.start()
    assert admin_json(admin, "/config")["tunnel"]["rdma"]["max_pinned"] == 1 << 20

    # A stream to host-b: its session takes the one RDMA place, and keeps it
    # while the stream is open.
    held = connect(("127.0.0.1", listen["host-b"]), timeout=30)
    held.sendall(b"x" * 1000)
    got = b""
    while len(got) < 1000:
        got += held.recv(65536)
    assert [s["transport"] for s in sessions_of(a, "host-b")] == ["rdma"]

    # host-c: no room, and host-b's session carries a stream: TCP instead.
    assert echo_roundtrip(("127.0.0.1", listen["host-c"]), b"c" * 5000, timeout=30) == b"c" * 5000
    assert [s["transport"] for s in sessions_of(a, "host-c")] == ["tcp"]
    assert pinned_limit(a) == {"closed_idle": 0, "tcp_instead": 1, "refused": 0, "rejected": 0}
    assert "event=transport_fallback" in a.log_text() and "tunnel.rdma.max_pinned" in a.log_text()

    # host-b's stream ends: its session is idle, and the next new session
    # closes it to make room (and goes to TCP meanwhile).
    held.close()
    wait_for(lambda: not any(s.get("streams") for s in sessions_of(a, "host-b")), timeout=10,
             what="host-b's session without streams")
    time.sleep(0.2)
    assert echo_roundtrip(("127.0.0.1", listen["host-d"]), b"d" * 5000, timeout=30) == b"d" * 5000
    wait_for(lambda: sessions_of(a, "host-b") == [], timeout=20, what="host-b's idle RDMA session closed")
    peer_b = next(p for p in admin_json(admin, "/peers")["peers"] if p["name"] == "host-b")
    assert "closed to make room for an RDMA session to host-d" in peer_b["last_close"], peer_b
    assert pinned_limit(a) == {"closed_idle": 1, "tcp_instead": 2, "refused": 0, "rejected": 0}
    assert [s["transport"] for s in sessions_of(a, "host-d")] == ["tcp"]

    # With room again, the next new session is RDMA: host-b's, for its next stream.
    assert echo_roundtrip(("127.0.0.1", listen["host-b"]), b"b" * 5000, timeout=30) == b"b" * 5000
    assert [s["transport"] for s in sessions_of(a, "host-b")] == ["rdma"]


def test_an_accepting_side_past_max_pinned_rejects_new_rdma_sessions_and_the_dialer_uses_tcp(sidecar, backend):
    echo = backend(EchoServer())
    # host-b has one worker with room for one RDMA session; host-a's two
    # workers each dial a session of their own to it.
    b, b_tcp, b_rdma = far_side(sidecar, "host-b", echo, rdma=ONE_SESSION)
    admin, listen = free_port(), free_port()
    a = sidecar("host-a", render_config("host-a", free_port(), admin, workers=2, transport="auto",
                                        peers=[("host-b", b_tcp, b_rdma)], peer_connect="always",
                                        listeners=[{"name": "echo", "listen": f"tcp:127.0.0.1:{listen}",
                                                    "peer": "host-b", "target": echo.endpoint}],
                                        tunnel_extra=RDMA_FIRST),
                admin_port=admin)
    a.start()
    wait_for(lambda: len(sessions_of(a, "host-b")) == 2, timeout=60, what="both of host-a's workers' sessions")
    kinds = sorted(s["transport"] for s in sessions_of(a, "host-b"))
    assert kinds == ["rdma", "tcp"], kinds
    assert pinned_limit(b)["rejected"] >= 1
    assert "event=rdma_connect_rejected" in b.log_text()
    # Streams work on both workers' sessions.
    for i in range(8):
        payload = bytes([i]) * 20000
        assert echo_roundtrip(("127.0.0.1", listen), payload, timeout=30) == payload
