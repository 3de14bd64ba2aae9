# SPDX-License-Identifier: Apache-2.0
"""tunnel.auth.mode cert (docs/security.md, "Per-node identity"): each node
proves itself with its own X.509 certificate, signed by the fleet's CA. Its
name comes from the certificate, and the certificate's IP addresses say
where it may be. Real sidecars, certificates made by certs.py:

- a pair opens sessions and carries streams, encrypted or not (on the
  transport under test: RDMA in the lab, tests/lab/rdma_integration.sh);
- each bad certificate (expired, not yet valid, another CA, another name, an
  address it does not list) is refused, counted by reason and logged with
  why, and no stream gets through;
- certificates and CAs rotate by reload with a stream open throughout;
- a target may be opened by peers named in it, which a certificate proves.
"""

from __future__ import annotations

import datetime
import socket
import subprocess
import time

import pytest

from admin_client import admin_json, admin_request, parse_metrics
from backends import EchoServer
from certs import DAY, NOW, Authority, cert_auth
from clients import connect, echo_roundtrip, free_port, how_stream_ends, recv_exact, wait_closed, wait_for
from conftest import TEST_TRANSPORT, TUNNEL_ADDR, render_config

# Two cases need what only the TCP transport on loopback has here: a second
# local address (127.0.0.2; the lab's second address, RDMAGW_LAB_ADDR2, is
# not used by these tests yet), and `ss -K` to cut
# a transport so that it resumes (the RDMA path's cut is the lab's link
# flap, test_rdma_flap.py). Both run on RDMA's handshake code all the same:
# authentication runs on top of either transport.
needs_loopback = pytest.mark.skipif(TEST_TRANSPORT != "tcp",
                                    reason="needs a second local address on the tunnel's device")
needs_ss_kill = pytest.mark.skipif(TEST_TRANSPORT != "tcp", reason="cuts the tunnel with ss -K (TCP only)")


class CertPair:
    """host-b (targets) and host-a (a listener to host-b), each with its own
    certificate from `ca`; either side's auth section may be replaced."""

    def __init__(self, sidecar, tmp_path, targets, *, a_auth=None, b_auth=None, encrypt=False,
                 b_address=TUNNEL_ADDR, a_dials=TUNNEL_ADDR, peer_name="host-b", b_node="host-b",
                 a_tunnel=None, a_connect="always"):
        self.ca = Authority(tmp_path / "pki")
        self.b_port, self.b_admin, self.a_admin, self.a_port = free_port(), free_port(), free_port(), free_port()
        self.b_rdma, self.a_rdma = free_port(), free_port()
        self.listen = free_port()
        self.target = targets[0]
        self.b_cert = b_cert = self.ca.node(b_node, [TUNNEL_ADDR])
        a_cert = self.ca.node("host-a", [TUNNEL_ADDR])
        self.b = sidecar(b_node, render_config(
            b_node, tunnel_port=self.b_port, admin_port=self.b_admin, targets=targets, address=b_address,
            rdma_port=self.b_rdma,
            auth=b_auth or cert_auth([self.ca.path], *b_cert, encrypt=encrypt)))
        self.a_text = lambda auth: render_config(
            "host-a", tunnel_port=self.a_port, admin_port=self.a_admin, peers=[(peer_name, self.b_port, self.b_rdma)],
            peer_address=a_dials, tunnel_extra=a_tunnel, peer_connect=a_connect, rdma_port=self.a_rdma,
            listeners=[{"name": "t", "listen": f"tcp:127.0.0.1:{self.listen}", "peer": peer_name,
                        "target": self.target}],
            auth=auth)
        self.a = sidecar("host-a", self.a_text(a_auth or cert_auth([self.ca.path], *a_cert, encrypt=encrypt)))

    def start(self, refused: bool = False):
        """`refused`: the pair is not to open sessions (no waiting for them)."""
        self.b.admin_port, self.a.admin_port = self.b_admin, self.a_admin
        self.b.tunnel_port = self.b_port
        self.b.start()
        self.a.start()
        if TEST_TRANSPORT != "tcp" and not refused:
            # As the pair fixture does: under the lab's emulation RDMA CM
            # sessions come up seconds after "ready".
            wait_for(lambda: self.a.log_text().count("event=session_open") >= 2, timeout=30,
                     what="host-a's RDMA sessions")
        return self


def failures(sc, reason: str) -> float:
    return parse_metrics(admin_request(sc.admin_port, "/metrics").text).get(
        f'rdmagw_auth_failures_total{{reason="{reason}"}}', 0)


