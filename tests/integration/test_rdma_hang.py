# SPDX-License-Identifier: Apache-2.0
"""`transport: auto` when the RDMA path hangs (docs/configuration.md,
`rdma_head_start_ms`), in the RDMA lab: host-a's peer entry names an RDMA
port where an RDMA CM listener takes connect requests and never answers (an
`rping` server, stopped), so every RDMA CM connect to it hangs, as it does
when the fabric or the peer's device does not answer. TCP to host-b works.
Streams opened at once must be carried over TCP, byte-exact and well within
connect_timeout_ms, none reset: TCP is dialled beside RDMA once the head
start is over, and whichever connects first carries the session. And when
RDMA is only slow, the session TCP won moves to RDMA under traffic.

Runs only in the lab (tests/lab/rdma_integration.sh): it needs the rxe device.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from admin_client import admin_json
from backends import EchoServer, prng_bytes
from clients import echo_concurrently, free_port, wait_for
from conftest import TEST_TRANSPORT, TUNNEL_ADDR, render_config
from test_resume import Target, move_streams, stream_problems

DEVICE = os.environ.get("RDMAGW_LAB_DEVICE", "")

pytestmark = pytest.mark.skipif(TEST_TRANSPORT == "tcp" or not DEVICE,
                                reason="needs the lab's rxe device (tests/lab)")

HEAD_START_MS = 500
CONNECT_TIMEOUT_MS = 5000
MOVE_SIZE = 8 << 20


@pytest.fixture
def hanging_rdma_port():
    """An RDMA CM listener that never accepts: rping's server, stopped once
    it listens."""
    port = free_port()
    proc = subprocess.Popen(["rping", "-s", "-a", TUNNEL_ADDR, "-p", str(port), "-C", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # it binds and listens
    assert proc.poll() is None, "rping -s exited"
    proc.send_signal(signal.SIGSTOP)
    yield port
    proc.kill()
    proc.wait(timeout=10)


def test_streams_go_over_tcp_when_the_rdma_connect_hangs(sidecar, backend, hanging_rdma_port):
    echo = backend(EchoServer())
    b_port, b_admin, a_admin, listen = free_port(), free_port(), free_port(), free_port()
    extra = {"rdma_head_start_ms": HEAD_START_MS, "connect_timeout_ms": CONNECT_TIMEOUT_MS}
    b = sidecar("host-b", render_config("host-b", tunnel_port=b_port, admin_port=b_admin, transport="auto",
                                        targets=[echo.endpoint], tunnel_extra=extra))
    a = sidecar("host-a", render_config(
        "host-a", tunnel_port=free_port(), admin_port=a_admin, transport="auto", tunnel_extra=extra,
        peers=[("host-b", b_port, hanging_rdma_port)], peer_connect="on_demand",
        listeners=[{"name": "e", "listen": f"tcp:127.0.0.1:{listen}", "peer": "host-b", "target": echo.endpoint}]))
    b.start()
    a.start()
    payloads = [prng_bytes(100 + i, 1 << 20) for i in range(8)]
    started = time.monotonic()
    got = echo_concurrently(("127.0.0.1", listen), payloads, time.monotonic() + 60)
    took = time.monotonic() - started
    assert got == payloads
    line = a.wait_log(lambda l: "event=transport_fallback" in l and "rdma_head_start_ms" in l, 5)
    assert line, a.tail()
    sessions = [s for p in admin_json(a_admin, "/peers")["peers"] for s in p["sessions"]]
    assert sessions and all(s["transport"] == "tcp" for s in sessions), sessions
    log = a.log_text() + b.log_text()
    assert "event=stream_reset" not in log and "within connect_timeout_ms" not in log, a.tail()
    print(f"8 x 1 MiB echoed over TCP in {took:.1f} s with the RDMA connect hanging")


def test_a_session_that_lost_the_race_to_tcp_moves_to_rdma_under_traffic(pair, backend):
    """The other half of Happy Eyeballs: RDMA that is only slow. With a head
    start of 1 ms, TCP (on loopback) nearly always connects first and
    carries the session; the RDMA probe then connects and the session moves
    onto RDMA while 8 streams run, byte-exact, none reset."""
    target = backend(Target())
    tunnel = {"rdma_head_start_ms": 1, "rdma_probe_interval_ms": 500, "resume_timeout_ms": 30000}
    p = pair([{"name": "io", "target": target.endpoint}], [target.endpoint], workers=1,
             a_tunnel=tunnel, b_tunnel=tunnel, a_transport="auto", b_transport="auto")
    clients, ends, took = move_streams(p.address("io"), target, 8, MOVE_SIZE, 120)
    assert not stream_problems(clients, ends, 8, MOVE_SIZE)
    log = p.a.log_text()
    if "event=transport_fallback" not in log:
        pytest.skip("RDMA connected within 1 ms: nothing to move (rare)")
    moved = p.a.wait_log(lambda l: "event=transport_moved" in l and "to=rdma" in l, 15)
    assert moved, p.a.tail()
    # Under traffic: the move is logged before the last stream's access line.
    # (A stream's line is written as rdmagw lets go of it, which may be
    # after its client saw the end: wait for all 8.)
    wait_for(lambda: p.a.log_text().count("event=access") >= 8, timeout=10, what="host-a's 8 access lines")
    log = p.a.log_text()
    assert log.find("event=transport_moved") < log.rfind("event=access"), p.a.tail()
    sessions = [s for peer in admin_json(p.a.admin_port, "/peers")["peers"] for s in peer["sessions"]]
    assert sessions and all(s["transport"] == "rdma" for s in sessions), sessions
    both = p.a.log_text() + p.b.log_text()
    assert "event=stream_reset" not in both, p.a.tail()
    print(f"8 streams moved in {took:.1f} s; the session started on TCP and moved to RDMA")
