"""Upgrades that drop no connection (issue 11): `rdmagw --takeover --config
FILE` started beside the running rdmagw takes over its listening sockets,
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
import time

import pytest

from clients import connect, free_port, recv_exact
from conftest import RDMAGW_BIN, Sidecar, tcp_only
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

    def take_over(self, name: str) -> str:
        old = self.current[name]
        self.n += 1
        new = Sidecar(f"{name}-{self.n}", old.config_path, self.tmp_path / f"{name}-{self.n}.log", self.binary)
        new.argv.append("--takeover")
        new.tunnel_port, new.admin_port = old.tunnel_port, old.admin_port
        self.procs.append(new)
        new.start(wait=True, timeout=20)
        code = old.wait(timeout=20)
        self.old.append(old)
        self.current[name] = new
        return f"{name}: old exited {code}"


@tcp_only
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


@tcp_only
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
