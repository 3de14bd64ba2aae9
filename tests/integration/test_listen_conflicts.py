# SPDX-License-Identifier: Apache-2.0
"""Addresses another process holds: rdmagw refuses to
start rather than share them, and leaves them as they were.

- A TCP port another process listens on, even with SO_REUSEPORT (which
  would let rdmagw's SO_REUSEPORT sockets join it and the kernel split the
  connections between the two), for a listener and for the tunnel.
- A Unix socket path a live process serves with a datagram socket (think
  /dev/log): a stream connect() to it fails, which once made rdmagw judge it
  stale and unlink it.
"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from clients import free_port
from conftest import check_sanitizers, render_config


def start_fails(rdmagw_bin, tmp_path, text: str) -> str:
    cfg = tmp_path / "conflict.yaml"
    cfg.write_text(text)
    r = subprocess.run([rdmagw_bin, "--config", str(cfg)], capture_output=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    check_sanitizers("rdmagw", out, r.returncode)
    assert r.returncode == 1, f"rdmagw started on an address another process holds (rc={r.returncode}):\n{out}"
    assert "event=listen_failed" in out, out
    return out


def reuseport_listener(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    return s


def test_a_listener_port_held_with_so_reuseport_is_refused_not_shared(rdmagw_bin, tmp_path):
    port = free_port()
    other = reuseport_listener(port)
    try:
        out = start_fails(rdmagw_bin, tmp_path, render_config(
            "host-a", tunnel_port=free_port(), admin_port=free_port(), transport="tcp",
            peers=[("host-b", free_port())],
            listeners=[{"name": "web", "listen": f"tcp:127.0.0.1:{port}", "peer": "host-b",
                        "target": "tcp:127.0.0.1:80"}]))
        assert "key=listeners[0].listen" in out and "Address already in use" in out, out
        # The other process still has its port, whole.
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn, _ = other.accept()
        conn.close()
        c.close()
    finally:
        other.close()


def test_a_tunnel_port_held_with_so_reuseport_is_refused_not_shared(rdmagw_bin, tmp_path):
    port = free_port()
    other = reuseport_listener(port)
    try:
        out = start_fails(rdmagw_bin, tmp_path, render_config(
            "host-a", tunnel_port=port, admin_port=free_port(), transport="tcp"))
        assert "key=tunnel.tcp_port" in out and "Address already in use" in out, out
    finally:
        other.close()


def test_a_second_rdmagw_on_the_same_ports_does_not_start(sidecar, rdmagw_bin, tmp_path):
    listen = free_port()
    kw = dict(tunnel_port=free_port(), admin_port=free_port(), transport="tcp",
              peers=[("host-b", free_port())],
              listeners=[{"name": "web", "listen": f"tcp:127.0.0.1:{listen}", "peer": "host-b",
                          "target": "tcp:127.0.0.1:80"}])
    first = sidecar("host-a", **kw)
    first.start()
    # Same listener and tunnel ports, another admin port: the listener is
    # what it fails on first.
    text = render_config("host-a", **dict(kw, admin_port=free_port()))
    start_fails(rdmagw_bin, tmp_path, text)
    assert first.running()


def test_a_live_datagram_unix_socket_is_not_taken_for_stale(rdmagw_bin, tmp_path, sock_dir):
    path = str(sock_dir / "log.sock")
    served = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    served.bind(path)
    served.settimeout(5)
    try:
        out = start_fails(rdmagw_bin, tmp_path, render_config(
            "host-a", tunnel_port=free_port(), admin_port=free_port(), transport="tcp",
            peers=[("host-b", free_port())],
            listeners=[{"name": "log", "listen": f"unix:{path}", "peer": "host-b",
                        "target": "tcp:127.0.0.1:80"}]))
        assert "is in use by another process" in out, out
        # Still there, still the same socket, still served.
        assert os.path.exists(path)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        client.sendto(b"still here", path)
        assert served.recv(64) == b"still here"
        client.close()
    finally:
        served.close()


def test_a_stale_unix_socket_is_still_replaced(sidecar, sock_dir):
    path = str(sock_dir / "stale.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)
    dead.close()  # the path stays, nobody serves it
    a = sidecar("host-a", tunnel_port=free_port(), admin_port=free_port(), transport="tcp",
                peers=[("host-b", free_port())],
                listeners=[{"name": "svc", "listen": f"unix:{path}", "peer": "host-b",
                            "target": "tcp:127.0.0.1:80"}])
    a.start()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(5)
    c.connect(path)  # rdmagw listens there now
    c.close()
