# SPDX-License-Identifier: Apache-2.0
"""rdmagw under a service manager (systemd's Type=notify): a real AF_UNIX
datagram socket bound where NOTIFY_SOCKET points, as systemd's is, and a real
rdmagw told about it. READY=1 only once its listener accepts; SIGHUP gives
RELOADING=1 then READY=1, whether the reload succeeds or not; SIGTERM gives
STOPPING=1 and exit 0; POST /drain is no stop; a takeover hands the main
pid to the new process. Without NOTIFY_SOCKET, or with one nobody listens
on, rdmagw runs as before (the latter logs one warning)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from admin_client import admin_json, admin_request
from clients import connect, free_port
from conftest import Sidecar, render_config

DATAGRAM_WAIT_S = 10.0


class Manager:
    """The receiving end of NOTIFY_SOCKET: a path or an abstract name."""

    def __init__(self, where: str):
        self.name = where
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + where[1:] if where.startswith("@") else where)
        self.received: list[dict[str, str]] = []

    def next(self, timeout: float = DATAGRAM_WAIT_S) -> dict[str, str]:
        """The next datagram as {KEY: VALUE}; fails after `timeout`."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            pytest.fail(f"no notification within {timeout} s; so far: {self.received}", pytrace=False)
        text = data.decode()
        assert text.endswith("\n"), f"datagram without its final newline: {text!r}"
        fields = dict(line.split("=", 1) for line in text.splitlines())
        self.received.append(fields)
        return fields

    def nothing_more(self, wait: float = 0.5) -> None:
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return
        pytest.fail(f"unexpected notification {data!r} after {self.received}", pytrace=False)

    def close(self):
        self.sock.close()


@pytest.fixture
def manager(sock_dir):
    made = []

    def make(where: str | None = None) -> Manager:
        m = Manager(where or str(sock_dir / "notify"))
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


class Host:
    """One rdmagw with a TCP listener (its peer is down: a listener accepts
    all the same) and its admin endpoint, started with `env` so that the
    environment is exactly what the test says (`env` execs: the pid is
    rdmagw's)."""

    def __init__(self, sidecar, notify: str | None, name: str = "host-a"):
        self.listen_port, self.admin_port, self.tunnel_port = free_port(), free_port(), free_port()
        self.config = render_config(
            name, tunnel_port=self.tunnel_port, admin_port=self.admin_port, peers=[("host-b", free_port())],
            listeners=[{"name": "app", "listen": f"tcp:127.0.0.1:{self.listen_port}", "peer": "host-b",
                        "target": "tcp:127.0.0.1:6379"}], auth=None, peer_connect="on_demand")
        self.sc: Sidecar = sidecar(name, self.config)
        env = ["env", "-u", "NOTIFY_SOCKET"] + ([f"NOTIFY_SOCKET={notify}"] if notify else [])
        self.sc.argv = env + self.sc.argv

    def accepts(self) -> bool:
        try:
            connect(("127.0.0.1", self.listen_port), timeout=1).close()
            return True
        except OSError:
            return False

    def stats(self):
        return admin_json(self.admin_port, "/stats")


def ready_without_waiting(sc: Sidecar) -> None:
    sc.start(wait=False)


