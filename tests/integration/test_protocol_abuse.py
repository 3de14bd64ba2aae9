# SPDX-License-Identifier: Apache-2.0
"""A hostile or broken peer speaks the tunnel protocol (docs/protocol.md) by hand
to a real host-b.

Each test proves two things:
  (a) what happens to the hostile session: a malformed frame makes host-b close
      that TCP connection within seconds and log event=session_error /
      event=session_closed with a reason naming the problem; a refused OPEN is
      answered with RESET and the session stays up;
  (b) host-b itself is unharmed: a real stream through host-a -> host-b (echo
      backend) works before and after, and a stream that was open during the
      abuse keeps working.

The last test is a clean, complete exchange with the same framing code, so the
negative tests fail for the reason they claim and not because our frames are
wrong.
"""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

import tunnel_frames as tf
from backends import EchoServer, Sha256Server, StallServer, prng_bytes
from clients import connect, echo_roundtrip, free_port, recv_exact, send_all, wait_closed
from tunnel_frames import TunnelPeer
from conftest import tcp_only

pytestmark = tcp_only  # speaks the TCP transport's wire directly

MiB = 1 << 20


# ---------------------------------------------------------------------------
# The real pair, and the checks that host-b is unharmed


class Gateway:
    """A started pair (host-a listener "echo" -> host-b -> EchoServer) plus the
    targets host-b allows: the echo server, a StallServer that never reads, and
    a port nobody listens on."""

    def __init__(self, p, echo, stall, dead_target):
        self.p = p
        self.a = p.a
        self.b = p.b
        self.echo = echo
        self.stall = stall
        self.dead = dead_target
        self.live: socket.socket | None = None
        self._seed = 1000

    @property
    def tunnel_port(self) -> int:
        return self.b.tunnel_port

    def roundtrip(self, size: int = 64 * 1024) -> None:
        self._seed += 1
        payload = prng_bytes(self._seed, size)
        got = echo_roundtrip(self.p.address("echo"), payload, timeout=10)
        assert got == payload, "echo through host-a -> host-b returned different bytes"

    def before(self) -> None:
        """A fresh round trip, and a long-lived stream kept open across the abuse."""
        self.roundtrip()
        self.live = connect(self.p.address("echo"), timeout=10)
        self._live_exchange()

    def _live_exchange(self) -> None:
        self._seed += 1
        chunk = prng_bytes(self._seed, 32 * 1024)
        deadline = time.monotonic() + 10
        send_all(self.live, chunk, deadline)
        assert recv_exact(self.live, len(chunk), deadline) == chunk, "live stream corrupted"

    def after(self) -> None:
        """host-b still runs, the stream opened before still flows and half-closes
        cleanly, and new streams work."""
        assert self.b.running(), f"host-b died; log tail:\n{self.b.tail()}"
        assert self.a.running(), "host-a died"
        assert self.live is not None
        self._live_exchange()
        self.live.shutdown(socket.SHUT_WR)
        how, _, extra = wait_closed(self.live, timeout=5)
        assert (how, extra) == ("eof", 0), f"live stream ended with {how} (+{extra} bytes)"
        self.live.close()
        self.live = None
        self.roundtrip()
        assert self.b.running()

    def b_metrics(self) -> dict:
        from admin_client import admin_request, parse_metrics
        return parse_metrics(admin_request(self.b.admin_port, "/metrics").text)

    def close(self) -> None:
        if self.live is not None:
            self.live.close()


@pytest.fixture
def gw(pair, backend):
    echo = backend(EchoServer())
    stall = backend(StallServer(io_timeout=30))
    dead = f"tcp:127.0.0.1:{free_port()}"  # on the allowlist, nobody listens
    # No tunnel.auth (loopback): the hostile peer's frames reach the session
    # parser. What an unauthenticated peer gets with auth on: test_auth.py.
    p = pair([{"name": "echo", "target": echo.endpoint}],
             [echo.endpoint, stall.endpoint, dead], a_auth=None, b_auth=None)
    g = Gateway(p, echo, stall, dead)
    g.before()
    yield g
    g.close()
    stall.release()


# ---------------------------------------------------------------------------
# Outcome checks for the hostile session


