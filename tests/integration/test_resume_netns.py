# SPDX-License-Identifier: Apache-2.0
"""Streams survive network faults on the tunnel's path (docs/operations.md):
host-a and host-b are network namespaces joined by a veth pair that the test makes;
the application and the target reach their rdmagw over Unix sockets, so
only the tunnel crosses the link. While STREAMS streams move SIZE bytes
both ways (test_resume.py's transfer), the link is broken again and again
for longer than the keepalive timeout: its packets dropped by iptables, or
the veth taken down. Both ends declare the transport dead, host-a redials
until the path is back, and the sessions resume: every byte arrives, once
and in order, and no socket sees a reset."""

from __future__ import annotations

import time

import pytest

from clients import require_root_and
from conftest import tcp_only
from netns_hosts import two_hosts
from test_resume import RUN_S, Faults, Target, assert_resumed_without_resets, transfer_under_faults

A_IP, B_IP = "10.203.0.1", "10.203.0.2"
KEEPALIVE = {"keepalive_interval_ms": 200, "keepalive_timeout_ms": 1000, "connect_timeout_ms": 500}
HOLD_S = 1.8        # each break: longer than keepalive_timeout_ms, well under resume_timeout_ms
BREAKS = 3
BREAK_EVERY_S = 0.8


@pytest.fixture
def hosts():
    require_root_and(("ip", "iptables"), "network fault test")
    with two_hosts(A_IP, B_IP, 24) as h:
        yield h


def start_pair(pair, backend, hosts, sock_dir):
    target = backend(Target(str(sock_dir / "target.sock")))
    p = pair([{"name": "io", "target": target.endpoint, "listen": "unix"}], [target.endpoint],
             a_tunnel=KEEPALIVE, b_tunnel=KEEPALIVE, hosts=(hosts.a, A_IP, hosts.b, B_IP))
    return p, target


def keepalive_losses(p) -> int:
    """Suspensions host-a logged because the keepalive expired."""
    return sum(1 for line in p.a.log_text().splitlines()
               if "event=session_suspended" in line and "keepalive" in line)


@tcp_only
@pytest.mark.deadline(RUN_S + 90)
def test_streams_survive_packets_dropped_until_keepalive_expires(pair, backend, hosts, sock_dir):
    p, target = start_pair(pair, backend, hosts, sock_dir)
    port = str(p.b.tunnel_port)
    rules = [["INPUT", "-p", "tcp", "--sport", port, "-j", "DROP"],
             ["OUTPUT", "-p", "tcp", "--dport", port, "-j", "DROP"]]

    def drop(i):
        for r in rules:
            hosts.exec_in(hosts.a, "iptables", "-I", *r)
        try:
            time.sleep(HOLD_S)
        finally:
            for r in rules:
                hosts.exec_in(hosts.a, "iptables", "-D", *r)
        return True

    transfer_under_faults(p.address("io"), target, Faults(drop, BREAKS, BREAK_EVERY_S))
    losses = keepalive_losses(p)
    assert losses >= 2, f"the keepalive expired {losses} times; the DROP did not break the tunnel"
    assert_resumed_without_resets(p, losses)


@tcp_only
@pytest.mark.deadline(RUN_S + 90)
def test_streams_survive_the_link_going_down_and_up(pair, backend, hosts, sock_dir):
    p, target = start_pair(pair, backend, hosts, sock_dir)

    def link_down(i):
        hosts.exec_in(hosts.a, "ip", "link", "set", hosts.veth_a, "down")
        try:
            time.sleep(HOLD_S)
        finally:
            hosts.exec_in(hosts.a, "ip", "link", "set", hosts.veth_a, "up")
        return True

    transfer_under_faults(p.address("io"), target, Faults(link_down, BREAKS, BREAK_EVERY_S))
    losses = keepalive_losses(p)
    assert losses >= 2, f"the keepalive expired {losses} times; the link going down did not break the tunnel"
    assert_resumed_without_resets(p, losses)
