# SPDX-License-Identifier: Apache-2.0
"""tunnel.tcp_splice: large DATA payloads that pass from the tunnel socket to
the application's socket by splice(2), never through user space.

Both sidecars splice, so each direction of an echo exercises it: host-b
pipes what the clients send, host-a what the echo server returns. The
sessions' `spliced_bytes` (GET /peers) show that the pipe really carried
them. A slow reader makes the application socket fill, so that a piped
payload is partly queued (read out of the pipe) behind what the socket
took; a far sidecar killed mid-transfer must reach every client as a
reset, never as a clean end."""

from __future__ import annotations

import random
import time

import pytest

from admin_client import admin_request
from backends import EchoServer
from clients import RESET_ERRORS, connect, echo_concurrently
from conftest import scaled

MiB = 1 << 20
SPLICE = {"tcp_splice": "true"}


def spliced_bytes(sidecar) -> int:
    peers = admin_request(sidecar.admin_port, "/peers").json()["peers"]
    return sum(s["spliced_bytes"] for p in peers for s in p["sessions"])


def splice_echo_pair(pair, backend):
    """An echo server behind a pair whose two sidecars both splice."""
    echo = backend(EchoServer())
    # Without tunnel.auth (a loopback tunnel may): authenticated records are
    # opened in user space, so a psk tunnel refuses tcp_splice.
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], a_tunnel=SPLICE, b_tunnel=SPLICE,
             workers=1, a_auth=None, b_auth=None)
    return p, echo


@pytest.mark.deadline(240)
def test_spliced_echo_of_many_streams_is_byte_exact_both_ways(pair, backend):
    p, echo = splice_echo_pair(pair, backend)
    rng = random.Random(11)
    payloads = [rng.randbytes(scaled(8 * MiB, MiB) + rng.randint(0, 70000)) for _ in range(8)]
    got = echo_concurrently(p.address("echo"), payloads, time.monotonic() + 180)
    bad = [i for i, (a, b) in enumerate(zip(got, payloads)) if a != b]
    assert not bad, f"streams not byte-exact: {bad} (lengths {[len(got[i]) for i in bad]})"
    assert not echo.errors, echo.errors
    # Each side piped part of what it received (small frames, and frames
    # that arrive in pieces, are copied; how much depends on timing: from
    # tens of MiB on an idle machine to under 1 MiB on a loaded sanitizer
    # build), so the check is that each side's pipe carried payloads at all.
    total = sum(len(x) for x in payloads)
    assert spliced_bytes(p.b) > 0, f"host-b spliced nothing of {total} bytes"
    assert spliced_bytes(p.a) > 0, f"host-a spliced nothing of {total} bytes"


@pytest.mark.deadline(240)
def test_spliced_payloads_to_a_slow_reader_are_queued_not_lost(pair, backend):
    p, echo = splice_echo_pair(pair, backend)
    rng = random.Random(12)
    payloads = [rng.randbytes(scaled(4 * MiB, MiB)) for _ in range(4)]
    # 64 KiB per stream every 5 ms: well below what the tunnel brings, so
    # host-a's client sockets fill and piped payloads are queued behind them.
    got = echo_concurrently(p.address("echo"), payloads, time.monotonic() + 200, read_bytes_per_turn=64 * 1024,
                       turn_pause=0.005)
    bad = [i for i, (a, b) in enumerate(zip(got, payloads)) if a != b]
    assert not bad, f"streams not byte-exact: {bad} (lengths {[len(got[i]) for i in bad]})"
    assert spliced_bytes(p.a) > 0, "host-a piped nothing: the test did not exercise splice"


@pytest.mark.deadline(120)
def test_far_sidecar_killed_mid_spliced_transfer_resets_every_client(pair, backend):
    echo = backend(EchoServer())
    no_resume = dict(SPLICE, resume_timeout_ms=0)
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], a_tunnel=no_resume,
             b_tunnel=no_resume, workers=1, a_auth=None, b_auth=None)
    socks = [connect(p.address("echo"), timeout=10) for _ in range(4)]
    chunk = random.Random(13).randbytes(256 * 1024)
    deadline = time.monotonic() + 60
    outcome = {}
    killed_at = None
    try:
        for s in socks:
            s.setblocking(False)
        received = [0] * len(socks)
        while len(outcome) < len(socks):
            assert time.monotonic() < deadline, f"only {len(outcome)} of {len(socks)} streams ended: {outcome}"
            if killed_at is None and min(received) > 4 * MiB:
                assert spliced_bytes(p.a) > 0, "nothing was piped before the kill"
                p.b.kill9()
                killed_at = time.monotonic()
            for i, s in enumerate(socks):
                if i in outcome:
                    continue
                # One thread drives each socket, reading before writing, so
                # that a reset is read here and not consumed by a send.
                try:
                    data = s.recv(1 << 20)
                    if not data:
                        outcome[i] = "eof"
                        continue
                    received[i] += len(data)
                except (BlockingIOError, InterruptedError):
                    pass
                except RESET_ERRORS:
                    outcome[i] = "reset"
                    continue
                if killed_at is None:
                    try:
                        s.send(chunk)
                    except (BlockingIOError, InterruptedError):
                        pass
            time.sleep(0.001)
    finally:
        for s in socks:
            s.close()
    assert killed_at is not None, "the transfer never got going"
    assert all(v == "reset" for v in outcome.values()), f"clients saw {outcome}, not resets"
