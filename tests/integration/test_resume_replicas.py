# SPDX-License-Identifier: Apache-2.0
"""Replicas share a node name (one ConfigMap for a Deployment's pods), so a
peer's restart is told by node name *and* address: a new session from
another replica must not end the suspended session of one whose transport
was killed, while a new session from the same address (that peer, started
again) still does, at once rather than at the resume timeout.

One far side E (one worker, so both sessions meet on it); replicas A and B,
both node `replica`, each on a host of its own (network namespaces). A's stream
is open; A is stopped (SIGSTOP) and its tunnel connection killed (`ss -K`),
so E holds A's session suspended; B then opens a session to E; A is
continued and resumes."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from backends import EchoServer
from clients import connect, free_port, recv_exact, require_root_and, send_all, wait_closed
from conftest import render_config, tcp_only
from fleet_hosts import fleet_hosts
from test_passthrough_drain import in_netns

TUNNEL_PORT = 7471


def replica(sidecar, name: str, host: tuple[str, str], e_ip: str, echo: str, tunnel_port: int):
    """A replica whose application connects over TCP on its host's loopback
    (so that a reset reaches it as one: a Unix socket carries none)."""
    netns, ip = host
    app_port = free_port()
    config = render_config("replica", tunnel_port=tunnel_port, admin_port=free_port(), address=ip,
                           peers=[("e", TUNNEL_PORT)], peer_address=e_ip, peer_connect="on_demand", workers=1,
                           listeners=[{"name": "out", "listen": f"tcp:127.0.0.1:{app_port}", "peer": "e",
                                       "target": echo}])
    s = sidecar(name, config, netns=netns)
    s.netns, s.app_port = netns, app_port
    return s


def connect_app(s):
    with in_netns(s.netns):
        return connect(("127.0.0.1", s.app_port), timeout=10)


@tcp_only
@pytest.mark.deadline(90)
@pytest.mark.parametrize("b_host, a_survives", [(2, True), (1, False)],
                         ids=["another-replica", "same-address-restarted"])
def test_a_new_session_of_the_same_name_ends_a_suspended_one_only_from_its_address(
        sidecar, backend, sock_dir, b_host, a_survives):
    require_root_and(["ip", "ss"], "replicas in network namespaces")
    echo = backend(EchoServer(unix_path=str(sock_dir / "echo.sock"))).endpoint
    with fleet_hosts(3, subnet="10.78.0") as hosts:
        (e_ns, e_ip) = hosts[0]
        e = sidecar("e", tunnel_port=TUNNEL_PORT, admin_port=free_port(), targets=[echo], workers=1,
                    address=e_ip, netns=e_ns, tunnel_extra={"resume_timeout_ms": 20000})
        a = replica(sidecar, "a", hosts[1], e_ip, echo, TUNNEL_PORT)
        # B: another replica on its own host, or at A's address (A started again, as far as E can tell).
        b = replica(sidecar, "b", hosts[b_host], e_ip, echo, TUNNEL_PORT + (b_host == 1))
        for s in (e, a, b):
            s.start()
        deadline = time.monotonic() + 60

        held = connect_app(a)
        send_all(held, b"one", deadline)
        assert recv_exact(held, 3, deadline) == b"one"

        a.send_signal(signal.SIGSTOP)
        try:
            killed = subprocess.run(["ip", "netns", "exec", e_ns, "ss", "-K", "-tn", "state", "established",
                                     f"( sport = :{TUNNEL_PORT} )"], capture_output=True, text=True, timeout=10)
            assert killed.returncode == 0 and killed.stdout.strip(), killed
            assert e.wait_log(lambda t: "event=session_suspended" in t, timeout=10), e.tail()
            other = connect_app(b)
            send_all(other, b"two", deadline)
            assert recv_exact(other, 3, deadline) == b"two"
            other.close()
        finally:
            a.send_signal(signal.SIGCONT)

        if a_survives:
            assert a.wait_log(lambda t: "event=session_resumed" in t, timeout=20), a.tail()
            send_all(held, b"three", deadline)
            assert recv_exact(held, 5, deadline) == b"three"
            assert "the peer's rdmagw restarted" not in e.log_text()
        else:
            # E took B's session for A started again and ended A's suspended
            # one at once; A's application sees its stream reset.
            assert "the peer's rdmagw restarted" in e.log_text(), e.tail()
            how, _, _ = wait_closed(held, timeout=20)
            assert how == "reset"
        held.close()
        for s in (b, a, e):
            s.stop()