def drain_until_closed(peer: TunnelPeer, timeout: float = 5.0, max_bytes: int = 64 * MiB):
    """Reads frames until host-b closes the connection (EOF or RST). Returns
    (how, [frame types received]). Fails if it stays open past `timeout`."""
    deadline = time.monotonic() + timeout
    types = []
    for _ in range(1 << 20):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            ftype, _fl, _res, _sid, _payload = peer.read_frame(left)
        except tf.PeerClosed as e:
            return ("eof" if "EOF" in str(e) else "reset"), types
        except TimeoutError:
            break
        except OSError as e:  # ECONNRESET surfacing as a plain OSError
            return f"reset ({e})", types
        types.append(ftype)
        assert len(types) * tf.HEADER_SIZE <= max_bytes, "host-b keeps sending"
    raise AssertionError(f"host-b kept the hostile connection open for {timeout}s "
                         f"(frames received: {[tf.TYPE_NAMES.get(t, t) for t in types]})")


def session_log_line(b, since: int, needle: str, timeout: float = 5.0) -> str:
    """The event=session_error / event=session_closed line whose text contains `needle`."""
    line = b.wait_log(
        lambda l: ("event=session_error" in l or "event=session_closed" in l) and needle in l,
        timeout=timeout, since=since)
    assert line, (f"host-b logged no event=session_error/session_closed mentioning {needle!r}; "
                  f"log since the attack:\n{b.log_text(since)[-4000:]}")
    return line


def assert_dropped_as_malformed(gw: Gateway, peer: TunnelPeer, mark: int, needle: str,
                                expect_hello: bool = True) -> str:
    how, types = drain_until_closed(peer, timeout=5)
    assert how.startswith(("eof", "reset"))
    if not expect_hello:
        assert tf.HELLO not in types, "host-b answered a rejected handshake with HELLO"
    line = session_log_line(gw.b, mark, needle)
    # A malformed frame is logged as such (docs/protocol.md).
    err = gw.b.wait_log(lambda l: "event=session_error" in l and "malformed frame" in l
                        and needle in l, timeout=5, since=mark)
    assert err, f"no event=session_error reason=\"malformed frame: ...{needle}...\"; got {line}"
    print(f"host-b closed the hostile session ({how}): {err}")
    return err


def send_ignoring_close(peer: TunnelPeer, data: bytes) -> None:
    """host-b may already have closed (it may act on the first bad frame before
    the rest arrives): that is not a failure of the send."""
    try:
        peer.send(data)
    except tf.PeerClosed:
        pass


def expect_frame(peer: TunnelPeer, ftype: int, stream_id: int, timeout: float = 5.0):
    f = peer.next_frame(timeout)
    assert (f[0], f[3]) == (ftype, stream_id), (
        f"expected {tf.TYPE_NAMES[ftype]} on stream {stream_id}, got "
        f"{tf.TYPE_NAMES.get(f[0], f[0])} on stream {f[3]} payload={f[4][:32]!r}")
    assert (f[1], f[2]) == (0, 0), f"flags/reserved set on {tf.TYPE_NAMES[ftype]}: {f[1]}/{f[2]}"
    return f[4]


def ping_pong(peer: TunnelPeer, opaque: int = 0x0123456789ABCDEF) -> None:
    peer.send(tf.ping(opaque))
    for _ in range(100):
        f = peer.next_frame(5, skip=(tf.PING, tf.WINDOW))
        if f[0] == tf.PONG and tf.u64(f[4]) == opaque:
            return
        assert f[0] == tf.PONG, f"unexpected {tf.TYPE_NAMES.get(f[0], f[0])} while awaiting PONG"
    raise AssertionError("no PONG echoing our PING")


def no_session_error_for(gw: Gateway, mark: int, peer: TunnelPeer) -> None:
    text = gw.b.log_text(mark)
    bad = [l for l in text.splitlines()
           if ("event=session_error" in l or "event=session_closed" in l)
           and ("peer=evil" in l or f":{peer.local_port}" in l)]
    assert not bad, f"host-b ended the session: {bad}"


# ---------------------------------------------------------------------------
# 1-9: malformed input ends that session only


