# SPDX-License-Identifier: Apache-2.0
"""POST /undrain (docs/admin.md) on real sidecars: a drained pair listens and
accepts again on both ends (its listeners, its tunnel port), the stream
that stayed open through the drain and undrain is untouched, a listener's
max_connections still counts the connections the drain let finish, a port
taken meanwhile is a clear refusal that leaves the drain as it was, and a
drain by SIGTERM cannot be undone.
"""

from __future__ import annotations

import re
import signal
import socket
import time

import pytest

from admin_client import admin_json, admin_request
from backends import EchoServer
from clients import connect, recv_exact, send_all, wait_closed, wait_for
from conftest import TUNNEL_ADDR


def echo_once(sock, data: bytes) -> None:
    deadline = time.monotonic() + 10
    send_all(sock, data, deadline)
    assert recv_exact(sock, len(data), deadline) == data


def listener_active(sc, name: str) -> int:
    for entry in admin_json(sc.admin_port, "/stats")["listeners"]:
        if entry["name"] == name:
            return entry["active"]
    return -1


def refuses_connections(address) -> bool:
    try:
        connect(address, timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def tunnel_refuses(port: int) -> bool:
    """Whether the tunnel's TCP port refuses, at the address the sidecars
    listen on (loopback here; this host's own lab address in the RDMA lab)."""
    with socket.socket() as s:
        s.settimeout(2)
        try:
            s.connect((TUNNEL_ADDR, port))
        except ConnectionRefusedError:
            return True
    return False


def test_undrain_reopens_listeners_and_tunnel_and_keeps_open_streams(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "capped", "target": echo.endpoint, "max_connections": 2}], [echo.endpoint])
    address = p.address("capped")
    tunnel_ports = [sc.tunnel_port for sc in (p.a, p.b)]
    held = connect(address, timeout=10)
    more = []
    try:
        echo_once(held, b"before the drain")
        for sc in (p.a, p.b):
            assert admin_request(sc.admin_port, "/drain", "POST").status == 200
        assert refuses_connections(address), "host-a still accepts while drained"
        for port in tunnel_ports:
            assert tunnel_refuses(port), f"tunnel port {port} still accepts while drained"

        undrained_at = p.a.log_path.stat().st_size
        # host-b first, so that host-a's new streams find a tunnel to dial.
        for sc in (p.b, p.a):
            r = admin_request(sc.admin_port, "/undrain", "POST")
            assert r.status == 200 and r.json() == {"ok": True, "draining": False}, r.text
            assert admin_request(sc.admin_port, "/ready").status == 200
            assert admin_json(sc.admin_port, "/stats")["draining"] is False
        assert p.a.wait_log(lambda l: "event=undrained" in l, timeout=5)

        # Both tunnel ports accept again.
        for port in tunnel_ports:
            assert not tunnel_refuses(port), f"tunnel port {port} refuses after the undrain"
        # New connections go end to end (host-b told host-a's session to go
        # away when it drained: these ride a session dialed anew), one at a
        # time so that the limit leaves room, enough that each worker's
        # listening socket takes some (the kernel spreads them).
        for i in range(12):
            sock = connect(address, timeout=10)
            try:
                echo_once(sock, b"after the undrain %d" % i)
            finally:
                sock.close()
            wait_for(lambda: listener_active(p.a, "capped") == 1, what="the connection's place given back")
        # Every worker accepts again: the access lines since the undrain come
        # from both (all 12 on one would happen once in 2,000 runs).
        lines = [l for l in p.a.log_text(undrained_at).splitlines() if "event=access" in l and "listener=capped" in l]
        workers = {re.search(r" worker=(\d+) ", l).group(1) for l in lines}
        assert len(lines) >= 12 and workers == {"0", "1"}, lines
        echo_once(held, b"the one that stayed open")
        more.append(connect(address, timeout=10))
        echo_once(more[-1], b"the second place")
        # max_connections 2: the connection from before the drain still holds
        # its place, so a third is reset.
        try:
            third = connect(address, timeout=10)
        except ConnectionResetError:
            third = None
        if third is not None:
            more.append(third)
            how, _, _ = wait_closed(third, timeout=5)
            assert how == "reset", f"the third connection ended with {how}, not a reset"
        # Undrain when nothing is drained changes nothing.
        r = admin_request(p.a.admin_port, "/undrain", "POST")
        assert r.status == 200 and r.json()["draining"] is False
    finally:
        held.close()
        for s in more:
            s.close()


def test_undrain_refused_while_a_listen_address_is_taken_and_the_drain_stays(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    address = p.address("echo")
    assert admin_request(p.a.admin_port, "/drain", "POST").status == 200
    assert refuses_connections(address)
    blocker = socket.socket()
    try:
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        blocker.bind(address)
        blocker.listen(1)
        r = admin_request(p.a.admin_port, "/undrain", "POST")
        assert r.status == 409, r.text
        error = r.json()["error"]
        assert error.startswith("listeners[0].listen: ") and "still draining" in error, error
        assert admin_request(p.a.admin_port, "/ready").status == 503
        assert admin_json(p.a.admin_port, "/stats")["draining"] is True
    finally:
        blocker.close()
    r = admin_request(p.a.admin_port, "/undrain", "POST")
    assert r.status == 200, r.text
    sock = connect(address, timeout=10)
    try:
        echo_once(sock, b"bound again")
    finally:
        sock.close()


def test_a_drain_by_sigterm_cannot_be_undone(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], shutdown_timeout_ms=20000)
    sock = connect(p.address("echo"), timeout=10)
    try:
        echo_once(sock, b"keeps the process draining")
        p.a.send_signal(signal.SIGTERM)
        assert p.a.wait_log(lambda l: "event=shutdown_requested" in l, timeout=5)
        r = admin_request(p.a.admin_port, "/undrain", "POST")
        assert r.status == 409 and "SIGTERM" in r.json()["error"], r.text
        # Each worker stops accepting at its next tick after the signal.
        wait_for(lambda: p.a.log_text().count("event=drain_started") >= 2, what="both workers draining")
        assert refuses_connections(p.address("echo"))
        echo_once(sock, b"still carried")
    finally:
        sock.close()
    assert p.a.wait(timeout=15) == 0
    with pytest.raises(ConnectionRefusedError):
        connect(p.address("echo"), timeout=2).close()
