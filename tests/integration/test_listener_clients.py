# SPDX-License-Identifier: Apache-2.0
"""listeners[].clients (docs/configuration.md): a TCP listener on an address
other than loopback is reachable from other hosts, and whoever connects
uses the tunnel as the host's own applications do. So it must say who may
connect (the config parser refuses one without `clients`), and a
connection from anywhere else is reset at accept, logged
(event=client_refused) and counted (rdmagw_streams_failed_total
{reason="rejected"}); a reload changes the list for new connections.

Two hosts as network namespaces on one veth link (netns_hosts.two_hosts):
A (10.231.0.1) runs host-a and host-b (their tunnel on A's loopback) and
the echo target (a Unix socket); host-a's listener is on 10.231.0.1.
Clients run in A or B (10.231.0.2) through fleet_client.py, which drives
each socket from one thread and reads a reset as a reset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from admin_client import parse_metrics
from backends import EchoServer
from clients import free_port, require_root_and, wait_for
from conftest import RDMAGW_BIN
from netns_hosts import run, two_hosts

A_IP, B_IP = "10.231.0.1", "10.231.0.2"
CLIENT = str(Path(__file__).with_name("fleet_client.py"))


@pytest.fixture
def hosts():
    require_root_and(("ip", "curl"), "listener clients test")
    with two_hosts(A_IP, B_IP, 24) as h:
        yield h


def connect_from(ns: str, address: str, count: int = 3, size: int = 4000) -> list[str]:
    """How `count` connections from namespace `ns` to `address` (IP:PORT)
    end: "ok" (the whole echo), "reset", "short" (an EOF)..."""
    r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, CLIENT, "run", f"{address}:{count}:{size}"],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    return [c["end"] for c in json.loads(r.stdout)]


# Connects to argv[1]:argv[2] and waits (5 s at most) for the first byte:
# prints how the connection ended, "reset" only for ECONNRESET. The reset
# may come before connect() has returned (rdmagw resets at accept): a reset
# too.
_PROBE = """
import errno, socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    print("eof" if s.recv(1) == b"" else "data")
except socket.timeout:
    print("open")
except OSError as e:
    print("reset" if e.errno == errno.ECONNRESET else errno.errorcode.get(e.errno, str(e.errno)))
"""


def probe_from(ns: str, address: str) -> str:
    """How one connection from namespace `ns` to `address` ends, sending
    nothing: "reset", "eof", "open" (still, after 5 s) or "data"."""
    host, port = address.rsplit(":", 1)
    r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", _PROBE, host, port],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def admin(ns: str, port: int, path: str, method: str = "GET") -> str:
    return run("ip", "netns", "exec", ns, "curl", "-sS", "--max-time", "5", "-X", method,
               f"http://127.0.0.1:{port}{path}").stdout


def with_clients(config: str, listen: str, clients: str) -> str:
    """host-a's config with `clients: [clients]` for the listener on `listen`."""
    line = f'    listen: "{listen}"\n'
    assert line in config, config
    return config.replace(line, line + f"    clients: [{clients}]\n", 1)


def test_a_listener_on_a_host_address_admits_only_its_clients(pair, backend, hosts, sock_dir):
    echo = backend(EchoServer(str(sock_dir / "echo.sock")))
    listen = f"tcp:{A_IP}:{free_port()}"
    address = listen[len("tcp:"):]
    p = pair([{"name": "app", "target": echo.endpoint, "listen": listen}], [echo.endpoint],
             hosts=(hosts.a, "127.0.0.1", hosts.a, "127.0.0.1"), start=False)
    without = p.a.config_path.read_text()

    # Without clients: refused by the parser, saying what to do.
    r = subprocess.run([RDMAGW_BIN, "--check", "--config", str(p.a.config_path)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    out = r.stdout + r.stderr
    assert f"listeners[0].listen: '{listen}' may be reached from other hosts" in out, out
    assert "clients: [CIDR, ...]" in out and "or listen on 127.0.0.1" in out, out

    p.a.config_path.write_text(with_clients(without, listen, f"{A_IP}/32"))
    p.b.start()
    p.a.start()

    # From host B: not among the clients, reset at accept.
    assert connect_from(hosts.b, address) == ["reset"] * 3
    assert probe_from(hosts.b, address) == "reset"
    line = p.a.wait_log("event=client_refused", 5)
    assert line and "listener=app" in line and f"client={B_IP}:" in line, p.a.tail()
    assert "reason=" in line, line
    metrics = parse_metrics(admin(hosts.a, p.a.admin_port, "/metrics"))
    assert metrics['rdmagw_streams_failed_total{reason="rejected"}'] == 4, metrics
    assert echo.completed == 0 and echo.bytes_echoed == 0

    # From host A, whose connection to its own 10.231.0.1 comes from that
    # address (not 127.0.0.1, which the list leaves out): carried.
    assert connect_from(hosts.a, address) == ["ok"] * 3
    wait_for(lambda: echo.completed == 3, 5, "3 echoes at the target")

    # A reload that adds B: new connections from B are carried.
    since = p.a.log_size()
    p.a.config_path.write_text(with_clients(without, listen, f"{A_IP}/32, {B_IP}/32"))
    answer = json.loads(admin(hosts.a, p.a.admin_port, "/reload", "POST"))
    assert answer["ok"], answer
    assert connect_from(hosts.b, address) == ["ok"] * 3
    wait_for(lambda: echo.completed == 6, 5, "3 more echoes at the target")
    assert "event=client_refused" not in p.a.log_text(since)
    metrics = parse_metrics(admin(hosts.a, p.a.admin_port, "/metrics"))
    assert metrics['rdmagw_streams_failed_total{reason="rejected"}'] == 4, metrics
