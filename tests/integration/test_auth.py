# SPDX-License-Identifier: Apache-2.0
"""Only authenticated peers get in (docs/security.md): real sidecars,
and raw sockets that play a peer with the wrong key, with no key, or with
the right one (docs/protocol.md, "Authentication").

Every pair in the other tests authenticates with the run's fleet key
(conftest.render_config); these tests are about what happens without it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

import tunnel_frames as tf
from admin_client import admin_json, admin_request, parse_metrics
from backends import EchoServer, prng_bytes
from clients import (connect, echo_roundtrip, free_port, recv_exact, require_root_and, send_all, wait_closed,
                     wait_for)
from conftest import check_sanitizers, key_file, render_config, tcp_only
from tunnel_frames import TunnelPeer

MiB = 1 << 20


def auth_failures(sc) -> float:
    metrics = parse_metrics(admin_request(sc.admin_port, "/metrics").text)
    return sum(v for k, v in metrics.items() if k.startswith("rdmagw_auth_failures_total{"))


def closed_without_a_word(peer: TunnelPeer, timeout: float = 5.0) -> list[int]:
    """Reads until the sidecar ends the connection; returns the frame types it
    sent first. Fails if the connection stays open past `timeout`."""
    deadline = time.monotonic() + timeout
    types = []
    for _ in range(100):
        left = deadline - time.monotonic()
        assert left > 0, f"the connection stayed open (frames so far: {types})"
        try:
            types.append(peer.read_frame(left)[0])
        except tf.PeerClosed:
            return types
        except OSError:
            return types
    raise AssertionError("the sidecar kept sending")


@pytest.fixture
def guarded(sidecar, backend):
    """host-b with the fleet key and an echo target; returns (sidecar, echo)."""
    echo = backend(EchoServer())
    b = sidecar("host-b", tunnel_port=free_port(), admin_port=free_port(), targets=[echo.endpoint],
                transport="tcp")
    b.start()
    return b, echo


@tcp_only
def test_a_peer_with_the_wrong_key_sees_a_nonce_and_the_end(guarded):
    b, _ = guarded
    wrong = b"x" * 44
    mark = b.log_size()
    for attempt in range(5):
        with TunnelPeer(b.tunnel_port) as peer:
            with pytest.raises(tf.PeerClosed):
                peer.authenticate(wrong)
    # Counted every time, logged once for the address.
    wait_for(lambda: auth_failures(b) == 5, timeout=5, what="rdmagw_auth_failures_total == 5")
    log = b.log_text(mark)
    assert log.count("event=auth_failed") == 1, log[-3000:]
    line = next(l for l in log.splitlines() if "event=auth_failed" in l)
    assert "remote=127.0.0.1" in line and "matches none of our 1 keys" in line, line
    assert "event=session_open" not in log

    # What the wrong key got to see: one AUTH challenge, nothing else.
    with TunnelPeer(b.tunnel_port) as peer:
        peer.send(tf.hello(capabilities=tf.CAP_AUTH | tf.CAP_BOUND)
                  + tf.auth_frame(tf.CHALLENGE, os.urandom(32), tf.ip16("127.0.0.1")))
        ftype, _, _, _, payload = peer.read_frame(5)
        assert ftype == tf.AUTH and tf.parse_auth(payload)[0] == tf.CHALLENGE
        peer.send(tf.auth_frame(tf.PROOF, os.urandom(32)))
        assert closed_without_a_word(peer) == []
    assert b.running()


@tcp_only
def test_a_peer_without_auth_gets_nothing_and_opens_nothing(guarded):
    b, echo = guarded
    with TunnelPeer(b.tunnel_port) as peer:
        # A plain HELLO and an OPEN right behind it, as a peer without keys would.
        peer.send(tf.hello() + tf.open_frame(1, echo.endpoint, b"ping"))
        assert closed_without_a_word(peer) == [], "the sidecar answered a peer that did not authenticate"
    with TunnelPeer(b.tunnel_port) as peer:
        # Frames instead of AUTH after an authenticating HELLO.
        peer.send(tf.hello(capabilities=tf.CAP_AUTH) + tf.open_frame(1, echo.endpoint, b"ping"))
        assert closed_without_a_word(peer) == []
    time.sleep(0.3)
    assert echo.completed == 0 and echo.bytes_echoed == 0, "a stream reached the target"
    assert auth_failures(b) >= 1
    assert b.running()


@tcp_only
def test_a_peer_with_the_key_passes_and_its_stream_flows(guarded):
    """The protocol as docs/protocol.md describes it, spoken by hand: the
    handshake check is not vacuous (the right key gets in)."""
    b, echo = guarded
    with TunnelPeer(b.tunnel_port) as peer:
        hello = peer.authenticate(tf.read_key(key_file()), node=b"raw-peer")
        assert hello["node"] == "host-b" and hello["capabilities"] & tf.CAP_AUTH
        # This peer offers no resumption, so no SESSION exchange follows.
        payload = prng_bytes(7, 4096)
        peer.send(tf.open_frame(1, echo.endpoint, payload))
        got = b""
        deadline = time.monotonic() + 10
        while len(got) < len(payload) and time.monotonic() < deadline:
            ftype, _, _, sid, data = peer.next_frame(5)
            if ftype == tf.DATA and sid == 1:
                got += data
        assert got == payload
    assert auth_failures(b) == 0


def test_sidecars_with_different_keys_refuse_each_other_and_say_why(pair, backend):
    echo = backend(EchoServer())
    other = key_file("other")
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], a_auth=[other], start=False)
    p.b.start()
    p.a.start()
    line = p.b.wait_log(lambda l: "event=auth_failed" in l, timeout=15)
    assert line and "matches none of our 1 keys" in line, p.b.tail()
    # host-a's side: the connection ends in the handshake; /peers says so.
    def peer_state():
        peers = admin_json(p.a.admin_port, "/peers")["peers"]
        return peers[0] if peers else {}
    wait_for(lambda: "handshake" in str(peer_state()).lower() or "auth" in str(peer_state()).lower(),
             timeout=15, what="host-a's /peers to show why the session fails")
    # A stream cannot open: the application sees a reset, never a clean EOF.
    s = connect(p.address("echo"), timeout=5)
    s.sendall(b"hello")
    how, _, _ = wait_closed(s, timeout=20)
    s.close()
    assert how == "reset", f"a stream that could not open ended with {how}"
    assert echo.bytes_echoed == 0
    assert auth_failures(p.b) >= 1
    # The dialer redials every couple of seconds per worker: its failures
    # are counted, said once (auth_failed) and by the peer link (the first
    # attempt and every tenth), not one session_closed line per attempt.
    wait_for(lambda: auth_failures(p.a) >= 4, timeout=20, what="host-a to have redialed a few times")
    log = p.a.log_text()
    assert log.count("event=auth_failed") == 1, log[-3000:]
    assert "event=session_closed" not in log, log[-3000:]
    assert "event=peer_connect_failed" in log and "authentication failed" in log, log[-3000:]


@tcp_only
def test_keys_rotate_by_reload_while_a_stream_flows(pair, backend):
    """The documented rotation: add the next key everywhere, make it first
    everywhere, drop the old one; reloads only, a stream open throughout,
    and after each step a new transport (ss -K on the tunnel) authenticates
    with what each side has at that moment."""
    require_root_and(["ss"], "kills the tunnel's connections with ss -K")
    old = key_file("rotate-old")
    new = key_file("rotate-new")
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], a_auth=[old], b_auth=[old])
    live = connect(p.address("echo"), timeout=10)
    seed = 100

    def exchange():
        nonlocal seed
        seed += 1
        chunk = prng_bytes(seed, 64 * 1024)
        deadline = time.monotonic() + 20
        send_all(live, chunk, deadline)
        assert recv_exact(live, len(chunk), deadline) == chunk

    def set_keys(sc, files):
        text = sc.config_path.read_text()
        start = text.index("    key_files: [")
        end = text.index("]", start) + 1
        sc.config_path.write_text(text[:start] + f"    key_files: [{', '.join(files)}]" + text[end:])
        r = admin_request(sc.admin_port, "/reload", "POST")
        assert r.status == 200, r.text
        assert any("tunnel.auth: keys changed" in c for c in r.json()["changes"]), r.text

    def new_transport():
        """Kills the tunnel's TCP connections (ss -K): the session resumes on
        a new transport, which authenticates afresh."""
        mark = p.a.log_size()
        port = p.b.tunnel_port
        r = subprocess.run(["ss", "-K", "-tn", "state", "established", f"( sport = :{port} or dport = :{port} )"],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: p.a.log_text(mark).count("event=session_resumed") >= 2, timeout=20,
                 what="both workers' sessions resumed on a new transport")

    exchange()
    for sc, files in ((p.b, [old, new]), (p.a, [old, new]), (p.a, [new, old]), (p.b, [new, old]),
                      (p.a, [new]), (p.b, [new])):
        set_keys(sc, files)
        new_transport()
        exchange()
        assert echo_roundtrip(p.address("echo"), prng_bytes(seed, 1000), timeout=10) == prng_bytes(seed, 1000)
    assert auth_failures(p.a) == 0 and auth_failures(p.b) == 0
    live.shutdown(socket.SHUT_WR)
    how, _, extra = wait_closed(live, timeout=10)
    assert (how, extra) == ("eof", 0)
    live.close()


def test_a_key_removed_by_a_reload_ends_the_sessions_it_authenticated(pair, backend):
    """A key that leaked is removed from host-b's key_files: host-b ends the
    sessions whose peer proved itself with it at the reload (their streams
    are reset), not at their next handshake, and nothing new gets through
    with it."""
    leaked = key_file("revoke-leaked")
    kept = key_file("revoke-kept")
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], a_auth=[leaked], b_auth=[leaked, kept])
    live = connect(p.address("echo"), timeout=10)
    send_all(live, b"before", time.monotonic() + 10)
    assert recv_exact(live, 6, time.monotonic() + 10) == b"before"
    text = p.b.config_path.read_text()
    start = text.index("    key_files: [")
    end = text.index("]", start) + 1
    mark = p.b.log_size()
    p.b.config_path.write_text(text[:start] + f"    key_files: [{kept}]" + text[end:])
    r = admin_request(p.b.admin_port, "/reload", "POST")
    assert r.status == 200, r.text
    how, _, _ = wait_closed(live, timeout=10)
    live.close()
    assert how == "reset", how
    line = p.b.wait_log("event=session_revoked", 5, since=mark)
    assert line and "no longer in tunnel.auth.key_files" in line, p.b.tail()
    revoked = parse_metrics(admin_request(p.b.admin_port, "/metrics").text)["rdmagw_tunnel_sessions_revoked_total"]
    assert revoked >= 1
    s = connect(p.address("echo"), timeout=10)
    try:
        send_all(s, b"after", time.monotonic() + 10)
        how, _, _ = wait_closed(s, timeout=15)
    except (ConnectionResetError, BrokenPipeError):
        how = "reset"
    s.close()
    assert how == "reset", how
    wait_for(lambda: auth_failures(p.b) >= 1, timeout=10, what="host-b refusing the leaked key's proofs")


def test_refuses_to_start_on_a_reachable_tunnel_without_auth_or_with_a_public_key_file(rdmagw_bin, tmp_path):
    def run(text):
        cfg = tmp_path / "c.yaml"
        cfg.write_text(text)
        results = []
        for args in (["--check", "--config", str(cfg)], ["--config", str(cfg)]):
            r = subprocess.run([rdmagw_bin, *args], capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
            out = (r.stdout + r.stderr).decode("utf-8", "replace")
            check_sanitizers("rdmagw " + " ".join(args), out, r.returncode)
            results.append((r.returncode, out))
        return results

    base = render_config("host-a", tunnel_port=free_port(), admin_port=free_port(), transport="tcp",
                         address="0.0.0.0", auth=None)
    for rc, out in run(base):
        assert rc != 0, out
        assert "tunnel.auth" in out and "0.0.0.0 is reachable from other hosts" in out, out

    public = key_file("public", mode=0o644)
    for rc, out in run(base.replace("tcp_port:", f"auth: {{mode: psk, key_files: [{public}]}}\n  tcp_port:")):
        assert rc != 0, out
        assert f"{public}: the key file is accessible by group or others (mode 0644)" in out, out

    short = key_file("short", content="too-short\n")
    for rc, out in run(base.replace("tcp_port:", f"auth: {{mode: psk, key_files: [{short}]}}\n  tcp_port:")):
        assert rc != 0, out
        assert "the key has 9 bytes" in out, out


def test_mode_none_is_allowed_when_written_and_warned_at_every_start(sidecar):
    b = sidecar("host-b", tunnel_port=free_port(), admin_port=free_port(), transport="tcp",
                address="0.0.0.0", auth="none")
    b.start()
    assert "event=auth_disabled" in b.log_text(b.start_offset), b.tail()
    assert "auth=none" in b.log_text()
    b.stop()
    b.restart()
    assert "event=auth_disabled" in b.log_text(b.start_offset), b.tail()
