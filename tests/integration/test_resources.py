# SPDX-License-Identifier: Apache-2.0
"""Backpressure: a backend that does not read must not make rdmagw buffer
without bound, and nothing may be lost once it reads again."""

from __future__ import annotations

import hashlib
import struct
import socket
import time

import pytest

from admin_client import admin_json
from backends import StallServer, prng_bytes
from clients import connect, wait_closed
from conftest import TEST_TRANSPORT

MiB = 1 << 20
KiB_PER_MiB = 1024


def peer_payload(port: int, peer: str) -> tuple[int, int]:
    """(bytes received from `peer`, of those queued) per GET /stats."""
    for entry in admin_json(port, "/stats")["peers"]:
        if entry["name"] == peer:
            return entry["bytes_received"], entry["queued_bytes"]
    return 0, 0


@pytest.mark.deadline(150)
def test_slow_reader_keeps_rss_bounded_and_loses_nothing(pair, backend):
    srv = backend(StallServer(io_timeout=60))
    p = pair([{"name": "slow", "target": srv.endpoint}], [srv.endpoint])

    sock = connect(p.address("slow"), timeout=10)
    try:
        # The stream is open end to end once the backend has accepted; the first
        # bytes may be needed to trigger the open (0-RTT), so send one block first.
        blocks = [prng_bytes(500 + i, MiB) for i in range(16)]
        h = hashlib.sha256()
        first = blocks[0][:4096]
        sock.sendall(first)
        h.update(first)
        sent = len(first)
        assert srv.connected.wait(10), "backend never got the connection"
        time.sleep(0.5)
        rss0 = {"host-a": p.a.rss_kib(), "host-b": p.b.rss_kib()}
        # The first bytes waited in the queue while host-b connected to the
        # backend; what is queued from here on is for the slow reader.
        _, queued0 = peer_payload(p.b.admin_port, "host-a")

        # Write as much of 1 GiB as fits in ~15 s; the send blocks once the
        # kernel buffers and rdmagw's windows are full.
        limit = 1 << 30
        t_end = time.monotonic() + 15
        block_i, off = 0, len(first)
        sock.settimeout(0.5)
        for _ in range(10_000_000):
            if sent >= limit or time.monotonic() >= t_end:
                break
            blk = blocks[block_i % len(blocks)]
            try:
                n = sock.send(memoryview(blk)[off:])
            except socket.timeout:
                continue
            h.update(memoryview(blk)[off:off + n])
            sent += n
            off += n
            if off == len(blk):
                block_i, off = block_i + 1, 0
        rss1 = {"host-a": p.a.rss_kib(), "host-b": p.b.rss_kib()}
        growth = {k: (rss1[k] - rss0[k]) / KiB_PER_MiB for k in rss0}
        print(f"slow reader: client sent {sent / MiB:.1f} MiB; RSS growth MiB {growth}")
        for node, g in growth.items():
            assert g < 64, (f"{node} RSS grew by {g:.1f} MiB while the backend did not read "
                            f"({rss0[node]} -> {rss1[node]} KiB, {sent / MiB:.1f} MiB sent)")
        assert sent < limit, "the whole 1 GiB went out although the backend reads nothing"
        # What /stats says of the buffers is part of RSS, and not nothing
        # while bytes wait.
        for node, sc in (("host-a", p.a), ("host-b", p.b)):
            workers = admin_json(sc.admin_port, "/stats")["per_worker"]
            resident = sum(w["buffer_bytes_resident"] for w in workers)
            in_use = sum(w["buffer_bytes_in_use"] for w in workers)
            rss = sc.rss_kib() * 1024
            print(f"slow reader: {node} buffers resident {resident}, in use {in_use}, RSS {rss}")
            assert 0 < resident <= rss, f"{node}: {resident} bytes of buffers resident, RSS {rss}"

        # Now let the backend read everything; it must get exactly what was sent.
        sock.settimeout(10)
        sock.shutdown(socket.SHUT_WR)
        srv.release()
        res = srv.results.get(timeout=60)
        assert res["error"] is None, res["error"]
        assert res["recv_bytes"] == sent, f"backend got {res['recv_bytes']} of {sent} bytes"
        assert res["recv_sha"] == h.hexdigest(), "backend got different bytes than were sent"
        how, _, extra = wait_closed(sock, timeout=10)
        assert how == "eof" and extra == 0
        # Once the backend's socket was full, host-b queued (copied) what
        # kept arriving within the stream's window, and says so; never more
        # than arrived.
        received, queued = peer_payload(p.b.admin_port, "host-a")
        print(f"slow reader: host-b received {received} bytes, queued {queued} ({queued0} before the bulk)")
        assert received == sent
        assert queued - queued0 >= 64 * 1024, "host-b counted no queued bytes for a reader that read nothing"
        assert queued <= received
    finally:
        sock.close()


@pytest.mark.deadline(60)
def test_client_reset_is_noticed_while_stream_is_stalled_on_credit(pair, backend):
    """A stream whose target stopped reading has no receive posted on the
    client socket; a client that gives up with RST must still end the stream
    on both sidecars (not pin it and its buffers for the session's life)."""
    srv = backend(StallServer(io_timeout=30))
    p = pair([{"name": "slow", "target": srv.endpoint}], [srv.endpoint], workers=1)
    sock = connect(p.address("slow"), timeout=10)
    block = prng_bytes(77, MiB)
    sock.sendall(block[:4096])
    assert srv.connected.wait(10), "backend never got the connection"
    # Fill every window and buffer until the client's sends block for 1 s.
    sock.settimeout(1.0)
    for _ in range(10_000):
        try:
            sock.send(block)
        except socket.timeout:
            break
    a_mark, b_mark = p.a.log_size(), p.b.log_size()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # RST
    line = p.a.wait_log(lambda l: "event=stream_reset" in l and "reason=local-reset" in l,
                        timeout=5, since=a_mark)
    assert line, "host-a never noticed the client's reset while the stream was stalled"
    line = p.b.wait_log(lambda l: "event=stream_reset" in l and "reason=cancel" in l,
                        timeout=5, since=b_mark)
    assert line, "host-b never reset its side of the stream"
    srv.release()


def test_idle_buffer_pool_says_what_holds_bytes_and_what_the_kernel_was_lent(pair, backend):
    """rdmagw_worker_buffer_bytes / per_worker: with no stream open, in use is
    what the sessions keep; the receive ring's buffers (lent to the kernel,
    resident only once written) are `posted`, where the kernel has buffer
    rings, not in use."""
    from backends import EchoServer
    from clients import echo_roundtrip, wait_for

    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    assert echo_roundtrip(p.address("echo"), b"x" * 100_000, timeout=10) == b"x" * 100_000
    rings = "buffer-ring" in (p.a.wait_log(lambda l: "event=ready" in l, timeout=5) or "")

    def idle(sc) -> bool:
        # In use: what the sessions keep (TCP: a buffer or two; RDMA: its
        # posted receives, recv_depth buffers); posted: the ring (256 buffers).
        workers = admin_json(sc.admin_port, "/stats")["per_worker"]
        if not rings:
            return all(w["buffer_bytes_posted"] == 0 for w in workers)
        share = 32 if TEST_TRANSPORT == "tcp" else 1
        return all(share * w["buffer_bytes_in_use"] < w["buffer_bytes_posted"] for w in workers)

    for sc in (p.a, p.b):
        try:
            wait_for(lambda: idle(sc), timeout=10, what=f"{sc.name}'s pool idle")
        except AssertionError:
            raise AssertionError(f"rings={rings} {admin_json(sc.admin_port, '/stats')['per_worker']}") from None
