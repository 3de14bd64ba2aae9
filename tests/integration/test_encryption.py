# SPDX-License-Identifier: Apache-2.0
"""tunnel.auth.encrypt (docs/protocol.md, "Protected records"):
real sidecars talking through a relay that reads, and alters, what crosses
the wire between them.

- Without encryption the streams' bytes cross the wire as they are; with it,
  none of them does (nor the acceptor's HELLO), and the streams arrive
  byte-exact.
- A byte altered on the wire is caught (the record does not authenticate):
  the transport ends, the session resumes on a new one, and the stream still
  arrives byte-exact instead of silently corrupted.
- Both ends must agree: one that encrypts and one that does not never open
  a session.
- On the transport under test (RDMA in the lab), many concurrent streams
  arrive byte-exact over encrypted sessions.
"""

from __future__ import annotations

import hashlib
import socket
import threading

import pytest

from admin_client import admin_request, parse_metrics
from backends import EchoServer, prng_bytes
import concurrent.futures

from admin_client import admin_json
from clients import echo_roundtrip, wait_for
from conftest import TEST_TRANSPORT, scaled, tcp_only


MiB = 1 << 20
MARKER = b"PLAINTEXT-MARKER-7f3a9c"


class InspectingRelay:
    """Forwards each connection to 127.0.0.1:`to_port`, keeping the first
    `keep` bytes of each direction; `tamper_at`: flips one byte at that
    offset of the dialer-to-acceptor bytes of the first connection that
    carries that many (once)."""

    def __init__(self, to_port: int, keep: int = 8 * MiB, tamper_at: int | None = None):
        self.to_port = to_port
        self.keep = keep
        self.tamper_at = tamper_at
        self.tampered = False
        self.sent = bytearray()      # dialer -> acceptor, all connections
        self.received = bytearray()  # acceptor -> dialer
        self.connections = 0
        self._lock = threading.Lock()
        self._stop = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []

    def start(self):
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self):
        self._stop = True
        self._listener.close()

    def _accept(self):
        for _ in range(100000):
            if self._stop:
                return
            try:
                client, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            server = socket.create_connection(("127.0.0.1", self.to_port), timeout=5)
            with self._lock:
                self.connections += 1
            for src, dst, out, tamper in ((client, server, self.sent, True), (server, client, self.received, False)):
                t = threading.Thread(target=self._pump, args=(src, dst, out, tamper), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src, dst, out: bytearray, tamper: bool):
        offset = 0
        src.settimeout(60)
        try:
            for _ in range(10 ** 7):
                chunk = bytearray(src.recv(65536))
                if not chunk:
                    dst.shutdown(socket.SHUT_WR)
                    return
                if tamper and self.tamper_at is not None and offset <= self.tamper_at < offset + len(chunk):
                    with self._lock:
                        if not self.tampered:
                            chunk[self.tamper_at - offset] ^= 0x01
                            self.tampered = True
                offset += len(chunk)
                with self._lock:
                    if len(out) < self.keep:
                        out += chunk[:self.keep - len(out)]
                dst.sendall(chunk)
        except OSError:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass


def through_relay(pair, backend, auth: str, **relay_kw):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], start=False,
             a_transport="tcp", b_transport="tcp", a_auth=auth, b_auth=auth)
    relay = backend(InspectingRelay(p.b.tunnel_port, **relay_kw))
    text = p.a.config_path.read_text()
    needle = f"tcp_port: {p.b.tunnel_port}\n"
    assert text.count(needle) == 1, text
    p.a.config_path.write_text(text.replace(needle, f"tcp_port: {relay.port}\n"))
    p.b.start()
    p.a.start()
    return p, relay


def payload(seed: int, size: int) -> bytes:
    body = bytearray(prng_bytes(seed, size))
    for at in range(0, size - len(MARKER), 4096):
        body[at:at + len(MARKER)] = MARKER
    return bytes(body)


@tcp_only  # the relay reads the TCP transport's wire
@pytest.mark.parametrize("auth", ["psk", "psk+encrypt"])
def test_what_crosses_the_wire(pair, backend, auth):
    p, relay = through_relay(pair, backend, auth)
    data = payload(1, 2 * MiB)
    got = echo_roundtrip(p.address("echo"), data, timeout=30)
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
    seen = bytes(relay.sent) + bytes(relay.received)
    print(f"{auth}: {len(seen)} bytes crossed the relay, marker seen {seen.count(MARKER)} times")
    if auth == "psk":
        assert seen.count(MARKER) > 100, "the control run does not see the plaintext: the test proves nothing"
    else:
        assert MARKER not in seen, "plaintext crossed the wire of an encrypted tunnel"
        # The dialer's HELLO goes first, in clear (docs/protocol.md); the
        # acceptor's comes after the proofs, encrypted.
        assert b"host-b" not in seen, "the acceptor's HELLO crossed the wire in clear"


@tcp_only
def test_an_altered_byte_is_caught_and_the_stream_survives_byte_exact(pair, backend):
    p, relay = through_relay(pair, backend, "psk+encrypt", tamper_at=1 * MiB)
    data = payload(2, 4 * MiB)
    got = echo_roundtrip(p.address("echo"), data, timeout=60)
    assert relay.tampered, "the relay never got to the byte it was to alter"
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest(), "the stream arrived altered"
    line = p.b.wait_log(lambda l: "does not authenticate" in l, timeout=5)
    assert line, "host-b did not say the record failed to authenticate"
    assert relay.connections >= 2, "the session did not move to a new transport"
    m = parse_metrics(admin_request(p.a.admin_port, "/metrics").text)
    assert m.get('rdmagw_session_resumes_total{from="tcp",to="tcp"}', 0) >= 1, m
    # The relay altered a record: host-b ended the transport that carried it as unreadable.
    mb = parse_metrics(admin_request(p.b.admin_port, "/metrics").text)
    assert mb.get('rdmagw_transport_failures_total{transport="tcp",reason="protocol-error"}', 0) >= 1, mb
    print(f"caught: {line.strip()}")


def test_both_ends_must_agree(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], start=False,
             a_auth="psk+encrypt", b_auth="psk")
    p.b.start()
    p.a.start(wait=False)
    line = p.b.wait_log(lambda l: "event=auth_failed" in l, timeout=10)
    assert line and "the peer encrypts" in line, line
    wait_for(lambda: parse_metrics(admin_request(p.b.admin_port, "/metrics").text)
             .get('rdmagw_auth_failures_total{reason="mismatch"}', 0) >= 1, timeout=5, what="the failure counted")
    assert "event=session_open" not in p.b.log_text()


def test_many_streams_byte_exact_over_encrypted_sessions(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], a_auth="psk+encrypt",
             b_auth="psk+encrypt")
    streams, size = scaled(64, 8), scaled(4 * MiB, 256 * 1024)

    def one(i):
        data = payload(100 + i, size)
        got = echo_roundtrip(p.address("echo"), data, timeout=120)
        return hashlib.sha256(got).digest() == hashlib.sha256(data).digest()

    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(one, range(streams)))
    assert all(results), f"{results.count(False)} of {streams} streams arrived altered"
    sessions = [s for peer in admin_json(p.a.admin_port, "/peers")["peers"] for s in peer["sessions"]]
    assert sessions and all(s["transport"] == TEST_TRANSPORT for s in sessions), sessions
    print(f"{streams} streams x {size} bytes, encrypted, over {TEST_TRANSPORT}: byte-exact")

