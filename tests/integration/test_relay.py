# SPDX-License-Identifier: Apache-2.0
"""A host without the key between two fleet members (docs/security.md): a
member dials it (it is in peer_cidrs, or named as a peer), and it relays the
connection to another member, both ways, byte for byte, then speaks on its
own. Before proofs named the address dialed, the member it relayed to took
the first member's proof, opened a session, and answered the relay's own
OPEN with bytes from its target. Now that member refuses at the dialer's
first AUTH (it names the relay's address, not the member's), logs why, and
nothing reaches its targets, encrypted or not."""

from __future__ import annotations

import selectors
import socket
import threading
import time

import pytest

import tunnel_frames as tf
from backends import EchoServer
from certs import Authority, cert_auth
from clients import connect, free_port, wait_closed
from conftest import render_config, tcp_only

RELAY_ADDR = "127.0.0.2"  # loopback, but not the members' tunnel address


class KeylessRelay:
    """Forwards each connection it accepts on RELAY_ADDR to 127.0.0.1:`to_port`;
    `inject_after` seconds into each, it sends `inject` to the member as if
    it were the dialer (the attack), and keeps what the member sent back."""

    def __init__(self, to_port: int, inject: bytes, inject_after: float = 1.5):
        self.to_port, self.inject, self.inject_after = to_port, inject, inject_after
        self.listener = socket.create_server((RELAY_ADDR, 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.from_member = bytearray()
        self.connections = 0
        self.member_closed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                dialer, _ = self.listener.accept()
            except socket.timeout:
                continue
            self.connections += 1
            threading.Thread(target=self._relay, args=(dialer,), daemon=True).start()

    def _relay(self, dialer: socket.socket):
        member = socket.create_connection(("127.0.0.1", self.to_port), timeout=5)
        sel = selectors.DefaultSelector()
        sel.register(dialer, selectors.EVENT_READ, member)
        sel.register(member, selectors.EVENT_READ, dialer)
        started = time.monotonic()
        injected = False
        deadline = started + 20
        try:
            while time.monotonic() < deadline and not self.stop.is_set():
                if not injected and time.monotonic() - started > self.inject_after:
                    injected = True
                    try:
                        member.sendall(self.inject)
                    except OSError:
                        pass
                for key, _ in sel.select(0.1):
                    try:
                        data = key.fileobj.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        if key.fileobj is member:
                            self.member_closed += 1
                        return
                    if key.fileobj is member:
                        self.from_member += data
                    try:
                        key.data.sendall(data)
                    except OSError:
                        return
        finally:
            dialer.close()
            member.close()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.listener.close()


@tcp_only
@pytest.mark.parametrize("auth", ["psk", "psk+encrypt", "cert"])
def test_a_keyless_relay_between_two_members_gets_nothing(sidecar, backend, tmp_path, auth):
    echo = backend(EchoServer())
    b_port, b_admin = free_port(), free_port()
    a_auth = b_auth = auth
    if auth == "cert":
        ca = Authority(tmp_path / "pki")
        b_auth = cert_auth([ca.path], *ca.node("host-b", ["127.0.0.1"]))
        a_auth = cert_auth([ca.path], *ca.node("host-a", ["127.0.0.1"]))
    b = sidecar("host-b", render_config("host-b", tunnel_port=b_port, admin_port=b_admin, targets=[echo.endpoint],
                                        auth=b_auth))
    b.start()
    marker = b"RELAYED-OPEN-7c1e"
    relay = KeylessRelay(b_port, tf.open_frame(1001, echo.endpoint, marker))
    listen_port = free_port()
    # host-a takes the relay for a member (its address is where host-x lives).
    a = sidecar("host-a", render_config("host-a", tunnel_port=free_port(), admin_port=free_port(),
                                        peers=[("host-x", relay.port)], peer_address=RELAY_ADDR,
                                        listeners=[{"name": "x", "listen": f"tcp:127.0.0.1:{listen_port}",
                                                    "peer": "host-x", "target": echo.endpoint}],
                                        auth=a_auth))
    a.start()
    try:
        line = b.wait_log("event=auth_failed", 10)
        assert line and f"the peer dialed {RELAY_ADDR}, not this host's 127.0.0.1" in line, b.tail()
        # An application behind host-a gets a reset, never the member's target.
        s = connect(("127.0.0.1", listen_port), timeout=10)
        s.sendall(b"through the relay")
        how, _, _ = wait_closed(s, timeout=15)
        s.close()
        assert how == "reset", how
        time.sleep(relay.inject_after + 0.5)
    finally:
        relay.close()
    assert relay.connections >= 1 and relay.member_closed >= 1
    assert marker not in relay.from_member
    assert echo.completed == 0 and echo.bytes_echoed == 0, "the relay reached the member's target"
    assert "event=session_open" not in b.log_text()
    assert "event=session_open" not in a.log_text()