@pytest.mark.parametrize("encrypt", [False, True])
def test_two_nodes_with_certificates_carry_streams(sidecar, backend, tmp_path, encrypt):
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint], encrypt=encrypt).start()
    payload = bytes(range(256)) * 512
    assert echo_roundtrip(("127.0.0.1", p.listen), payload, timeout=15) == payload
    peers = admin_json(p.b_admin, "/peers")["peers"]
    assert any(x["name"] == "host-a" for x in peers), peers
    assert "auth=cert" in p.a.log_text() and "event=auth_failed" not in p.a.log_text() + p.b.log_text()


# A dialer presenting a certificate the acceptor must refuse: (how it is
# bent, host-a's tunnel address, the reason host-b counts, what it says).
DIALER_BAD = {
    "expired": (dict(not_before=NOW - 10 * DAY, not_after=NOW - DAY), TUNNEL_ADDR, "expired",
                "certificate has expired"),
    "not-yet-valid": (dict(not_before=NOW + DAY, not_after=NOW + 10 * DAY), TUNNEL_ADDR, "not-yet-valid",
                      "certificate is not yet valid"),
    "other-ca": (None, TUNNEL_ADDR, "unknown-ca", "unable to get local issuer certificate"),
    # Its certificate is for 127.0.0.3 and it listens on every address, so
    # it dials from where the route says, 127.0.0.1: the address a node
    # connects from must be in its certificate.
    "source-address": (dict(addresses=("127.0.0.3",)), "0.0.0.0", "wrong-address", "does not list 127.0.0.1"),
}


@pytest.mark.parametrize("case", sorted(DIALER_BAD))
def test_a_bad_dialer_certificate_is_refused_counted_and_said(sidecar, backend, tmp_path, case):
    if case == "source-address" and TEST_TRANSPORT != "tcp":
        pytest.skip("needs a second local address on the tunnel's device")
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint])
    bent, address, reason, said = DIALER_BAD[case]
    if bent is None:
        other = Authority(tmp_path / "other", name="another CA")
        cert = other.node("host-a", [TUNNEL_ADDR])
        auth = cert_auth([p.ca.path, other.path], *cert)  # host-a trusts both, host-b the fleet's only
    else:
        cert = p.ca.node("host-a", tag="-bad", **({"addresses": (TUNNEL_ADDR,)} | bent))
        auth = cert_auth([p.ca.path], *cert)
    p.a = sidecar("host-a", p.a_text(auth).replace(f"  address: {TUNNEL_ADDR}\n", f"  address: {address}\n", 1))
    p.start(refused=True)
    if case in ("expired", "not-yet-valid"):
        assert p.a.wait_log("event=certificate_invalid", 5), p.a.tail()
    line = p.b.wait_log("event=auth_failed", 10)
    assert line and f"failure={reason}" in line and said in line, p.b.tail()
    wait_for(lambda: failures(p.b, reason) >= 1, timeout=5, what=f"auth failure {reason} counted")
    assert how_stream_ends(("127.0.0.1", p.listen), b"knock knock", timeout=15) == "reset"
    assert echo.completed == 0 and echo.bytes_echoed == 0
    assert p.b.log_text().count("event=auth_failed") == 1, "logged once per address"
    assert "event=session_open" not in p.a.log_text() + p.b.log_text()


def test_a_named_peer_must_present_its_name(sidecar, backend, tmp_path):
    """host-a's peer host-b is at the tunnel address, but the node there is
    host-x (a certificate of the same CA, for the same address): refused."""
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint], b_node="host-x", peer_name="host-b").start(refused=True)
    line = p.a.wait_log("event=auth_failed", 10)
    assert line and "failure=wrong-name" in line and "names node host-x, not host-b" in line, p.a.tail()
    assert failures(p.a, "wrong-name") >= 1
    assert how_stream_ends(("127.0.0.1", p.listen), b"knock knock", timeout=15) == "reset"
    assert echo.completed == 0


@needs_loopback
def test_a_node_with_several_addresses_dials_from_its_tunnel_address(sidecar, backend, tmp_path):
    """host-a's tunnel.address (and certificate) is 127.0.0.3, and the route
    to host-b at 127.0.0.1 would pick 127.0.0.1 as its source: host-a dials
    from 127.0.0.3 all the same, which its certificate lists."""
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint])
    auth = cert_auth([p.ca.path], *p.ca.node("host-a", ["127.0.0.3"], tag="-3"))
    p.a = sidecar("host-a", p.a_text(auth).replace("  address: 127.0.0.1\n", "  address: 127.0.0.3\n", 1))
    p.start()
    assert echo_roundtrip(("127.0.0.1", p.listen), b"from .3", timeout=10) == b"from .3"
    line = p.b.wait_log("event=session_open", 10)
    assert line and "remote=127.0.0.3:" in line, p.b.tail()
    assert "event=auth_failed" not in p.a.log_text() + p.b.log_text()


