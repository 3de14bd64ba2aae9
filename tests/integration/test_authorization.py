# SPDX-License-Identifier: Apache-2.0
"""Authorization by peer (docs/security.md): a `targets` entry may say which
peers may open it, by the address of their end of the session. A peer
outside gets RESET(not-allowed): its application sees a reset, host-b logs
why (at a bounded rate) and counts it, and the session carries on with what
the peer may open. A reload changes who may, without dropping a stream."""

from __future__ import annotations

import socket
import time

from admin_client import admin_request, parse_metrics
from backends import EchoServer
from clients import connect, echo_roundtrip, how_stream_ends


def restricted(text: str, target: str, peers: str) -> str:
    line = f'  - "{target}"\n'
    assert line in text
    return text.replace(line, f'  - {{target: "{target}", peers: [{peers}]}}\n', 1)


def test_a_target_open_to_some_peers_refuses_the_others_and_a_reload_opens_it(pair, backend):
    secret, public = backend(EchoServer()), backend(EchoServer())
    p = pair([{"name": "secret", "target": secret.endpoint}, {"name": "public", "target": public.endpoint}],
             [secret.endpoint, public.endpoint], start=False)
    good = p.b.config_path.read_text()
    # host-a's end of the session is 127.0.0.1: not among these.
    p.b.config_path.write_text(restricted(good, secret.endpoint, '"127.0.0.2", "10.0.0.0/8"'))
    p.b.start()
    p.a.start()

    # The refusal comes as soon as the stream opens, so its reset may beat
    # connect() returning: how_stream_ends counts that as the reset it is.
    assert how_stream_ends(p.address("secret"), b"let me in", timeout=10) == "reset"
    line = p.b.wait_log(lambda l: "event=stream_refused" in l and "reason=not-allowed" in l, 5)
    assert line and "target is not open to peers at 127.0.0.1" in line, line
    metrics = parse_metrics(admin_request(p.b.admin_port, "/metrics").text)
    assert metrics['rdmagw_streams_failed_total{reason="not-allowed"}'] >= 1
    assert secret.completed == 0 and secret.bytes_echoed == 0

    # The same session serves what this peer may open.
    assert echo_roundtrip(p.address("public"), b"hello", timeout=10) == b"hello"
    held = connect(p.address("public"), timeout=10)
    held.sendall(b"before")
    assert held.recv(6) == b"before"

    p.b.config_path.write_text(restricted(good, secret.endpoint, '"127.0.0.0/8"'))
    r = admin_request(p.b.admin_port, "/reload", "POST")
    assert r.status == 200, r.text
    assert echo_roundtrip(p.address("secret"), b"now", timeout=10) == b"now"
    held.sendall(b"after")
    deadline = time.monotonic() + 10
    got = b""
    while got != b"after" and time.monotonic() < deadline:
        got += held.recv(16)
    assert got == b"after", "a reload of targets dropped an open stream"
    held.shutdown(socket.SHUT_WR)
    held.close()
    assert "event=session_closed" not in p.a.log_text()


def test_no_stream_is_opened_to_rdmagws_own_admin_or_tunnel_port_even_if_targets_list_them(pair, backend):
    """host-b's targets list its own admin endpoint and tunnel port (a
    mistake, or a wildcard written too wide): a peer's OPEN for them is
    refused all the same (RESET not-allowed, logged with why), so no peer
    reaches rdmagw's admin API (POST /drain here) through the tunnel. A
    normal target of the same session still works."""
    echo = backend(EchoServer())
    admin_placeholder, tunnel_placeholder = "tcp:127.0.0.1:9", "tcp:127.0.0.1:7"
    p = pair([{"name": "admin", "target": admin_placeholder}, {"name": "tunnel", "target": tunnel_placeholder},
              {"name": "echo", "target": echo.endpoint}],
             [admin_placeholder, tunnel_placeholder, echo.endpoint], start=False)
    own = {"admin": f"tcp:127.0.0.1:{p.b.admin_port}", "tunnel": f"tcp:127.0.0.1:{p.b.tunnel_port}"}
    for sc in (p.a, p.b):
        text = sc.config_path.read_text()
        for placeholder, name in ((admin_placeholder, "admin"), (tunnel_placeholder, "tunnel")):
            assert f'"{placeholder}"' in text
            text = text.replace(f'"{placeholder}"', f'"{own[name]}"')
        sc.config_path.write_text(text)
    p.b.start()
    p.a.start()

    for name in ("admin", "tunnel"):
        since = p.b.log_size()
        assert how_stream_ends(p.address(name), b"POST /drain HTTP/1.0\r\n\r\n", timeout=10) == "reset", name
        line = p.b.wait_log(lambda l: "event=stream_refused" in l and own[name] in l, 5, since=since)
        assert line and "reason=not-allowed" in line, (name, line, p.b.tail())
        assert f'detail="{own[name]} is rdmagw\'s own admin or tunnel port on this host"' in line, line
    metrics = parse_metrics(admin_request(p.b.admin_port, "/metrics").text)
    assert metrics['rdmagw_streams_failed_total{reason="not-allowed"}'] >= 2
    stats = admin_request(p.b.admin_port, "/stats").json()
    assert stats["draining"] is False, "a POST /drain reached host-b's admin endpoint through the tunnel"
    assert "event=drain_requested" not in p.b.log_text()

    # The same session carries a normal target.
    assert echo_roundtrip(p.address("echo"), b"hello", timeout=10) == b"hello"
    assert "event=session_closed" not in p.a.log_text()
