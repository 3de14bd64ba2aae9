# SPDX-License-Identifier: Apache-2.0
"""What an admin client may cost (docs/admin.md, "Limits"): a real rdmagw, and raw sockets that play greedy or broken HTTP
clients.

- At most 64 admin connections: an idle one beyond evicts the oldest idle
  one, so idle connections can neither pile up (and take the descriptors
  the data plane needs) nor lock out the next client.
- A request must arrive whole within 10 s of its first byte (a slowloris
  client is closed); when every connection is mid-request, a new one is
  closed at once, and service comes back when the deadlines pass.
- Oversized or malformed requests are answered with their status and the
  connection closed.
"""

from __future__ import annotations

import socket
import subprocess
import time

from admin_client import admin_request
from clients import RESET_ERRORS, free_port, wait_for

MAX_CONNECTIONS = 64
REQUEST_SECONDS = 10


def start(sidecar):
    admin = free_port()
    sc = sidecar("host-a", tunnel_port=free_port(), admin_port=admin, transport="tcp")
    sc.start()
    return sc


def admin_connections(sc, read_only: bool = False) -> int:
    """Established connections on the admin port, server side (ss). With
    read_only, only those whose bytes rdmagw has read (Recv-Q 0): a
    connection still in the accept queue, or accepted but not yet read,
    is idle to the server, and a newcomer may evict it."""
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{sc.admin_port} )"],
                         capture_output=True, text=True, check=True).stdout
    rows = [l.split() for l in out.splitlines() if l.strip()]
    return len([r for r in rows if not read_only or r[0] == "0"])


def closed_by_server(s: socket.socket, wait: float) -> bool:
    s.settimeout(wait)
    try:
        return s.recv(4096) == b""
    except RESET_ERRORS:
        return True
    except socket.timeout:
        return False


def raw_exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        out = b""
        for _ in range(1000):
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
    raise AssertionError("the server kept sending")


def test_idle_connections_are_capped_and_the_oldest_makes_room(sidecar):
    sc = start(sidecar)
    socks = []
    try:
        for _ in range(200):
            socks.append(socket.create_connection(("127.0.0.1", sc.admin_port), timeout=5))
        wait_for(lambda: admin_connections(sc) <= MAX_CONNECTIONS, timeout=5, what="at most 64 admin connections")
        time.sleep(0.3)
        held = admin_connections(sc)
        print(f"200 idle admin connections: {held} held by rdmagw")
        assert held <= MAX_CONNECTIONS
        # The oldest were evicted (the server closed them), the newest kept.
        assert closed_by_server(socks[0], 2), "the oldest idle connection was not closed to make room"
        assert not closed_by_server(socks[-1], 0.2), "the newest connection was closed"
        # And the next client is served.
        assert admin_request(sc.admin_port, "/live").status == 200
    finally:
        for s in socks:
            s.close()


def test_requests_that_never_finish_are_closed_and_do_not_lock_out_for_long(sidecar):
    sc = start(sidecar)
    started = time.monotonic()
    slow = []
    try:
        for _ in range(MAX_CONNECTIONS):
            s = socket.create_connection(("127.0.0.1", sc.admin_port), timeout=5)
            s.sendall(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            slow.append(s)
        # Mid-request from the server's view: it has read each one's first bytes.
        wait_for(lambda: admin_connections(sc, read_only=True) == MAX_CONNECTIONS, timeout=5,
                 what="64 connections mid-request, their bytes read by rdmagw")
        # Every connection is busy: the next one is closed at once.
        extra = socket.create_connection(("127.0.0.1", sc.admin_port), timeout=5)
        assert closed_by_server(extra, 3), "a 65th connection was kept while all 64 were mid-request"
        extra.close()
        assert sc.wait_log(lambda l: "event=admin_connection_refused" in l, timeout=5)
        # A slowloris that keeps dribbling does not keep its connection either.
        dribbler = slow[0]
        for _ in range(REQUEST_SECONDS + 5):
            try:
                dribbler.sendall(b"X")
            except OSError:
                break
            if closed_by_server(dribbler, 1):
                break
        # The deadline (10 s from each request's first byte) closes them all.
        for s in slow:
            assert closed_by_server(s, REQUEST_SECONDS + 5 - (time.monotonic() - started) + 2)
        took = time.monotonic() - started
        print(f"unfinished requests closed after {took:.1f}s")
        assert took < REQUEST_SECONDS + 5
        assert admin_request(sc.admin_port, "/live").status == 200
    finally:
        for s in slow:
            s.close()


def test_oversized_and_malformed_requests_get_their_status(sidecar):
    sc = start(sidecar)
    port = sc.admin_port
    cases = [
        (b"GET /stats HTTP/1.1\r\nX-Pad: " + b"a" * 9000 + b"\r\n\r\n", 431),
        (b"GET /stats HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(100)) + b"\r\n", 431),
        (b"POST /drain HTTP/1.1\r\nContent-Length: 100000\r\n\r\n", 413),
        (b"POST /drain HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
        (b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n", 400),
        (b"GET http://evil.example/stats HTTP/1.1\r\n\r\n", 400),
    ]
    for request, status in cases:
        answer = raw_exchange(port, request)
        assert answer.startswith(b"HTTP/1.1 %d " % status), f"{request[:60]!r} -> {answer[:80]!r}"
        assert b"Connection: close" in answer
    # Two requests on one connection, pipelined, answered in order.
    answer = raw_exchange(port, b"GET /live HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 404 " in answer, answer[:300]
    assert not sc.log_text().count("event=worker_failed")
    assert admin_request(port, "/live").status == 200


def test_a_client_that_does_not_read_its_answers_cannot_pile_up_requests(sidecar):
    """Pipelined requests whose answers the client does not take: once about
    1 MiB of answers waits, rdmagw stops reading that connection, so what the
    client can push is what the kernel's socket buffers hold, not gigabytes."""
    sc = start(sidecar)
    s = socket.create_connection(("127.0.0.1", sc.admin_port), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    request = b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 256
    pushed = 0
    deadline = time.monotonic() + 4
    rss0 = sc.rss_kib()
    try:
        for _ in range(10 ** 6):
            if time.monotonic() > deadline:
                break
            try:
                pushed += s.send(request)
            except BlockingIOError:
                time.sleep(0.01)
        grown = sc.rss_kib() - rss0
        print(f"pushed {pushed >> 20} MiB of requests in 4 s; rdmagw RSS +{grown} KiB")
        assert pushed < 64 << 20, f"rdmagw kept reading: {pushed >> 20} MiB of requests taken"
        assert admin_request(sc.admin_port, "/live").status == 200
    finally:
        s.close()