@needs_loopback
def test_an_acceptor_whose_certificate_does_not_list_the_address_dialed_is_refused(sidecar, backend, tmp_path):
    """host-b listens on every address and its certificate lists 127.0.0.1;
    host-a dials it at 127.0.0.2: host-b may be there, but its certificate
    does not say so, as a server's certificate must name the host dialed."""
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint], b_address="0.0.0.0", a_dials="127.0.0.2").start()
    line = p.a.wait_log("event=auth_failed", 10)
    assert line and "failure=wrong-address" in line and "does not list 127.0.0.2" in line, p.a.tail()
    assert how_stream_ends(("127.0.0.1", p.listen), b"knock knock", timeout=15) == "reset"
    assert echo.completed == 0


def test_mode_cert_and_psk_refuse_each_other_saying_so(sidecar, backend, tmp_path):
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint], b_auth="psk").start(refused=True)
    line = p.b.wait_log("event=auth_failed", 10)
    assert line and "failure=mismatch" in line and "the peer authenticates with a certificate" in line, p.b.tail()


@pytest.mark.deadline(120)
def test_certificates_and_the_ca_rotate_by_reload_with_a_stream_open(sidecar, backend, tmp_path):
    """A node certificate renewed, then the CA replaced (both CAs trusted
    during the change), by reloads only: a reload that gives a node a new
    certificate moves its open sessions to new transports, on which both
    sides prove themselves with what they hold now, so that the last step
    (the old CA dropped) finds every open session proven under the new CA
    and ends none; the stream open throughout goes on."""
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint]).start()
    # Both of host-a's sessions (one per worker; only one will carry the
    # stream) are open, so that each re-authentication moves both.
    wait_for(lambda: p.a.log_text().count("event=session_open") >= 2, timeout=10,
             what="host-a's two sessions open")
    s = connect(("127.0.0.1", p.listen), timeout=10)
    rounds = 0

    def exchange():
        nonlocal rounds
        rounds += 1
        msg = f"round {rounds}".encode()
        s.sendall(msg)
        got = b""
        deadline = time.monotonic() + 10
        while got != msg and time.monotonic() < deadline:
            got += s.recv(64)
        assert got == msg

    def reload(sc, text, *, new_certificate):
        """`new_certificate`: the reload gives `sc` a new certificate, so both
        of host-a's sessions resume on a new transport (waited for)."""
        mark, own_mark = p.a.log_size(), sc.log_size()
        sc.config_path.write_text(text)
        r = admin_request(sc.admin_port, "/reload", "POST")
        assert r.status == 200, r.text
        if new_certificate:
            assert sc.wait_log("event=sessions_reauthenticating", 10, since=own_mark), sc.tail()
            wait_for(lambda: p.a.log_text(mark).count("event=session_resumed") >= 2, timeout=20,
                     what="both of host-a's sessions resumed on a new transport")
        return r.json()

    exchange()
    # 1. host-a's certificate renewed (same CA, a new key).
    new_a = p.ca.node("host-a", [TUNNEL_ADDR], tag="-renewed")
    result = reload(p.a, p.a_text(cert_auth([p.ca.path], *new_a)), new_certificate=True)
    assert any("certificate, key or CAs changed" in c for c in result["changes"]), result
    exchange()
    # 2. A new CA: every node trusts both, then gets a certificate from the
    # new one, then trusts only the new one.
    new_ca = Authority(tmp_path / "pki2", name="rdmagw fleet CA 2")
    reload(p.b, render_b(p, [p.ca.path, new_ca.path], p.b_cert), new_certificate=False)
    a2 = new_ca.node("host-a", [TUNNEL_ADDR])
    reload(p.a, p.a_text(cert_auth([p.ca.path, new_ca.path], *a2)), new_certificate=True)
    exchange()
    b2 = new_ca.node("host-b", [TUNNEL_ADDR])
    reload(p.b, render_b(p, [new_ca.path], b2), new_certificate=True)
    reload(p.a, p.a_text(cert_auth([new_ca.path], *a2)), new_certificate=False)
    exchange()
    assert echo_roundtrip(("127.0.0.1", p.listen), b"a new stream", timeout=10) == b"a new stream"
    s.shutdown(socket.SHUT_WR)
    s.close()
    logs = p.a.log_text() + p.b.log_text()
    for event in ("event=stream_reset", "event=auth_failed", "event=session_revoked"):
        assert event not in logs, logs[-4000:]
    # Three reloads brought a new certificate: each moved both sessions.
    assert p.a.log_text().count("event=session_resumed") >= 3 * 2, p.a.tail()