@pytest.mark.parametrize("where", ["path", "abstract"])
def test_ready_after_the_listener_accepts_reload_and_stop(sidecar, manager, where):
    m = manager(None if where == "path" else f"@rdmagw-notify-it/{os.getpid()}")
    host = Host(sidecar, m.name)
    ready_without_waiting(host.sc)

    ready = m.next()
    # At the moment READY=1 arrives, the listener must already accept, and
    # rdmagw must already have said so in its own log.
    assert host.accepts(), "READY=1 came before the listener accepted connections"
    assert "event=ready" in host.sc.log_text(), "READY=1 came before event=ready"
    assert ready.get("READY") == "1", ready
    assert ready["STATUS"].startswith("Ready: 1 listeners"), ready
    assert admin_request(host.admin_port, "/ready").status == 200
    before = host.stats()["config"]["reloads"]

    # SIGHUP: RELOADING=1 stamped with CLOCK_MONOTONIC (time.monotonic()
    # reads the same clock), then READY=1 once the reload is done.
    t0 = time.monotonic()
    host.sc.send_signal(signal.SIGHUP)
    reloading = m.next()
    t1 = time.monotonic()
    assert reloading.get("RELOADING") == "1", reloading
    stamp_s = int(reloading["MONOTONIC_USEC"]) / 1e6
    assert t0 - 0.01 <= stamp_s <= t1 + 0.01, (t0, stamp_s, t1)
    done = m.next()
    assert done.get("READY") == "1" and "generation 2" in done["STATUS"], done
    assert host.stats()["config"]["reloads"] == before + 1
    assert host.stats()["config"]["generation"] == 2

    # A file that no longer parses: the reload fails, and still ends in
    # READY=1 (the running configuration serves on), saying it failed.
    Path(host.sc.config_path).write_text(host.config + "workers: [\n")
    host.sc.send_signal(signal.SIGHUP)
    assert m.next().get("RELOADING") == "1"
    failed = m.next()
    assert failed.get("READY") == "1" and "reload failed" in failed["STATUS"], failed
    assert host.stats()["config"]["reload_failures"] == 1
    assert host.accepts()

    host.sc.send_signal(signal.SIGTERM)
    stopping = m.next()
    assert stopping.get("STOPPING") == "1" and stopping["STATUS"].startswith("Draining"), stopping
    assert host.sc.wait(timeout=15) == 0
    m.nothing_more()
    assert "service_notify_failed" not in host.sc.log_text()


def test_admin_drain_is_no_stop(sidecar, manager):
    m = manager()
    host = Host(sidecar, m.name)
    ready_without_waiting(host.sc)
    assert m.next().get("READY") == "1"
    assert admin_request(host.admin_port, "/drain", "POST").status == 200
    drained = m.next()
    # systemd takes STOPPING=1 for a stop under way and would kill the
    # process when TimeoutStopSec runs out; a drain only changes the status.
    assert set(drained) == {"STATUS"} and drained["STATUS"].startswith("Draining (POST /drain)"), drained
    # A reload during a drain is refused before it starts: nothing announced.
    host.sc.send_signal(signal.SIGHUP)
    assert host.sc.wait_log("event=reload_failed", 10)
    m.nothing_more()
    host.sc.send_signal(signal.SIGTERM)
    assert m.next().get("STOPPING") == "1"
    assert host.sc.wait(timeout=15) == 0


def start_reload_stop(host) -> str:
    """Start, reload by SIGHUP, stop by SIGTERM (exit 0); the log."""
    host.sc.start()
    assert host.accepts()
    host.sc.send_signal(signal.SIGHUP)
    assert host.sc.wait_log("event=config_reloaded", 10), host.sc.tail()
    host.sc.send_signal(signal.SIGTERM)
    assert host.sc.wait(timeout=15) == 0
    return host.sc.log_text()


def test_without_notify_socket_nothing_changes(sidecar):
    assert "service_notify" not in start_reload_stop(Host(sidecar, None))


def test_a_notify_socket_nobody_listens_on_is_one_warning(sidecar, sock_dir):
    log = start_reload_stop(Host(sidecar, str(sock_dir / "nobody")))
    assert log.count("event=service_notify_failed") == 1, log
    assert " warn " in next(line for line in log.splitlines() if "service_notify_failed" in line)


def test_a_takeover_hands_the_main_pid_to_the_new_process(sidecar, manager, tmp_path, procs):
    m = manager()
    old = Host(sidecar, m.name)
    ready_without_waiting(old.sc)
    assert m.next().get("READY") == "1"

    # The new process has no NOTIFY_SOCKET (started by hand, or by an
    # ExecReload= that systemd gives none): only the old one speaks.
    new = Sidecar("host-a-new", old.sc.config_path, tmp_path / "host-a-new.log", old.sc.binary)
    new.argv = ["env", "-u", "NOTIFY_SOCKET"] + new.argv + ["--takeover"]
    procs.append(new)
    new.start(wait=True, timeout=20)
    handed = m.next()
    assert handed.get("MAINPID") == str(new.pid), (handed, new.pid)
    assert "takeover" in handed["STATUS"], handed
    assert old.sc.wait(timeout=20) == 0
    # The old one exits having handed over: no STOPPING=1 (the service goes on).
    m.nothing_more()
    assert old.accepts()  # the same port, served by the new process now
    assert "event=takeover_done" in new.log_text()
