# SPDX-License-Identifier: Apache-2.0
"""Hot reload (SIGHUP and POST /reload) of real sidecars: open streams go on
undisturbed, added listeners accept, removed ones refuse, and an invalid file
changes nothing."""

from __future__ import annotations

import os
import re
import signal
import socket
import time

import pytest

from admin_client import admin_json, admin_request, parse_metrics
from backends import EchoServer, prng_bytes
from clients import wait_for, RESET_ERRORS, connect, echo_roundtrip, free_port, recv_exact, send_all
from conftest import render_config, scaled

STREAMS = 100


class ReloadablePair:
    """host-b (allowlist) and host-a (listeners) whose configs the test rewrites.
    Ports stay fixed across reloads; only listeners, peers and targets change."""

    def __init__(self, sidecar, targets):
        self.b_port, self.a_port = free_port(), free_port()
        self.b_rdma, self.a_rdma = free_port(), free_port()
        self.b_admin, self.a_admin = free_port(), free_port()
        self.b = sidecar("host-b", self.b_config(targets))
        self.b.start()
        self.a = None
        self.sidecar = sidecar

    def a_config(self, listeners, peers=None, tunnel_extra=None) -> str:
        return render_config("host-a", tunnel_port=self.a_port, admin_port=self.a_admin, rdma_port=self.a_rdma,
                             peers=peers or [("host-b", self.b_port, self.b_rdma)], listeners=listeners,
                             tunnel_extra=tunnel_extra)

    def b_config(self, targets) -> str:
        return render_config("host-b", tunnel_port=self.b_port, admin_port=self.b_admin, rdma_port=self.b_rdma,
                             targets=targets)

    def start_a(self, listeners, config=None):
        self.a = self.sidecar("host-a", config or self.a_config(listeners))
        self.a.start()
        if config:
            return
        wait_for(lambda: admin_json(self.a_admin, "/stats")["peers"]
                 and sum(p.get("sessions_tcp", 0) + p.get("sessions_rdma", 0)
                         for p in admin_json(self.a_admin, "/stats")["peers"] if p["name"] == "host-b") >= 2,
                 what="host-a's sessions")


def listener(name: str, port: int, target: str, peer: str = "host-b") -> dict:
    return {"name": name, "listen": f"tcp:127.0.0.1:{port}", "peer": peer, "target": target}