def test_new_sessions_authenticate_with_what_a_reload_brought(sidecar, backend, tmp_path):
    """On either transport (RDMA in the lab): host-a's sessions are on
    demand and close when idle, so each round's stream opens a new session,
    whose handshake uses what the reloads just brought: a node certificate
    from a new CA (both CAs trusted meanwhile), then the old CA dropped."""
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint], a_tunnel={"session_idle_ms": 300}, a_connect="on_demand")
    p.start(refused=True)  # on demand: no session before the first stream

    def reload(sc, text):
        sc.config_path.write_text(text)
        r = admin_request(sc.admin_port, "/reload", "POST")
        assert r.status == 200, r.text

    def round_trip(n: int):
        # The last session closed idle: this stream's dials a new one.
        wait_for(lambda: p.a.log_text().count("event=session_closed") >= n - 1, timeout=30,
                 what=f"session {n - 1} closed idle")
        msg = f"round {n}".encode()
        assert echo_roundtrip(("127.0.0.1", p.listen), msg, timeout=30) == msg
        assert p.b.log_text().count("event=session_open") == n, p.b.tail()

    round_trip(1)
    new_ca = Authority(tmp_path / "pki2", name="rdmagw fleet CA 2")
    reload(p.b, render_b(p, [p.ca.path, new_ca.path], p.b_cert))
    a2 = new_ca.node("host-a", [TUNNEL_ADDR])
    reload(p.a, p.a_text(cert_auth([p.ca.path, new_ca.path], *a2)))
    round_trip(2)
    reload(p.b, render_b(p, [new_ca.path], new_ca.node("host-b", [TUNNEL_ADDR])))
    reload(p.a, p.a_text(cert_auth([new_ca.path], *a2)))
    round_trip(3)  # only the new CA on both sides: the new certificates did it
    assert "event=auth_failed" not in p.a.log_text() + p.b.log_text()


def revoked_metric(sc) -> float:
    return parse_metrics(admin_request(sc.admin_port, "/metrics").text).get("rdmagw_tunnel_sessions_revoked_total", 0)


def open_stream(p: CertPair) -> socket.socket:
    """A stream through the pair that has carried bytes both ways."""
    s = connect(("127.0.0.1", p.listen), timeout=10)
    s.sendall(b"before")
    assert recv_exact(s, 6, time.monotonic() + 10) == b"before"
    return s


def test_a_ca_removed_by_a_reload_ends_the_sessions_its_certificates_authenticated(sidecar, backend, tmp_path):
    """host-b's reload drops the CA host-a's certificate chains to (a node
    whose key leaked, a CA retired): host-b ends host-a's open sessions at
    the reload, not at their next handshake, so the open stream is reset,
    and nothing new gets through."""
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint]).start()
    s = open_stream(p)
    new_ca = Authority(tmp_path / "pki2", name="rdmagw fleet CA 2")
    mark = p.b.log_size()
    p.b.config_path.write_text(render_b(p, [new_ca.path], new_ca.node("host-b", [TUNNEL_ADDR])))
    r = admin_request(p.b_admin, "/reload", "POST")
    assert r.status == 200, r.text
    reloaded = time.monotonic()
    how, waited, _ = wait_closed(s, timeout=10)
    s.close()
    assert how == "reset", how
    assert time.monotonic() - reloaded < 5, "the stream outlived the reload by seconds"
    line = p.b.wait_log("event=session_revoked", 5, since=mark)
    assert line and "peer=host-a" in line and "unable to get local issuer certificate" in line, p.b.tail()
    assert revoked_metric(p.b) >= 1
    assert how_stream_ends(("127.0.0.1", p.listen), b"knock knock", timeout=15) == "reset"
    assert p.b.wait_log("event=auth_failed", 10, since=mark), p.b.tail()


