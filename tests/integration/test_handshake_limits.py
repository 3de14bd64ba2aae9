# SPDX-License-Identifier: Apache-2.0
"""What a peer that has proved nothing may cost, and what an authenticated
peer may ask of one session (docs/configuration.md, "tunnel.limits";
docs/security.md): real sidecars, and raw sockets that play the peers.

- A connection in its handshake costs a few KiB (a small receive buffer),
  not a session's buffers: 400 idle connections used to take ~100 MiB.
- At most tunnel.limits.handshakes connections may be in their handshake at
  once, and handshakes_per_address of them from one address; further ones
  are reset at accept, counted and logged (rate-limited), and everyone else
  goes on being served.
- A flood of connections that never authenticate cannot flood the log.
- An authenticated peer gets at most streams_per_session streams open at
  once and opens_per_second OPENs per second in one session; beyond that
  its OPENs are answered with RESET(resource).
"""

from __future__ import annotations

import socket
import time

import pytest

import tunnel_frames as tf
from admin_client import admin_json, admin_request, parse_metrics
from backends import EchoServer, prng_bytes
from clients import RESET_ERRORS, echo_roundtrip, wait_for
from conftest import key_file, sanitized, tcp_only
from tunnel_frames import TunnelPeer

pytestmark = tcp_only  # raw sockets speak the TCP transport's wire

KiB = 1 << 10
MiB = 1 << 20


def metrics(sc) -> dict:
    return parse_metrics(admin_request(sc.admin_port, "/metrics").text)


class Refused:
    """A connection reset before connect() returned (the sidecar accepted and
    reset it that fast)."""

    def close(self) -> None:
        pass


def idle_connection(port: int, source: str) -> socket.socket | Refused:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    except RESET_ERRORS:
        return Refused()
    s.setblocking(False)
    return s


def in_handshake(sc) -> set[str]:
    """Remote addresses of the connections `sc` holds in their handshake (GET /peers)."""
    peers = admin_json(sc.admin_port, "/peers")["peers"]
    return {s["remote_address"] for p in peers for s in p["sessions"] if s["state"] == "handshake"}


def held_connection(sc, source: str) -> socket.socket:
    """An idle connection that `sc` has accepted (and so holds a slot for)
    before this returns: connections made after it are accepted after it,
    whichever worker takes them."""
    s = idle_connection(sc.tunnel_port, source)
    me = "%s:%d" % s.getsockname()
    wait_for(lambda: me in in_handshake(sc), timeout=5, what=f"{me} accepted")
    return s


def state_after(sock: socket.socket, wait: float) -> str:
    """'open' if nothing happened on `sock` for `wait` seconds, else 'reset' or 'eof'."""
    if isinstance(sock, Refused):
        return "reset"
    sock.settimeout(wait)
    try:
        data = sock.recv(1)
    except socket.timeout:
        return "open"
    except RESET_ERRORS:
        return "reset"
    return "eof" if not data else f"data {data!r}"


def fleet_key() -> bytes:
    return tf.read_key(key_file())


def test_idle_handshakes_cost_a_few_kib(pair, backend):
    """400 connections that never send a byte: the sidecar's memory grows by
    a few KiB each (a 4 KiB receive buffer and the session), not the 256 KiB
    receive buffer an admitted transport takes."""
    echo = backend(EchoServer())
    limits = "{handshakes: 1000, handshakes_per_address: 1000}"
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint],
             b_tunnel={"connect_timeout_ms": 60000, "limits": limits})
    echo_roundtrip(p.address("echo"), b"warm up", timeout=10)
    fds0, rss0 = p.b.open_fds(), p.b.rss_kib()
    n = 400
    socks = []
    try:
        for i in range(n):
            socks.append(idle_connection(p.b.tunnel_port, "127.0.0.2"))
        # (Less a few: the warm-up's target connection may close meanwhile.)
        wait_for(lambda: p.b.open_fds() >= fds0 + n - 4, timeout=10, what=f"host-b accepted {n} connections")
        time.sleep(0.3)  # the last ones' sessions are being set up
        grown = p.b.rss_kib() - rss0
        print(f"{n} idle handshakes: host-b RSS +{grown} KiB ({grown / n:.1f} KiB each)")
        if not sanitized(p.b.binary):  # shadow memory would count several times over
            assert grown < 16 * KiB, f"{n} idle handshakes took {grown} KiB ({grown / n:.1f} KiB each)"
        # And the pair they share the port with is served meanwhile.
        payload = prng_bytes(7, 256 * KiB)
        assert echo_roundtrip(p.address("echo"), payload, timeout=10) == payload
    finally:
        for s in socks:
            s.close()


