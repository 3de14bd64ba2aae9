# SPDX-License-Identifier: Apache-2.0
"""SIGTERM drains: open streams finish, new connections are refused, exit 0."""

from __future__ import annotations

import signal
import socket
import threading
import time

from backends import EchoServer, HoldEchoServer, prng_bytes
from clients import connect, recv_exact, recv_to_eof
from conftest import scaled

MiB = 1 << 20


def test_sigterm_lets_inflight_stream_finish_refuses_new_and_exits_0(pair, backend):
    shutdown_timeout_s = 3.0
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint],
             shutdown_timeout_ms=int(shutdown_timeout_s * 1000))
    addr = p.address("echo")

    data = prng_bytes(91, scaled(6 * MiB, 2 * MiB))
    chunk = 64 * 1024
    sock = connect(addr, timeout=10)
    deadline = time.monotonic() + 60
    midway = threading.Event()
    state = {"send_error": None, "recv_error": None, "echo": b""}

    def sender():
        try:
            for i in range(0, len(data), chunk):
                sock.sendall(data[i:i + chunk])
                if i >= len(data) // 4:
                    midway.set()
                time.sleep(0.01)  # ~1 s of paced sending: the stream is mid-transfer
            sock.shutdown(socket.SHUT_WR)
        except Exception as e:
            state["send_error"] = f"{type(e).__name__}: {e}"
        midway.set()

    def receiver():
        try:
            state["echo"] = recv_to_eof(sock, deadline)
        except Exception as e:
            state["recv_error"] = f"{type(e).__name__}: {e}"

    ts = threading.Thread(target=sender, daemon=True)
    tr = threading.Thread(target=receiver, daemon=True)
    ts.start()
    tr.start()
    try:
        assert midway.wait(20), "transfer did not get going"
        assert state["send_error"] is None, state["send_error"]
        t_sig = time.monotonic()
        p.a.send_signal(signal.SIGTERM)

        # New connections to the listener are refused once the signal is handled.
        refused_after = None
        for _ in range(100):
            if time.monotonic() - t_sig > 1.0:
                break
            try:
                s = connect(addr, timeout=0.5)
                s.close()
            except ConnectionRefusedError:
                refused_after = time.monotonic() - t_sig
                break
            except OSError:
                pass
            time.sleep(0.02)
        assert refused_after is not None, "listener still accepting 1 s after SIGTERM"

        ts.join(timeout=30)
        tr.join(timeout=30)
        assert not ts.is_alive() and not tr.is_alive(), "transfer hung during drain"
    finally:
        sock.close()
    assert state["send_error"] is None, state["send_error"]
    assert state["recv_error"] is None, state["recv_error"]
    assert len(state["echo"]) == len(data), f"echo has {len(state['echo'])} of {len(data)} bytes"
    assert state["echo"] == data, "echo not byte-exact across the drain"

    rc = p.a.wait(timeout=shutdown_timeout_s + 5)
    exited_after = time.monotonic() - t_sig
    assert rc == 0, f"host-a exited {rc} after SIGTERM"
    assert exited_after <= shutdown_timeout_s + 1.0, (
        f"host-a took {exited_after:.2f}s to exit (shutdown_timeout {shutdown_timeout_s}s)")
    assert p.b.running()


def test_far_side_drain_delivers_the_frames_queued_when_it_closes(pair, backend):
    """host-b drains on SIGTERM. Its streams end while host-a is stopped
    (SIGSTOP), so their last data and FINs are still queued in host-b, for
    want of socket space or RDMA credits, when host-b closes its sessions.
    A clean close must still deliver them once host-a runs again: every
    client gets all of its echo and then EOF, never a reset."""
    hold = backend(HoldEchoServer())
    p = pair([{"name": "echo", "target": hold.endpoint}], [hold.endpoint], shutdown_timeout_ms=10000)
    addr = p.address("echo")
    # More than loopback's socket buffers hold (~10 MB), each stream within
    # its 256 KiB window, so host-b's own queue is not empty at its close.
    streams = scaled(48, 8)
    size = scaled(240 * 1024, 24 * 1024)
    payloads = [prng_bytes(700 + i, size) for i in range(streams)]
    socks = [connect(addr, timeout=10) for _ in range(streams)]
    results: list = [None] * streams
    deadline = time.monotonic() + 90
    stopped = False
    try:
        for s, data in zip(socks, payloads):
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        for _ in range(1200):
            if hold.eof_count == streams or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert hold.eof_count == streams, f"only {hold.eof_count} of {streams} requests reached the server"
        since = p.b.log_size()
        p.a.send_signal(signal.SIGSTOP)
        stopped = True
        p.b.send_signal(signal.SIGTERM)
        assert p.b.wait_log("event=drain_started", 10, since=since), p.b.tail()
        hold.release()
        # host-b's streams end as it reads the replies; then it closes.
        assert p.b.wait_log("event=session_closed", 30, since=since), p.b.tail()
        time.sleep(0.3)
        p.a.send_signal(signal.SIGCONT)
        stopped = False

        def finish(i):
            try:
                results[i] = recv_to_eof(socks[i], deadline)
            except Exception as e:  # a reset instead of EOF lands here
                results[i] = f"{type(e).__name__}: {e}"

        threads = [threading.Thread(target=finish, args=(i,), daemon=True) for i in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        if stopped:
            p.a.send_signal(signal.SIGCONT)
        for s in socks:
            s.close()
    for i, got in enumerate(results):
        assert isinstance(got, bytes), f"stream {i}: {got}"
        assert got == payloads[i], f"stream {i}: {len(got)} of {size} bytes, then EOF"
    assert p.b.wait(timeout=15) == 0