@pytest.mark.deadline(90)
def test_a_peer_certificate_that_expires_ends_its_session_at_its_end(sidecar, backend, tmp_path):
    """host-a's certificate ends a few seconds after the pair starts: host-b
    ends the session it authenticated then (its open stream is reset), not
    at the next handshake, which it refuses as expired."""
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint])
    # X.509 times have whole seconds: the end is a whole second, 6 to 7 s on
    # (RDMA under the lab's emulation takes seconds to open the sessions).
    life = 7 if TEST_TRANSPORT == "tcp" else 25
    ends = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(seconds=life)
    short = p.ca.node("host-a", [TUNNEL_ADDR], not_after=ends, tag="-short")
    p.a = sidecar("host-a", p.a_text(cert_auth([p.ca.path], *short)))
    p.start()
    s = open_stream(p)
    how, _, _ = wait_closed(s, timeout=life + 15)
    s.close()
    gone = datetime.datetime.now(datetime.timezone.utc)
    assert how == "reset", how
    # Not before its end; soon after (sessions check every 50 ms; the margin
    # is for a loaded machine).
    assert gone >= ends - datetime.timedelta(milliseconds=100), (gone, ends)
    assert gone <= ends + datetime.timedelta(seconds=3), (gone, ends)
    line = p.b.wait_log("event=session_revoked", 5)
    assert line and "peer=host-a" in line and "expired" in line, p.b.tail()
    assert revoked_metric(p.b) >= 1
    assert how_stream_ends(("127.0.0.1", p.listen), b"knock knock", timeout=15) == "reset"
    line = p.b.wait_log("event=auth_failed", 10)
    assert line and "failure=expired" in line, p.b.tail()


def test_a_ca_certificate_or_one_for_servers_only_is_not_a_node_certificate(sidecar, backend, tmp_path):
    """A node's own certificate with CA:TRUE (its holder could issue one for
    any node), or with an extended key usage that leaves out client
    authentication (every node dials), stops --check and the start, saying
    why; its peers would refuse it (tests/unit/session_auth_test.cc drives a
    peer's handshake with such certificates)."""
    echo = backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint])

    def check(auth) -> subprocess.CompletedProcess:
        p.a.config_path.write_text(p.a_text(auth))
        return subprocess.run([str(p.a.binary), "--check", "--config", str(p.a.config_path)], capture_output=True,
                              text=True, timeout=30)

    r = check(cert_auth([p.ca.path], *p.ca.node("host-a", [TUNNEL_ADDR], tag="-both", eku=("server", "client"))))
    assert r.returncode == 0, r.stderr
    r = check(cert_auth([p.ca.path], *p.ca.node("host-a", [TUNNEL_ADDR], tag="-ca", ca=True)))
    assert r.returncode == 2 and "CA:TRUE" in r.stderr, r.stderr
    r = check(cert_auth([p.ca.path], *p.ca.node("host-a", [TUNNEL_ADDR], tag="-server", eku=("server",))))
    assert r.returncode == 2 and "clientAuth" in r.stderr, r.stderr
    p.a.start(wait=False)
    p.a.proc.wait(timeout=30)
    assert p.a.proc.returncode != 0 and "clientAuth" in p.a.log_text(), p.a.tail()


def render_b(p: CertPair, ca_files, cert) -> str:
    return render_config("host-b", tunnel_port=p.b_port, admin_port=p.b_admin, targets=[p.target], rdma_port=p.b_rdma,
                         auth=cert_auth(ca_files, *cert))


def test_a_target_open_to_a_node_by_name(sidecar, backend, tmp_path):
    """Mode cert: `peers` may name nodes, which their certificates prove."""
    echo, other = backend(EchoServer()), backend(EchoServer())
    p = CertPair(sidecar, tmp_path, [echo.endpoint])
    text = p.b.config_path.read_text()
    text = text.replace(f'  - "{echo.endpoint}"\n', f'  - {{target: "{echo.endpoint}", peers: [host-a]}}\n'
                                                       f'  - {{target: "{other.endpoint}", peers: [host-c]}}\n')
    p.b.config_path.write_text(text)
    p.start()
    assert echo_roundtrip(("127.0.0.1", p.listen), b"for host-a", timeout=10) == b"for host-a"
    # The same peer asking for the target open to host-c only is refused.
    port = free_port()
    p.a.config_path.write_text(p.a.config_path.read_text().replace(
        "listeners:\n", f'listeners:\n  - name: c\n    listen: "tcp:127.0.0.1:{port}"\n    peer: host-b\n'
        f'    target: "{other.endpoint}"\n', 1))
    assert admin_request(p.a_admin, "/reload", "POST").status == 200
    assert how_stream_ends(("127.0.0.1", port), b"knock knock", timeout=15) == "reset"
    line = p.b.wait_log(lambda l: "event=stream_refused" in l and "reason=not-allowed" in l, 5)
    # "at 127.0.0.1" on TCP, "at rdma:10.99.0.1" on RDMA.
    assert line and "target is not open to node host-a at " in line and f"{TUNNEL_ADDR}\"" in line, line
    assert other.completed == 0