def test_handshake_slots_are_capped_per_process_and_per_address(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint],
             b_tunnel={"connect_timeout_ms": 20000, "limits": "{handshakes: 12, handshakes_per_address: 8}"})
    echo_roundtrip(p.address("echo"), b"warm up", timeout=10)  # host-a's sessions are admitted
    mark = p.b.log_size()
    socks = []
    try:
        # One address takes its 8; the 9th is reset at once.
        for _ in range(8):
            socks.append(held_connection(p.b, "127.0.0.2"))
        extra = idle_connection(p.b.tunnel_port, "127.0.0.2")
        assert state_after(extra, 3) == "reset", "a 9th connection from one address was not refused"
        extra.close()
        # Another address is still served, up to the process's 12.
        for _ in range(4):
            socks.append(held_connection(p.b, "127.0.0.3"))
        extra = idle_connection(p.b.tunnel_port, "127.0.0.4")
        assert state_after(extra, 3) == "reset", "a 13th connection in its handshake was not refused"
        extra.close()
        for s in socks:
            assert state_after(s, 0.05) == "open", "a connection within the limits was closed"

        m = metrics(p.b)
        assert m["rdmagw_tunnel_handshakes_refused_total"] == 2
        assert p.b.wait_log(lambda l: "event=handshake_refused" in l and "remote=127.0.0.2" in l
                            and "limit=tunnel.limits.handshakes_per_address" in l and "max=8" in l,
                            timeout=5, since=mark)
        assert p.b.wait_log(lambda l: "event=handshake_refused" in l and "remote=127.0.0.4" in l
                            and "limit=tunnel.limits.handshakes " in l and "max=12" in l,
                            timeout=5, since=mark)
        # The peer that authenticated long ago is not affected.
        payload = prng_bytes(8, 256 * KiB)
        assert echo_roundtrip(p.address("echo"), payload, timeout=10) == payload
    finally:
        for s in socks:
            s.close()

    # Closed connections give their slots back; so does admission: twelve
    # peers that authenticate hold no slot, and a thirteenth still gets in.
    def admitted_peer():
        peer = TunnelPeer(p.b.tunnel_port, source="127.0.0.2")
        peer.authenticate(fleet_key(), node=b"limits-test")
        return peer

    peers = []
    try:
        # (A probe made before the slots are back is refused and counted.)
        wait_for(lambda: _accepts(p.b.tunnel_port), timeout=5, what="slots given back after the close")
        refused = metrics(p.b)["rdmagw_tunnel_handshakes_refused_total"]
        for _ in range(12):
            peers.append(admitted_peer())
        last = admitted_peer()
        peers.append(last)
        tf_ping_pong(last)
    finally:
        for peer in peers:
            peer.close()
    assert metrics(p.b)["rdmagw_tunnel_handshakes_refused_total"] == refused, "an admitted peer was refused"


def _accepts(port: int) -> bool:
    try:
        peer = TunnelPeer(port, source="127.0.0.2")
    except OSError:
        return False
    with peer:
        try:
            peer.authenticate(fleet_key(), node=b"probe")
            return True
        except (tf.PeerClosed, OSError):
            return False


def tf_ping_pong(peer: TunnelPeer, opaque: int = 0x5EED) -> None:
    peer.send(tf.ping(opaque))
    f = peer.next_frame(5, skip=(tf.PING, tf.WINDOW))
    assert f[0] == tf.PONG and tf.u64(f[4]) == opaque, f"expected PONG, got {tf.TYPE_NAMES.get(f[0], f[0])}"


def test_a_handshake_that_never_ends_gives_its_slot_back(pair, backend):
    """tunnel.connect_timeout_ms bounds a handshake: an idle connection is
    closed after it, and its slot serves the next one."""
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint],
             b_tunnel={"connect_timeout_ms": 1500, "limits": "{handshakes: 2, handshakes_per_address: 2}"})
    echo_roundtrip(p.address("echo"), b"warm up", timeout=10)
    first = [held_connection(p.b, "127.0.0.2") for _ in range(2)]
    refused = idle_connection(p.b.tunnel_port, "127.0.0.2")
    try:
        assert state_after(refused, 3) == "reset"
        assert metrics(p.b)["rdmagw_tunnel_handshakes_refused_total"] == 1
        for s in first:
            started = time.monotonic()
            how = state_after(s, 5)
            assert how in ("eof", "reset"), f"an idle handshake stayed open past the timeout ({how})"
            print(f"idle handshake ended ({how}) {time.monotonic() - started:.2f}s after we looked")
    finally:
        for s in first + [refused]:
            s.close()
    # The slots are back: a new peer gets in (a probe made before they are
    # is refused, so this polls rather than counts).
    wait_for(lambda: _accepts(p.b.tunnel_port), timeout=5, what="a handshake after the timeouts")


