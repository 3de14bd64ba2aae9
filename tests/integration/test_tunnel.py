# SPDX-License-Identifier: Apache-2.0
"""Data path through a host-a -> host-b rdmagw pair: bulk bytes, many streams,
half-close, reset propagation and Unix sockets."""

from __future__ import annotations

import hashlib
import random
import socket
import threading
import time

import pytest

from backends import EchoServer, ResetServer, Sha256Server, prng_bytes, prng_chunks
from conftest import echo_pair, scaled
from clients import (RESET_ERRORS, connect, echo_concurrently, echo_roundtrip, recv_to_eof, send_all,
                     wait_closed)

MiB = 1 << 20


@pytest.mark.deadline(300)
def test_256mib_each_way_through_one_stream_byte_exact(pair, backend):
    size = scaled(256 * MiB, MiB)
    client_seed, server_seed = 1001, 2002
    srv = backend(Sha256Server(send_size=size, send_seed=server_seed, mode="duplex",
                               io_timeout=60))
    p = pair([{"name": "bulk", "target": srv.endpoint}], [srv.endpoint])

    deadline = time.monotonic() + 240
    sock = connect(p.address("bulk"), timeout=10)
    sent = {"bytes": 0, "sha": None, "error": None}

    def sender():
        h = hashlib.sha256()
        try:
            for chunk in prng_chunks(client_seed, size):
                send_all(sock, chunk, deadline)
                h.update(chunk)
                sent["bytes"] += len(chunk)
            sock.shutdown(socket.SHUT_WR)
        except Exception as e:  # reported below
            sent["error"] = f"{type(e).__name__}: {e}"
        sent["sha"] = h.hexdigest()

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    h = hashlib.sha256()
    got = 0
    buf = bytearray(MiB)
    try:
        for _ in range(1 << 20):
            left = deadline - time.monotonic()
            assert left > 0, f"receive deadline passed after {got} bytes"
            sock.settimeout(min(left, 30))
            n = sock.recv_into(buf)
            if n == 0:
                break
            h.update(memoryview(buf)[:n])
            got += n
            assert got <= size, "received more bytes than the backend sent"
    finally:
        t.join(timeout=max(1.0, deadline - time.monotonic()))
        sock.close()

    assert sent["error"] is None, sent["error"]
    assert sent["bytes"] == size
    res = srv.results.get(timeout=30)
    assert res["error"] is None, res["error"]
    # client -> backend
    assert res["recv_bytes"] == size, f"backend got {res['recv_bytes']} of {size} bytes"
    assert res["recv_sha"] == sent["sha"], "client -> backend bytes differ (SHA-256)"
    # backend -> client
    assert res["sent_bytes"] == size
    assert got == size, f"client got {got} of {size} bytes"
    assert h.hexdigest() == res["sent_sha"], "backend -> client bytes differ (SHA-256)"


@pytest.mark.deadline(180)
def test_1000_concurrent_streams_echo_byte_exact(pair, backend):
    n_streams = scaled(1000, 10)
    p, echo = echo_pair(pair, backend)
    addr = p.address("echo")
    rng = random.Random(7)
    payloads = [rng.randbytes(rng.randint(4 * 1024, 64 * 1024)) for _ in range(n_streams)]
    # Every stream ends in an EOF (echo_concurrently fails the test otherwise).
    got = echo_concurrently(addr, payloads, time.monotonic() + 120)
    bad = [i for i, (a, b) in enumerate(zip(got, payloads)) if a != b]
    assert not bad, f"{len(bad)} streams not byte-exact, e.g. {bad[:10]}"
    assert echo.accepted >= n_streams
    assert not echo.errors, echo.errors


def test_half_close_client_reads_whole_reply_after_shut_wr(pair, backend):
    reply_size = 4 * MiB
    srv = backend(Sha256Server(send_size=reply_size, send_seed=33, mode="reply_after_eof"))
    p = pair([{"name": "hc", "target": srv.endpoint}], [srv.endpoint])
    request = prng_bytes(44, 1 * MiB + 123)
    deadline = time.monotonic() + 60
    sock = connect(p.address("hc"), timeout=10)
    try:
        send_all(sock, request, deadline)
        sock.shutdown(socket.SHUT_WR)
        reply = recv_to_eof(sock, deadline)  # returns only once EOF is seen
    finally:
        sock.close()
    assert len(reply) == 32 + reply_size
    assert reply[:32] == hashlib.sha256(request).digest(), "backend saw different request bytes"
    assert reply[32:] == prng_bytes(33, reply_size), "reply body not byte-exact"
    res = srv.results.get(timeout=10)
    assert res["error"] is None, res["error"]
    assert res["recv_bytes"] == len(request)


def test_backend_reset_reaches_client_promptly(pair, backend):
    srv = backend(ResetServer(wait_first=2.0))
    p = pair([{"name": "rst", "target": srv.endpoint}], [srv.endpoint])
    sock = connect(p.address("rst"), timeout=5)
    try:
        t0 = time.monotonic()
        try:
            sock.sendall(b"hello, then reset me\n")
        except RESET_ERRORS:
            pass
        how, _, _ = wait_closed(sock, timeout=5)
        elapsed = time.monotonic() - t0
    finally:
        sock.close()
    assert how == "reset", f"the backend's reset reached the client as {how}"
    assert elapsed < 2.0, f"client noticed the backend's RST only after {elapsed:.2f}s"
    # The RST can reach the client before the backend thread counts it.
    for _ in range(200):
        if srv.reset_count >= 1:
            break
        time.sleep(0.01)
    assert srv.reset_count >= 1


def test_unix_socket_listener_echo_roundtrip(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "ux", "listen": "unix", "target": echo.endpoint}], [echo.endpoint])
    addr = p.address("ux")
    assert isinstance(addr, str) and addr.startswith("/tmp/")
    payload = prng_bytes(8, 300 * 1024)
    assert echo_roundtrip(addr, payload, timeout=10) == payload


def test_unix_socket_target_echo_roundtrip(pair, backend, sock_dir):
    echo = backend(EchoServer(unix_path=str(sock_dir / "backend.sock")))
    assert echo.endpoint.startswith("unix:/")
    p = pair([{"name": "ux", "target": echo.endpoint}], [echo.endpoint])
    payload = prng_bytes(9, 300 * 1024)
    assert echo_roundtrip(p.address("ux"), payload, timeout=10) == payload


def test_baseline_io_uring_path_serves_streams(pair, backend, monkeypatch):
    """RDMAGW_IO_URING=baseline restricts rdmagw to what kernel 5.10 offers
    (no ring setup flags, single-shot accept); the data path must not care."""
    monkeypatch.setenv("RDMAGW_IO_URING", "baseline")
    p, _ = echo_pair(pair, backend)
    assert "io_uring=basic" in p.a.log_text() and "io_uring=basic" in p.b.log_text()
    for i in range(20):  # several accepts in a row: single-shot accept re-arms each time
        payload = prng_bytes(300 + i, 64 * 1024)
        assert echo_roundtrip(p.address("echo"), payload, timeout=10) == payload