def refused(port: int) -> bool:
    try:
        connect(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def exchange_on_all(socks, round_no: int, size: int):
    """Each stream echoes its own pattern; any reset or mix-up fails."""
    deadline = time.monotonic() + 60
    payloads = [prng_bytes(round_no * 1000 + i, size) for i in range(len(socks))]
    for s, data in zip(socks, payloads):
        send_all(s, data, deadline)
    for i, (s, data) in enumerate(zip(socks, payloads)):
        got = recv_exact(s, size, deadline)
        assert got == data, f"stream {i}: echo differs in round {round_no}"


@pytest.mark.deadline(180)
@pytest.mark.parametrize("trigger", ["sighup", "post"])
def test_reload_with_100_streams_in_flight_drops_none(sidecar, backend, trigger):
    echo = backend(EchoServer())
    pair = ReloadablePair(sidecar, [echo.endpoint])
    keep_port, removed_port, added_port = free_port(), free_port(), free_port()
    pair.start_a([listener("keep", keep_port, echo.endpoint), listener("old", removed_port, echo.endpoint)])

    half = STREAMS // 2
    socks = [connect(("127.0.0.1", keep_port), timeout=10) for _ in range(half)]
    socks += [connect(("127.0.0.1", removed_port), timeout=10) for _ in range(STREAMS - half)]
    size = scaled(4096, 512)
    try:
        exchange_on_all(socks, 1, size)
        before = admin_json(pair.a_admin, "/stats")
        assert sum(entry["active"] for entry in before["listeners"]) == STREAMS

        pair.a.config_path.write_text(pair.a_config(
            [listener("keep", keep_port, echo.endpoint), listener("new", added_port, echo.endpoint)]))
        since = pair.a.log_size()
        if trigger == "sighup":
            pair.a.send_signal(signal.SIGHUP)
            assert pair.a.wait_log("event=config_reloaded", 10, since=since), pair.a.tail()
        else:
            r = admin_request(pair.a_admin, "/reload", "POST")
            assert r.status == 200, r.text
            assert sorted(r.json()["changes"]) == ["listener new added", "listener old removed"]
            assert r.json()["generation"] == 2

        # Every stream, on the kept and on the removed listener, still echoes.
        exchange_on_all(socks, 2, size)
        assert echo_roundtrip(("127.0.0.1", added_port), b"new listener") == b"new listener"
        assert echo_roundtrip(("127.0.0.1", keep_port), b"kept listener") == b"kept listener"
        assert refused(removed_port), "a removed listener must refuse new connections"
        exchange_on_all(socks, 3, size)
    finally:
        for s in socks:
            s.close()
    stats = admin_json(pair.a_admin, "/stats")
    assert stats["config"]["generation"] == 2 and stats["config"]["reloads"] == 1
    assert stats["config"]["reload_failures"] == 0
    failed = {k: v for k, v in stats["streams"]["failed"].items() if v}
    assert failed == {}, f"streams failed across the reload: {failed}"
    log = pair.a.log_text()
    assert "event=stream_reset" not in log and "event=stream_failed" not in log, log[-3000:]


def test_invalid_reload_changes_nothing_and_says_where(sidecar, backend):
    echo = backend(EchoServer())
    pair = ReloadablePair(sidecar, [echo.endpoint])
    port = free_port()
    pair.start_a([listener("echo", port, echo.endpoint)])
    config_before = admin_json(pair.a_admin, "/config")
    good = pair.a.config_path.read_text()

    # Two errors: a listener naming an unknown peer, and a bad port.
    bad = good.replace("peer: host-b", "peer: nobody").replace(f"tcp:127.0.0.1:{port}", "tcp:127.0.0.1:99999")
    pair.a.config_path.write_text(bad)
    r = admin_request(pair.a_admin, "/reload", "POST")
    assert r.status == 400, r.text
    body = r.json()
    assert body["ok"] is False and len(body["errors"]) == 2, body
    for e in body["errors"]:
        assert re.match(r".+\.yaml:\d+:\d+: listeners\[0\]\.(peer|listen): ", e), e
    since = pair.a.log_size()
    pair.a.send_signal(signal.SIGHUP)
    assert pair.a.wait_log("event=reload_failed", 10, since=since)

    # Each error has a line of its own, written after event=reload_failed.
    def reload_errors() -> list[str]:
        return [line for line in pair.a.log_text(since).splitlines() if "event=reload_error" in line]

    wait_for(lambda: len(reload_errors()) >= 2, timeout=5, what="the failed reload's two event=reload_error lines")
    errors = reload_errors()
    assert len(errors) == 2 and all(re.search(r"\.yaml:\d+:\d+: ", line) for line in errors), errors

    # Nothing changed: same config, same generation, the listener still works.
    assert admin_json(pair.a_admin, "/config") == config_before
    stats = admin_json(pair.a_admin, "/stats")
    assert stats["config"]["generation"] == 1 and stats["config"]["reload_failures"] == 2
    assert stats["config"]["last_reload"]["ok"] is False
    metrics = parse_metrics(admin_request(pair.a_admin, "/metrics").text)
    assert metrics["rdmagw_config_reload_failures_total"] == 2
    assert metrics["rdmagw_config_reloads_total"] == 0
    assert echo_roundtrip(("127.0.0.1", port), b"still here") == b"still here"

    # A setting only a restart can change is refused the same way, by name.
    pair.a.config_path.write_text(good.replace(f"tcp_port: {pair.a_port}", f"tcp_port: {free_port()}", 1))
    r = admin_request(pair.a_admin, "/reload", "POST")
    assert r.status == 400 and "tunnel.tcp_port" in r.text and "restart" in r.text, r.text
    assert admin_json(pair.a_admin, "/config") == config_before


def test_reload_swaps_peer_and_allowlist_while_streams_continue(sidecar, backend):
    echo = backend(EchoServer())
    other = backend(EchoServer())
    pair = ReloadablePair(sidecar, [echo.endpoint])
    old_port, new_port = free_port(), free_port()
    pair.start_a([listener("old", old_port, echo.endpoint)])
    sock = connect(("127.0.0.1", old_port), timeout=10)
    try:
        exchange_on_all([sock], 1, 1000)
        # host-a: peer host-b is replaced by host-b2 (same sidecar, new name),
        # the old listener goes with it.
        pair.a.config_path.write_text(pair.a_config(
            [listener("new", new_port, other.endpoint, peer="host-b2")],
            peers=[("host-b2", pair.b_port, pair.b_rdma)]))
        r = admin_request(pair.a_admin, "/reload", "POST")
        assert r.status == 200, r.text
        assert sorted(r.json()["changes"]) == ["listener new added", "listener old removed",
                                               "peer host-b removed", "peer host-b2 added"]
        # The stream on the removed peer's session goes on.
        exchange_on_all([sock], 2, 1000)
        peers = {p["name"]: p for p in admin_json(pair.a_admin, "/peers")["peers"]}
        assert peers["host-b"]["state"] == "removed" and peers["host-b"]["configured"] is False
        # host-b's allowlist does not hold `other` yet: refused, by name.
        with pytest.raises(RESET_ERRORS):
            echo_roundtrip(("127.0.0.1", new_port), b"x", timeout=5)
        pair.b.config_path.write_text(pair.b_config([echo.endpoint, other.endpoint]))
        r = admin_request(pair.b_admin, "/reload", "POST")
        assert r.status == 200 and r.json()["changes"] == ["targets: 1 added, 0 removed"], r.text
        assert echo_roundtrip(("127.0.0.1", new_port), b"allowed now") == b"allowed now"
        # Dropping `echo` from host-b's allowlist refuses new streams to it
        # but leaves the open one alone.
        pair.b.config_path.write_text(pair.b_config([other.endpoint]))
        assert admin_request(pair.b_admin, "/reload", "POST").status == 200
        exchange_on_all([sock], 3, 1000)
    finally:
        sock.close()
    # Once its last stream ended, the removed peer's session is closed.
    wait_for(lambda: "host-b" not in {p["name"] for p in admin_json(pair.a_admin, "/peers")["peers"]
                                      if p["configured"] or p["sessions"]},
             what="the removed peer's sessions to close")


def test_connections_waiting_for_a_peer_follow_its_new_address(sidecar, backend):
    """A peer that is down gets its address fixed by a reload: the connection
    already waiting for a session is carried by the new one, not reset."""
    echo = backend(EchoServer())
    pair = ReloadablePair(sidecar, [echo.endpoint])
    port = free_port()
    slow = {"connect_timeout_ms": 8000}
    dead_tcp, dead_rdma = free_port(), free_port()
    pair.start_a([], config=pair.a_config([listener("echo", port, echo.endpoint)],
                                          peers=[("host-b", dead_tcp, dead_rdma)], tunnel_extra=slow))
    sock = connect(("127.0.0.1", port), timeout=10)
    try:
        send_all(sock, b"waiting", time.monotonic() + 5)
        wait_for(lambda: [x for x in admin_json(pair.a_admin, "/streams")["streams"] if x["state"] == "waiting"],
                 what="the stream to wait for a session")
        pair.a.config_path.write_text(pair.a_config([listener("echo", port, echo.endpoint)], tunnel_extra=slow))
        r = admin_request(pair.a_admin, "/reload", "POST")
        assert r.status == 200 and r.json()["changes"] == ["peer host-b changed"], r.text
        assert recv_exact(sock, 7, time.monotonic() + 20) == b"waiting"
    finally:
        sock.close()
    failed = {k: v for k, v in admin_json(pair.a_admin, "/stats")["streams"]["failed"].items() if v}
    assert failed == {}, failed


def test_a_shared_unix_listener_removed_and_added_again(sidecar, backend, sock_dir, monkeypatch):
    """Two workers share one unix socket. Removing it by reload refuses new
    connections (the path is gone); adding it back binds it again, round
    after round; no accept fails meanwhile. Single-shot accepts, as on 5.10."""
    monkeypatch.setenv("RDMAGW_IO_URING", "baseline")
    echo = backend(EchoServer())
    pair = ReloadablePair(sidecar, [echo.endpoint])
    tcp_port = free_port()
    path = str(sock_dir / "shared.sock")
    shared = {"name": "shared", "listen": f"unix:{path}", "peer": "host-b", "target": echo.endpoint}
    pair.start_a([listener("tcp", tcp_port, echo.endpoint), shared])
    assert echo_roundtrip(path, b"unix before") == b"unix before"
    for round_no in range(5):
        pair.a.config_path.write_text(pair.a_config([listener("tcp", tcp_port, echo.endpoint)]))
        assert admin_request(pair.a_admin, "/reload", "POST").status == 200
        with pytest.raises((ConnectionRefusedError, FileNotFoundError)):
            connect(path, timeout=2).close()
        pair.a.config_path.write_text(pair.a_config([listener("tcp", tcp_port, echo.endpoint), shared]))
        assert admin_request(pair.a_admin, "/reload", "POST").status == 200
        assert echo_roundtrip(path, b"unix again %d" % round_no) == b"unix again %d" % round_no
    time.sleep(0.2)  # a tick or more, for a failed accept to be logged
    assert "event=accept_failed" not in pair.a.log_text(), pair.a.tail()



@pytest.mark.deadline(60)
@pytest.mark.parametrize("replacement", ["fifo", "dev-zero"])
def test_a_config_path_that_would_block_fails_the_reload_at_once(sidecar, backend, replacement):
    """The config path replaced by a FIFO nobody writes, or a symlink to
    /dev/zero: a reload (SIGHUP or POST /reload) fails at once saying why;
    the process stays live, keeps serving, and stops on SIGTERM."""
    echo = backend(EchoServer())
    pair = ReloadablePair(sidecar, [echo.endpoint])
    port = free_port()
    pair.start_a([listener("echo", port, echo.endpoint)])
    path = pair.a.config_path
    good = path.read_text()
    path.unlink()
    if replacement == "fifo":
        os.mkfifo(path, 0o600)
        why = "not a regular file (a FIFO)"
    else:
        os.symlink("/dev/zero", path)
        why = "not a regular file (a character device)"

    since = pair.a.log_size()
    pair.a.send_signal(signal.SIGHUP)
    line = pair.a.wait_log("event=reload_failed", 10, since=since)
    assert line, pair.a.tail()
    # Why: on the event=reload_error line, written after that one.
    wait_for(lambda: why in pair.a.log_text(since), timeout=5, what=f"the log to say why: {why}")
    started = time.monotonic()
    r = admin_request(pair.a_admin, "/reload", "POST", timeout=5)
    assert r.status == 400 and why in r.text, r.text
    assert time.monotonic() - started < 5
    assert admin_request(pair.a_admin, "/live", timeout=5).status == 200
    assert echo_roundtrip(("127.0.0.1", port), b"still here") == b"still here"

    path.unlink()
    path.write_text(good)
    assert pair.a.stop(signal.SIGTERM, grace=10) == 0