def test_frame_before_hello_closes_session_as_malformed(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        send_ignoring_close(peer, tf.ping(42))
        assert_dropped_as_malformed(gw, peer, mark, "PING before HELLO", expect_hello=False)
    gw.after()


def test_hello_with_protocol_version_2_is_rejected_as_unsupported(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        send_ignoring_close(peer, tf.hello(version=2))
        assert_dropped_as_malformed(gw, peer, mark, "unsupported protocol version 2",
                                    expect_hello=False)
    gw.after()


def test_open_with_acceptor_parity_stream_id_closes_session_as_malformed(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.handshake()
        send_ignoring_close(peer, tf.open_frame(2, gw.echo.endpoint))
        assert_dropped_as_malformed(gw, peer, mark, "parity")
    gw.after()


def test_open_reusing_a_stream_id_closes_session_as_malformed(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.handshake()
        send_ignoring_close(peer, tf.open_frame(1, gw.echo.endpoint, b"first"))
        send_ignoring_close(peer, tf.open_frame(1, gw.echo.endpoint, b"again"))
        assert_dropped_as_malformed(gw, peer, mark, "reuses stream id 1")
    gw.after()


@pytest.mark.deadline(120)
def test_data_beyond_the_stream_window_closes_session_as_overrun(gw):
    """OPEN to a target that never reads, so host-b never returns credit beyond
    what the kernel buffers absorb, then DATA without waiting for WINDOW."""
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        h = peer.handshake()
        stream_window, max_data = h["stream_window"], h["max_data"]
        assert stream_window == 262144 and max_data == 32768, h  # the defaults
        peer.send(tf.open_frame(1, gw.stall.endpoint))
        assert gw.stall.connected.wait(5), "host-b did not connect the allowed stall target"
        batch = b"".join(tf.data(1, b"\xab" * max_data) for _ in range(16))  # 512 KiB of DATA
        sent, t0 = 0, time.monotonic()
        # Bounded: 64 MiB or 20 s. Kernel buffers towards the stalled target can
        # earn us a few MiB of WINDOW at most; then the window must run out.
        for _ in range(256):
            if time.monotonic() - t0 > 20:
                break
            try:
                peer.send(batch, timeout=5)
            except (tf.PeerClosed, TimeoutError):
                break
            sent += 16 * max_data
        assert sent > stream_window, f"only {sent} bytes of DATA went out"
        # We never read: the reads below see host-b's HELLO/WINDOWs, then the close.
        err = assert_dropped_as_malformed(gw, peer, mark, "overruns the window of stream 1")
        print(f"sent {sent} bytes of DATA against a {stream_window}-byte window: {err}")
    gw.after()


def test_data_on_a_stream_never_opened_closes_session_as_malformed(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.handshake()
        send_ignoring_close(peer, tf.data(99, b"x" * 100))
        assert_dropped_as_malformed(gw, peer, mark, "unknown stream 99")
    gw.after()


def test_session_window_update_beyond_announced_budget_closes_session(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.handshake()
        send_ignoring_close(peer, tf.window(0, 0xFFFFFFFF))
        assert_dropped_as_malformed(gw, peer, mark, "exceeds")
    gw.after()


def test_garbage_after_hello_closes_session_as_unknown_frame_type(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.handshake()
        send_ignoring_close(peer, b"\xff" * 64)
        assert_dropped_as_malformed(gw, peer, mark, "unknown frame type 255")
    gw.after()


# ---------------------------------------------------------------------------
# 8: a peer that floods PINGs and never reads (plus two variants that expose bugs)


def _flood_pings(gw: Gateway, peer: TunnelPeer, mark: int, max_frames: int, max_seconds: float,
                 stop_above_kib: int | None = None):
    """Sends PINGs in batches without reading. Stops at `max_frames`, after
    `max_seconds`, when a send blocks for 3 s, when host-b closes, when it logs
    "not reading", or (if given) when its VmRSS grew by more than
    `stop_above_kib`. Returns (frames sent, why it stopped, rss before, peak rss)."""
    rss0 = peak = gw.b.rss_kib()
    per_batch = 1000
    batch = b"".join(tf.ping(i) for i in range(per_batch))  # 20 KB
    frames, t0, how = 0, time.monotonic(), "frame bound"
    for i in range(max_frames // per_batch):
        if time.monotonic() - t0 > max_seconds:
            how = "time bound"
            break
        try:
            peer.send(batch, timeout=3)
        except tf.PeerClosed:
            how = "closed by host-b"
            break
        except TimeoutError:
            how = "send blocked 3s"
            break
        frames += per_batch
        if i % 50 == 0:
            peak = max(peak, gw.b.rss_kib())
            if stop_above_kib is not None and peak - rss0 > stop_above_kib:
                how = "memory bound"
                break
            if "not reading" in gw.b.log_text(mark):
                how = "cut off"
                break
    peak = max(peak, gw.b.rss_kib())
    print(f"sent {frames} PINGs in {time.monotonic() - t0:.1f}s, stopped by {how}; host-b "
          f"VmRSS {rss0} KiB -> peak {peak} KiB (+{(peak - rss0) / 1024:.1f} MiB)")
    return frames, how, rss0, peak


def _tcp_inode(local_port: int, remote_port: int) -> int | None:
    """Inode of the 127.0.0.1 TCP socket local_port <-> remote_port (/proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            cols = line.split()
            if (int(cols[1].split(":")[1], 16) == local_port
                    and int(cols[2].split(":")[1], 16) == remote_port):
                return int(cols[9])
    return None


def _process_holds_socket(pid: int, inode: int) -> bool:
    want = f"socket:[{inode}]"
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == want:
                return True
        except OSError:
            pass  # closed meanwhile
    return False


@pytest.mark.deadline(240)
def test_ping_flood_without_reading_is_cut_off_with_bounded_memory(gw):
    """Sends PINGs without ever reading the PONGs. host-b must not queue PONGs
    without limit: it ends the session ("not reading") or at least keeps its
    memory bounded and keeps serving."""
    mark = gw.b.log_size()
    peer = TunnelPeer(gw.tunnel_port, rcvbuf=4096)  # small: host-b's PONGs back up at once
    try:
        peer.handshake()
        _frames, _how, rss0, peak = _flood_pings(gw, peer, mark, max_frames=4_000_000,
                                                 max_seconds=45)
        grew_mib = (peak - rss0) / 1024
        assert gw.b.running(), "host-b died under a PING flood"
        assert grew_mib < 200, f"host-b grew by {grew_mib:.1f} MiB under a PING flood"

        line = gw.b.wait_log(
            lambda l: ("event=session_error" in l or "event=session_closed" in l)
            and "peer=evil" in l, timeout=10, since=mark)
        if line is not None:
            # host-b gave up on the session: it must say why, and the connection
            # must end once we finally read what it queued.
            assert "not reading" in line, f"session closed for another reason: {line}"
            t1 = time.monotonic()
            closed, _, drained = wait_closed(peer.sock, timeout=60, max_bytes=256 * MiB)
            print(f"{line}\nthen {closed} after draining {drained} bytes "
                  f"in {time.monotonic() - t1:.1f}s")
        else:
            # Still open: gw.after() below proves host-b still serves.
            print("host-b kept the flooding session open")
    finally:
        peer.close()
    assert gw.b.rss_kib() - rss0 < 200 * 1024
    gw.after()


@pytest.mark.deadline(180)
def test_peer_cut_off_for_not_reading_is_released_without_ever_reading(gw):
    mark = gw.b.log_size()
    peer = TunnelPeer(gw.tunnel_port, rcvbuf=4096)
    try:
        peer.handshake()
        inode = _tcp_inode(gw.tunnel_port, peer.local_port)
        assert inode and _process_holds_socket(gw.b.pid, inode), "cannot find host-b's socket"
        _flood_pings(gw, peer, mark, max_frames=4_000_000, max_seconds=45)
        line = gw.b.wait_log(lambda l: "event=session_closed" in l and "peer=evil" in l
                             and "not reading" in l, timeout=10, since=mark)
        assert line, "host-b did not cut off the non-reading peer"
        # From here on we never read. host-b has given up on the session: it
        # must also give up the connection (close or abort it) within a bound.
        t0 = time.monotonic()
        held = True
        for _ in range(200):
            held = _process_holds_socket(gw.b.pid, inode)
            if not held or time.monotonic() - t0 > 20:
                break
            time.sleep(0.1)
        print(f"{line}\nhost-b {'still holds' if held else 'released'} the connection "
              f"{time.monotonic() - t0:.1f}s later; VmRSS {gw.b.rss_kib()} KiB")
        assert not held, ("host-b still holds the connection of a session it closed for "
                          "'not reading' 20 s later (queued frames pinned until the peer reads)")
    finally:
        peer.close()
    gw.after()


@pytest.mark.deadline(240)
def test_ping_flood_with_huge_announced_session_window_keeps_memory_bounded(gw):
    """The control backlog a non-reading peer may cause is bounded by the
    session window *the peer announced* plus 4 MiB. A HELLO may announce up to
    4 GiB (decode_hello accepts session_window <= 2^32), so the cut-off must not
    rely on the peer's own number."""
    mark = gw.b.log_size()
    peer = TunnelPeer(gw.tunnel_port, rcvbuf=4096)
    try:
        peer.handshake(session_window=1 << 32)
        frames, how, rss0, peak = _flood_pings(gw, peer, mark, max_frames=20_000_000,
                                               max_seconds=90, stop_above_kib=256 * 1024)
        line = gw.b.wait_log(lambda l: ("event=session_error" in l or "event=session_closed" in l)
                             and "peer=evil" in l, timeout=2, since=mark)
        print(f"session end: {line}")
    finally:
        peer.close()
    gw.after()  # whatever happened to the flooder, host-b still serves
    grew_mib = (peak - rss0) / 1024
    assert grew_mib < 200, (f"host-b grew by {grew_mib:.1f} MiB of queued PONGs for one peer "
                            f"that announced a 4 GiB session window ({frames} PINGs, stopped by {how})")


# ---------------------------------------------------------------------------
# 10-11: refused OPENs are answered with RESET, the session survives


def test_open_to_target_not_on_allowlist_is_reset_not_allowed_and_session_survives(gw):
    forbidden = f"tcp:127.0.0.1:{free_port()}"
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.handshake()
        peer.send(tf.open_frame(1, forbidden, b"knock knock"))
        code = tf.u32(expect_frame(peer, tf.RESET, 1))
        assert code == tf.NOT_ALLOWED, f"RESET code {code}, expected 3 (not-allowed)"
        ping_pong(peer)
        # The session is fully usable: a next stream to an allowed target works.
        peer.send(tf.open_frame(3, gw.echo.endpoint, b"still here"))
        assert expect_frame(peer, tf.DATA, 3) == b"still here"
        assert gw.b.wait_log(lambda l: "event=stream_refused" in l and "reason=not-allowed" in l
                             and "peer=evil" in l, timeout=5, since=mark)
        no_session_error_for(gw, mark, peer)
    gw.after()


def test_a_flood_of_refused_opens_is_answered_in_full_but_logged_at_a_bounded_rate(gw):
    """Each refused OPEN is answered and counted; the log gets a few lines a
    second, and the next line written says how many were left out (one
    session once turned 6 MB of frames into 34 MB of log)."""
    forbidden = f"tcp:127.0.0.1:{free_port()}"
    mark = gw.b.log_size()
    n = 2000
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.handshake()
        peer.send(b"".join(tf.open_frame(1 + 2 * i, forbidden) for i in range(n)))
        for i in range(n):
            assert tf.u32(expect_frame(peer, tf.RESET, 1 + 2 * i)) == tf.NOT_ALLOWED
        lines = gw.b.log_text(mark).count("event=stream_refused")
        assert 1 <= lines <= 40, f"{lines} log lines for {n} refused OPENs"
        time.sleep(1.2)  # the limit refills
        peer.send(tf.open_frame(1 + 2 * n, forbidden))
        assert tf.u32(expect_frame(peer, tf.RESET, 1 + 2 * n)) == tf.NOT_ALLOWED
        line = gw.b.wait_log(lambda l: "event=stream_refused" in l and "suppressed=" in l, timeout=5, since=mark)
        assert line, gw.b.log_text(mark)[-2000:]
        suppressed = int(line.split("suppressed=")[1].split()[0])
        assert suppressed + lines == n, (suppressed, lines)
    metrics = gw.b_metrics()
    assert metrics.get('rdmagw_streams_failed_total{reason="not-allowed"}', 0) >= n + 1
    gw.after()


def test_open_to_allowed_target_that_refuses_is_reset_refused_and_session_survives(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.handshake()
        peer.send(tf.open_frame(1, gw.dead))
        code = tf.u32(expect_frame(peer, tf.RESET, 1))
        assert code in (tf.REFUSED, tf.CONNECT_FAILED), \
            f"RESET code {code}, expected 1 (refused) or 2 (connect-failed)"
        ping_pong(peer)
        no_session_error_for(gw, mark, peer)
    gw.after()


# ---------------------------------------------------------------------------
# 12: the framing itself is right


def echoed_hello_then_fin(peer: TunnelPeer) -> None:
    """Stream 1, opened with b"hello" towards the echo target: the echo comes
    back as DATA, and our FIN is answered with the target's."""
    got = bytearray()
    for _ in range(10):
        got += expect_frame(peer, tf.DATA, 1)
        if len(got) >= 5:
            break
    assert bytes(got) == b"hello"
    peer.send(tf.fin(1))
    assert expect_frame(peer, tf.FIN, 1) == b""


def test_clean_stream_with_0rtt_bytes_echo_and_half_close_over_raw_frames(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        h = peer.handshake()
        assert h["version"] == 1 and h["node"] == "host-b", h
        peer.send(tf.open_frame(1, gw.echo.endpoint, b"hello"))
        echoed_hello_then_fin(peer)
        # The session is still healthy, and nothing reset the stream.
        ping_pong(peer)
        no_session_error_for(gw, mark, peer)
        assert not any("event=stream_reset" in l or "event=stream_refused" in l
                       for l in gw.b.log_text(mark).splitlines()), gw.b.log_text(mark)
    gw.after()


def test_an_origin_from_a_peer_that_offers_origins_reaches_the_access_line(gw):
    """Both HELLOs carry capability 64: the OPEN names the connection and the
    client it came from, and host-b's access line shows both (what the peer
    says: shown, never used to decide)."""
    mark = gw.b.log_size()
    connection = bytes(range(0xa0, 0xb0))
    origin = connection + tf.origin_address("192.0.2.7", 40512) + tf.origin_address("10.96.0.10", 6379)
    with TunnelPeer(gw.tunnel_port) as peer:
        h = peer.handshake(capabilities=tf.CAP_ORIGIN)
        assert h["capabilities"] & tf.CAP_ORIGIN, h
        peer.send(tf.open_frame(1, gw.echo.endpoint, b"hello", origin))
        echoed_hello_then_fin(peer)
        line = gw.b.wait_log(lambda l: "event=access" in l, timeout=5, since=mark)
        assert line, gw.b.log_text(mark)
        assert f"connection={connection.hex()}" in line and "client=192.0.2.7:40512" in line, line
        assert "destination=10.96.0.10:6379" in line and "remote=" in line, line
        no_session_error_for(gw, mark, peer)
    gw.after()


def test_an_open_whose_origin_is_malformed_closes_the_session_as_malformed(gw):
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.handshake(capabilities=tf.CAP_ORIGIN)
        bad = bytes(16) + b"\x05" + tf.origin_address()  # a client of family 5
        send_ignoring_close(peer, tf.open_frame(1, gw.echo.endpoint, b"x", bad))
        assert_dropped_as_malformed(gw, peer, mark, "OPEN origin client of family 5")
    gw.after()


def test_a_hello_whose_node_name_is_not_a_node_name_is_refused_and_logged_escaped(gw):
    """A node name is the peer's choice: ESC, CR, BEL or a newline in it
    would act on the terminal of whoever reads the log, /peers or rdmagwctl,
    or forge a log line. Such a HELLO is refused, saying which byte; the
    name itself reaches no log raw."""
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.send(tf.hello(node=b"evil\x1b[2J\r\x07\nforged event=ok"))
        with pytest.raises((tf.PeerClosed, OSError)):
            for _ in range(10):
                peer.read_frame(5)
    line = gw.b.wait_log("HELLO node name is not a node name", 5, since=mark)
    assert line and "byte 5 is 0x1b" in line, gw.b.tail()
    log = gw.b.log_text(mark)
    for raw in ("\x1b", "\r", "\x07"):
        assert raw not in log, f"a raw {raw!r} reached the log:\n{log[-3000:]}"
    assert "forged" not in log
    gw.after()


def test_control_bytes_in_a_target_reach_the_log_escaped(gw):
    """A target is the peer's choice too: ESC or BEL in it reach the log
    escaped."""
    mark = gw.b.log_size()
    with TunnelPeer(gw.tunnel_port) as peer:
        peer.send(tf.hello(node=b"peer"))
        peer.send(tf.open_frame(1, "tcp:192.0.2.1:1\x1b]0;pwned\x07"))
        expect_frame(peer, tf.HELLO, 0)
        expect_frame(peer, tf.RESET, 1)
    log = gw.b.log_text(mark)
    assert "stream=1" in log and "\\x1b]0;pwned\\x07" in log, log[-3000:]
    for raw in ("\x1b", "\x07"):
        assert raw not in log, f"a raw {raw!r} reached the log:\n{log[-3000:]}"
    gw.after()


# ---------------------------------------------------------------------------
# A resumable peer that grants credit but never acknowledges


@pytest.mark.deadline(120)
def test_a_peer_that_never_acknowledges_cannot_make_host_b_keep_more_than_its_window(gw, backend):
    """A resumable session keeps what it sent until the peer's ACK. A peer
    that returns WINDOW credit for everything but never sends ACK made host-b
    keep every byte of a bulk stream (80+ MiB of buffers for 64 MiB sent).
    What it keeps is bounded by the session window: the stream stalls, the
    buffers stay near the window, and host-b serves everyone else."""
    window = 1 * MiB
    source = backend(Sha256Server(send_size=256 * MiB, mode="duplex", io_timeout=60))
    # host-b allows only what the fixture listed: reload with the source added.
    text = gw.b.config_path.read_text()
    assert f'  - "{gw.echo.endpoint}"\n' in text
    gw.b.config_path.write_text(text.replace(f'  - "{gw.echo.endpoint}"\n',
                                             f'  - "{gw.echo.endpoint}"\n  - "{source.endpoint}"\n', 1))
    from admin_client import admin_json, admin_request
    assert admin_request(gw.b.admin_port, "/reload", "POST").status == 200
    def buffers_in_use() -> int:
        return sum(w["buffer_bytes_in_use"] for w in admin_json(gw.b.admin_port, "/stats")["per_worker"])

    before = buffers_in_use()  # the receive rings' buffers, and the live stream's
    peer = TunnelPeer(gw.tunnel_port)
    received, peak = 0, 0
    try:
        peer.send(tf.hello(capabilities=tf.CAP_RESUME, max_data=32768, stream_window=256 * 1024,
                           session_window=window) + tf.session_frame(0x1111, 0x2222))
        assert peer.read_frame()[0] == tf.HELLO
        assert peer.read_frame()[0] == tf.SESSION
        peer.send(tf.open_frame(1, source.endpoint))
        deadline = time.monotonic() + 20
        last_data = time.monotonic()
        while time.monotonic() < deadline and received < 64 * MiB:
            try:
                f = peer.read_frame(0.5)
            except TimeoutError:
                f = None
            if f and f[0] == tf.DATA:
                received += len(f[4])
                last_data = time.monotonic()
                peer.send(tf.window(1, len(f[4])) + tf.window(0, len(f[4])))  # credit, never ACK
            elif f and f[0] == tf.PING:
                peer.send(tf.pong(tf.u64(f[4])))
            peak = max(peak, buffers_in_use() - before)
            if time.monotonic() - last_data > 3:
                break  # host-b stopped sending: what it keeps is full
    finally:
        peer.close()
    print(f"received {received} bytes unacknowledged; host-b's buffers in use peaked at {peak} bytes above the {before} before")
    assert received <= window + 3 * MiB, f"host-b sent {received} bytes past a {window}-byte window without an ACK"
    # Kept: the window plus at most 4 MiB of frames; buffers hold a frame each
    # (a DATA frame smaller than its buffer wastes the rest), and the stream
    # parks what it read while it waits.
    assert peak < 2 * (window + 4 * MiB), f"host-b held {peak} bytes of buffers for a peer that never acknowledges"
    gw.after()


# ---------------------------------------------------------------------------
# A new session that claims a live session's token


def _resumable(port: int, token: tuple[int, int], kind: int = tf.SESSION_NEW, received: int = 0):
    """A raw resumable dialer: HELLO, then SESSION; returns
    (peer, the acceptor's SESSION kind), or (peer, None) if it closed."""
    peer = TunnelPeer(port)
    try:
        peer.send(tf.hello(capabilities=tf.CAP_RESUME))
        assert peer.read_frame()[0] == tf.HELLO
        # As rdmagw's dialer does: SESSION once the acceptor's HELLO is in.
        peer.send(tf.session_frame(*token, kind=kind, received=received))
        f = peer.read_frame()
    except tf.PeerClosed:
        return peer, None
    assert f[0] == tf.SESSION
    return peer, struct.unpack("<QQIQ", f[4])[2]


def test_a_new_session_cannot_take_a_live_sessions_token(gw):
    """Tokens name resumable sessions. A second SESSION(new) with the token
    of a live one used to replace it in the worker's table, so the real
    peer's resume landed in the impostor's session. It is refused; the real
    session resumes with its stream intact."""
    token = (0x5eed_0000_0000_0001, 0x00c0_ffee)
    mark = gw.b.log_size()
    first, kind = _resumable(gw.tunnel_port, token)
    assert kind == tf.SESSION_ACCEPTED
    first.send(tf.open_frame(1, gw.echo.endpoint, b"mine"))
    received = 0  # session frame bytes taken in, for the resume
    got = b""
    while got != b"mine":
        f = first.next_frame(5, skip=())
        received += tf.HEADER_SIZE + len(f[4])
        if f[0] == tf.DATA:
            got += f[4]
    impostor, kind = _resumable(gw.tunnel_port, token)
    assert kind is None, "host-b accepted a second session under a live session's token"
    impostor.close()
    assert session_log_line(gw.b, mark, "names the token of a session held here")

    first.close()  # the real peer's transport fails; it resumes on a new one
    again, kind = _resumable(gw.tunnel_port, token, kind=tf.SESSION_RESUME, received=received)
    try:
        assert kind == tf.SESSION_RESUMED
        again.send(tf.data(1, b"still mine"))
        got = b""
        for _ in range(100):
            f = again.next_frame(5, skip=(tf.PING, tf.WINDOW, tf.ACK))
            assert f[0] == tf.DATA and f[3] == 1, f
            got += f[4]
            if got == b"still mine":
                break
        assert got == b"still mine"
    finally:
        again.close()
    gw.after()


def test_sessions_per_address_bound_what_one_address_may_hold(sidecar, backend):
    """A peer that opens resumable sessions and drops them leaves them
    suspended, each holding what it kept for a resend until
    resume_timeout_ms: tunnel.limits.sessions_per_address bounds how many one
    address holds with a worker. A new session past it ends that address's
    first suspended one; with none suspended, the new one is refused."""
    from admin_client import admin_request, parse_metrics
    from conftest import render_config
    echo = backend(EchoServer())
    port, admin = free_port(), free_port()
    b = sidecar("host-b", render_config("host-b", tunnel_port=port, admin_port=admin, targets=[echo.endpoint],
                                        workers=1, auth=None,
                                        tunnel_extra={"resume_timeout_ms": 30000,
                                                      "limits": "{sessions_per_address: 2}"}))
    b.start()
    first, kind = _resumable(port, (7, 1))
    second, kind2 = _resumable(port, (7, 2))
    assert kind == kind2 == tf.SESSION_ACCEPTED
    first.close()  # suspended, waiting for a resume that will not come
    assert b.wait_log(lambda l: "event=session_suspended" in l, 5)
    third, kind = _resumable(port, (7, 3))
    assert kind == tf.SESSION_ACCEPTED, "no room was made by closing the suspended session"
    line = b.wait_log(lambda l: "event=session_closed" in l and "end=limit" in l, 5)
    assert line and "sessions_per_address (2) reached by 127.0.0.1" in line, b.tail()
    fourth, kind = _resumable(port, (7, 4))
    assert kind is None, "a session past the limit, with none suspended to close, was accepted"
    assert b.wait_log(lambda l: "event=session_refused" in l and "none of them is suspended" in l, 5)
    # The sessions that stayed are whole: the second one still carries a stream.
    second.send(tf.open_frame(1, echo.endpoint, b"still here"))
    got = b""
    for _ in range(20):
        f = second.next_frame(5, skip=(tf.PING, tf.WINDOW, tf.ACK))
        if f[0] == tf.DATA:
            got += f[4]
        if got == b"still here":
            break
    assert got == b"still here"
    metrics = parse_metrics(admin_request(admin, "/metrics").text)
    assert metrics['rdmagw_tunnel_address_session_limit_total{action="closed_suspended"}'] == 1
    assert metrics['rdmagw_tunnel_address_session_limit_total{action="refused"}'] == 1
    for p in (second, third, fourth):
        p.close()
