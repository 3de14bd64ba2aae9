# SPDX-License-Identifier: Apache-2.0
"""Upgrades that drop no connection (docs/operations.md, "Takeover"):
`rdmagw --takeover --config FILE` started beside the running rdmagw takes over its listening sockets,
its open connections and its sessions; the old process exits 0.

While STREAMS streams move SIZE bytes both ways (test_resume.py's
transfer), host-a, then host-b, then host-a again are taken over by new
processes. Every byte must arrive once and in order, no socket may see a
reset, and each old process must have exited 0 having handed everything
over. Then: connections made after a takeover are served by the new
process, and a takeover with no rdmagw running simply starts one.
"""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from backends import EchoServer
from clients import connect, free_port, recv_exact, require_root_and
from conftest import RDMAGW_BIN, Sidecar, tcp_only
from takeover_channel import REFUSED, StalledTakeover
from test_resume import HDR, RUN_S, Faults, Target, transfer_under_faults

TAKEOVERS = 3


class Upgrades:
    """Takes a pair's sidecars over, one after the other, with new processes
    on the same configuration (as an upgrade rolls them)."""

    def __init__(self, pair, procs, tmp_path, binary: str):
        self.current = {"host-a": pair.a, "host-b": pair.b}
        self.procs, self.tmp_path, self.binary = procs, tmp_path, binary
        self.old: list[Sidecar] = []
        self.n = 0

    def logs(self, name: str) -> str:
        """Every process's log for `name`, oldest first."""
        procs = [sc for sc in self.old if sc.name.split("-")[:2] == name.split("-")[:2]] + [self.current[name]]
        return "".join(sc.log_text() for sc in procs)

    def take_over(self, name: str) -> str:
        old = self.current[name]
        self.n += 1
        new = Sidecar(f"{name}-{self.n}", old.config_path, self.tmp_path / f"{name}-{self.n}.log", self.binary)
        new.argv = [a for a in old.argv if a != "--takeover"] + ["--takeover"]  # same namespace too
        new.tunnel_port, new.admin_port = old.tunnel_port, old.admin_port
        self.procs.append(new)
        new.start(wait=True, timeout=20)
        code = old.wait(timeout=20)
        self.old.append(old)
        self.current[name] = new
        return f"{name}: old exited {code}"


@pytest.mark.deadline(RUN_S + 90)
def test_takeovers_of_both_sides_mid_transfer_lose_nothing(pair, backend, procs, tmp_path):
    target = backend(Target())
    p = pair([{"name": "io", "target": target.endpoint}], [target.endpoint])
    up = Upgrades(p, procs, tmp_path, RDMAGW_BIN)
    order = ["host-a", "host-b", "host-a"]
    summary = transfer_under_faults(p.address("io"), target,
                                    Faults(lambda i: up.take_over(order[i]), TAKEOVERS, 1.0))
    assert len(up.old) == TAKEOVERS, f"{len(up.old)} takeovers happened during the transfer: {summary}"
    for old in up.old:
        assert old.returncodes()[-1] == 0, f"{old.name} exited {old.returncodes()}:\n{old.tail()}"
        log = old.log_text()
        assert "event=taken_over" in log, f"{old.name} did not hand over:\n{old.tail()}"
        assert "event=stream_reset" not in log, f"{old.name} reset streams:\n{old.tail()}"
    logs = "".join(sc.log_text() for sc in up.current.values())
    assert "event=stream_reset" not in logs
    assert logs.count("event=takeover_done") >= 1
    for sc in up.current.values():
        assert sc.running()


def test_after_a_takeover_new_connections_are_served_by_the_new_process(pair, backend, procs, tmp_path):
    target = backend(Target())
    p = pair([{"name": "io", "target": target.endpoint}], [target.endpoint])
    up = Upgrades(p, procs, tmp_path, RDMAGW_BIN)
    up.take_over("host-a")
    assert up.old[0].returncodes()[-1] == 0
    new = up.current["host-a"]
    # A stream through the new process: header, then the echo of a pattern.
    s = connect(p.address("io"), timeout=10)
    try:
        s.sendall(HDR.pack(7, 4) + b"ping")
        s.shutdown(socket.SHUT_WR)
        got = recv_exact(s, 4, time.monotonic() + 10)
        assert len(got) == 4
    finally:
        s.close()
    assert "event=ready" in new.log_text()
    assert "event=takeover_adopted" in new.log_text()


@tcp_only
def test_takeover_with_nothing_running_starts_afresh(sidecar, backend):
    target = backend(Target())
    sc = sidecar("host-b", tunnel_port=free_port(), admin_port=free_port(), targets=[target.endpoint])
    sc.argv.append("--takeover")
    sc.start()
    assert "event=takeover_none" in sc.log_text()
    assert sc.running()


# ---------------------------------------------------------------------------
# The channel from the side of a new process that does not finish


CLIENT = r"""
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(sys.argv[1].replace("@", "\0", 1))
try:
    s.sendall(struct.pack("<IIQI", 0x54574752, 1, 8, 0) + struct.pack("<II", 1, 0))
except BrokenPipeError:
    pass  # refused before it read our request: the answer is there to read
head = b""
while len(head) < 20:
    head += s.recv(20 - len(head))
magic, kind, size, fds = struct.unpack("<IIQI", head)
body = b""
while len(body) < size:
    body += s.recv(size - len(body))
print(kind, body.decode())
"""


def echo_once(address, data: bytes) -> None:
    """A new connection through the pair echoes `data`."""
    s = connect(address, timeout=10)
    try:
        s.sendall(data)
        assert recv_exact(s, len(data), time.monotonic() + 10) == data
    finally:
        s.close()


def takeover_address(tunnel_port: int) -> str:
    return f"@rdmagw-takeover/127.0.0.1:{tunnel_port}"


def pair_with_a_stream(pair, backend):
    """An echo pair, and a connection through it that has carried a message."""
    echo = backend(EchoServer())
    p = pair([{"name": "e", "target": echo.endpoint}], [echo.endpoint])
    s = connect(p.address("e"), timeout=10)
    s.sendall(b"before")
    assert recv_exact(s, 6, time.monotonic() + 10) == b"before"
    return p, s


@tcp_only
def test_a_takeover_that_never_finishes_leaves_the_running_process_serving(pair, backend):
    p, s = pair_with_a_stream(pair, backend)
    try:
        stalled = StalledTakeover(p.a.tunnel_port)
        assert stalled.take_image() > 0
        assert stalled.sockets >= 3  # listener, tunnel sockets, the connection
        stalled.vanish()
        assert p.a.wait_log("event=takeover_failed", 10), p.a.tail()
        # The open connection carries on (its session resumed with host-b),
        # and new ones are accepted again.
        s.sendall(b"after")
        assert recv_exact(s, 5, time.monotonic() + 10) == b"after"
    finally:
        s.close()
    echo_once(p.address("e"), b"new")
    assert p.a.running()
    assert "event=stream_reset" not in p.a.log_text() + p.b.log_text()


@tcp_only
def test_another_user_may_not_take_over(pair, backend):
    require_root_and(("setpriv",), "takeover by another user")
    echo = backend(EchoServer())
    p = pair([{"name": "e", "target": echo.endpoint}], [echo.endpoint])
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                        CLIENT, takeover_address(p.a.tunnel_port)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    kind, _, why = r.stdout.strip().partition(" ")
    assert int(kind) == REFUSED and "another user" in why, r.stdout
    assert p.a.wait_log("event=takeover_refused", 5)
    assert p.a.running()
    echo_once(p.address("e"), b"still")
