# SPDX-License-Identifier: Apache-2.0
"""Session-level flow control under connection patterns that once starved a
session: many idle connections, and many streams reset with reads pending.
Both run with a small session budget so that a leak shows within seconds."""

from __future__ import annotations

import socket
import time

import pytest

from backends import EchoServer
from clients import connect, echo_roundtrip, free_port, wait_closed

# 16 KiB frames, 64 KiB stream windows, a session budget of four windows:
# 16 idle connections would pin it all if idle reads held session credit.
SMALL = {"buffer_size": 16384, "stream_window": "64KiB", "session_budget": "256KiB"}


@pytest.mark.deadline(120)
def test_idle_connections_do_not_starve_new_streams(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint],
             a_tunnel=SMALL, b_tunnel=SMALL, workers=1)
    idle = []
    try:
        for i in range(64):  # 64 x 16 KiB = 4x the session budget
            s = connect(p.address("echo"), timeout=5)
            # One round trip each, so every stream is open and has a read posted.
            s.sendall(b"x")
            assert s.recv(1) == b"x", f"idle connection {i} got no echo"
            idle.append(s)
        payload = bytes(range(256)) * 1024  # 256 KiB: needs the session window to turn over
        t0 = time.monotonic()
        assert echo_roundtrip(p.address("echo"), payload, timeout=10) == payload
        print(f"new stream beside {len(idle)} idle ones: {time.monotonic() - t0:.3f}s")
    finally:
        for s in idle:
            s.close()


@pytest.mark.deadline(120)
def test_resets_with_reads_pending_do_not_leak_session_credit(pair, backend):
    echo = backend(EchoServer())
    dead = f"tcp:127.0.0.1:{free_port()}"  # allowed, nobody listens: every stream is reset
    p = pair([{"name": "echo", "target": echo.endpoint}, {"name": "dead", "target": dead}],
             [echo.endpoint, dead], a_tunnel=SMALL, b_tunnel=SMALL, workers=1)
    # Each refused stream had a read posted on the client socket when the
    # RESET arrived; 100 of them would leak 1.6 MiB, six times the budget.
    for i in range(100):
        try:
            s = connect(p.address("dead"), timeout=5)
        except ConnectionResetError:
            continue  # the reset beat our own connect() bookkeeping: refused all the same
        try:
            how, _, _ = wait_closed(s, timeout=5)
            assert how == "reset", f"refused stream {i} ended with {how}, not a reset"
        finally:
            s.close()
    payload = bytes(range(256)) * 2048  # 512 KiB: two full turns of the session window
    assert echo_roundtrip(p.address("echo"), payload, timeout=10) == payload