def test_connections_that_never_authenticate_do_not_flood_the_log(pair, backend):
    """300 connections, each sending a malformed frame before it could have
    proved anything: the log takes a few dozen lines, not two per
    connection. (Wrong proofs are logged once per address: test_auth.py.)"""
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    echo_roundtrip(p.address("echo"), b"warm up", timeout=10)
    mark = p.b.log_size()
    lines0 = p.b.log_text(mark).count("\n")
    garbage = [
        tf.frame(99, 0, b"x" * 8),                    # no such frame type
        tf.frame(tf.OPEN, 1, b"\x00\x05hello"),       # OPEN before HELLO
        tf.frame(tf.HELLO, 0, b"\x01"),               # a HELLO cut short
    ]
    for i in range(300):
        with TunnelPeer(p.b.tunnel_port) as peer:
            try:
                peer.send(garbage[i % len(garbage)])
                peer.read_frame(5)
            except (tf.PeerClosed, OSError):
                pass
    text = p.b.log_text(mark)
    added = text.count("\n") - lines0
    print(f"300 hostile connections added {added} log lines")
    assert added < 80, f"300 hostile connections added {added} log lines:\n{text[-3000:]}"
    # Once the rate allows, the next line says how many were dropped.
    time.sleep(1.0)
    with TunnelPeer(p.b.tunnel_port) as peer:
        peer.send(garbage[0])
        try:
            peer.read_frame(5)
        except (tf.PeerClosed, OSError):
            pass
    assert p.b.wait_log(lambda l: "event=session_closed" in l and "suppressed=" in l, timeout=5, since=mark), \
        "no line says how many were dropped"
    payload = prng_bytes(9, 64 * KiB)
    assert echo_roundtrip(p.address("echo"), payload, timeout=10) == payload


def read_resets(peer: TunnelPeer, until_pong: int) -> dict[int, int]:
    """Frames up to the PONG echoing `until_pong`: {stream: RESET code}."""
    resets = {}
    for _ in range(10000):
        f = peer.next_frame(5, skip=(tf.PING, tf.WINDOW, tf.DATA))
        if f[0] == tf.PONG and tf.u64(f[4]) == until_pong:
            return resets
        if f[0] == tf.RESET:
            resets[f[3]] = tf.u32(f[4])
    raise AssertionError("no PONG")


def test_streams_per_session_are_capped(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint],
             b_tunnel={"limits": "{streams_per_session: 4, opens_per_second: 0}"})
    mark = p.b.log_size()
    target = echo.endpoint
    with TunnelPeer(p.b.tunnel_port) as peer:
        peer.authenticate(fleet_key(), node=b"greedy")
        peer.send(b"".join(tf.open_frame(sid, target) for sid in (1, 3, 5, 7, 9)) + tf.ping(1))
        assert read_resets(peer, 1) == {9: tf.RESOURCE}, "the 5th open stream was not refused (or others were)"
        # One ends: there is room for one more, and only one.
        peer.send(tf.reset(1, tf.CANCEL) + tf.ping(2))
        read_resets(peer, 2)
        peer.send(tf.open_frame(11, target) + tf.open_frame(13, target) + tf.ping(3))
        assert read_resets(peer, 3) == {13: tf.RESOURCE}
    assert metrics(p.b)['rdmagw_streams_failed_total{reason="limit"}'] == 2
    assert p.b.wait_log(lambda l: "event=stream_refused" in l and "reason=limit" in l
                        and "limit=tunnel.limits.streams_per_session" in l, timeout=5, since=mark)
    payload = prng_bytes(10, 64 * KiB)
    assert echo_roundtrip(p.address("echo"), payload, timeout=10) == payload


def test_open_rate_per_session_is_capped(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint],
             b_tunnel={"limits": "{streams_per_session: 0, opens_per_second: 5}"})
    mark = p.b.log_size()
    with TunnelPeer(p.b.tunnel_port) as peer:
        peer.authenticate(fleet_key(), node=b"hasty")
        ids = list(range(1, 41, 2))  # 20 OPENs at once
        peer.send(b"".join(tf.open_frame(sid, echo.endpoint) for sid in ids) + tf.ping(1))
        resets = read_resets(peer, 1)
        print(f"20 OPENs at once, 5 per second allowed: {len(resets)} refused")
        assert set(resets.values()) == {tf.RESOURCE}
        assert 13 <= len(resets) <= 15, f"{len(resets)} of 20 OPENs refused (the burst is 5)"
        assert all(sid in resets for sid in ids[7:]), "OPENs past the burst were accepted"
        refused = len(resets)
        # A second later there are tokens again.
        time.sleep(1.1)
        peer.send(tf.open_frame(101, echo.endpoint) + tf.ping(2))
        assert read_resets(peer, 2) == {}
    assert metrics(p.b)['rdmagw_streams_failed_total{reason="limit"}'] == refused
    line = p.b.wait_log(lambda l: "event=stream_refused" in l and "limit=tunnel.limits.opens_per_second" in l,
                        timeout=5, since=mark)
    assert line and "per_second=5" in line
