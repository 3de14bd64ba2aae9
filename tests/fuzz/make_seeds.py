#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/NAME/):
well-formed inputs each harness starts from, so that the fuzzer begins
inside the formats rather than at random bytes. Run again after a format
changes; tests/fuzz/run --merge adds what fuzzing found on top.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import tunnel_frames as tf  # noqa: E402

CAP_RESUME, CAP_PLACEMENT, CAP_AUTH, CAP_BOUND = 1, 2, 4, 16
# The address the fuzz harness's fake wires report for both ends
# (tests/unit/fake_transport.h, FakeTransport::test_ip(1)).
FAKE_WIRE_IP = tf.ip16("192.0.2.1")


def write(name: str, data: bytes) -> None:
    d = HERE / "corpus" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def session_frame(instance: int, nonce: int, kind: int, received: int) -> bytes:
    return tf.frame(tf.SESSION, 0, struct.pack("<QQIQ", instance, nonce, kind, received))


def stream_traffic() -> bytes:
    return (tf.open_frame(1, "tcp:127.0.0.1:6379", b"first")
            + tf.data(1, b"x" * 100) + tf.window(1, 4096) + tf.window(0, 8192) + tf.ping(7) + tf.pong(7)
            + tf.open_frame(3, "unix:/run/redis.sock") + tf.reset(3, 0) + tf.fin(1)
            + tf.frame(tf.ACK, 0, struct.pack("<Q", 64)) + tf.frame(tf.GOAWAY, 0, struct.pack("<I", 0)))


def frames_seeds() -> None:
    hello = tf.hello(capabilities=CAP_RESUME | CAP_PLACEMENT, max_data=4096, stream_window=16384,
                     session_window=65536, node=b"peer")
    write("fuzz_frames", b"\x02" + hello + stream_traffic())
    origin = bytes(range(1, 17)) + tf.origin_address("192.0.2.7", 40512) + tf.origin_address("fd00::a", 443)
    write("fuzz_frames", b"\x02" + tf.open_frame(1, "tcp:127.0.0.1:6379", b"first", origin)
          + tf.open_frame(3, "unix:/run/x.sock", b"", bytes(16) + tf.origin_address() + tf.origin_address()))
    write("fuzz_frames", b"\x04" + hello + tf.auth_frame(tf.CHALLENGE, b"n" * 32) + tf.auth_frame(tf.PROOF, b"p" * 32)
          + session_frame(1, 2, 0, 0))
    write("fuzz_frames", b"\x04" + hello + tf.auth_frame(tf.CHALLENGE, b"n" * 32, FAKE_WIRE_IP)
          + tf.auth_frame(tf.PROOF, b"p" * 32))


def x509_der(pem_path: Path) -> bytes:
    text = pem_path.read_text()
    body = text.split("-----BEGIN CERTIFICATE-----")[1].split("-----END CERTIFICATE-----")[0]
    return base64.b64decode("".join(body.split()))


def session_seeds() -> None:
    plain = tf.hello(max_data=4096, stream_window=16384, session_window=65536, node=b"peer")
    resumable = tf.hello(capabilities=CAP_RESUME, max_data=4096, stream_window=16384, session_window=65536,
                         node=b"peer")
    authed = tf.hello(capabilities=CAP_AUTH | CAP_BOUND, max_data=4096, stream_window=16384, session_window=65536, node=b"peer")
    split = b"\x10"
    # mode: bit 0 dialer, bit 1 auth, bit 2 resumable, bits 3-4 streams given
    write("fuzz_session", bytes([0b11000]) + split + plain + stream_traffic())
    write("fuzz_session", bytes([0b11100]) + split + resumable + session_frame(5, 6, 0, 0) + stream_traffic())
    write("fuzz_session", bytes([0b11001]) + split + plain + stream_traffic())
    write("fuzz_session", bytes([0b11101]) + split + resumable + session_frame(0, 0, 2, 0) + stream_traffic())
    write("fuzz_session", bytes([0b11010]) + split + authed + tf.auth_frame(tf.CHALLENGE, b"n" * 32, FAKE_WIRE_IP)
          + tf.auth_frame(tf.PROOF, b"p" * 32) + stream_traffic())
    # Certificates (bit 5): a challenge with a key share, then a certificate
    # and a signature (from tests/unit/certs, which the harness trusts).
    cert_hello = tf.hello(capabilities=CAP_AUTH | CAP_BOUND | 32, max_data=4096, stream_window=16384,
                          session_window=65536, node=b"dialer")
    share = bytes(range(1, 33))
    der = x509_der(ROOT / "tests" / "unit" / "certs" / "dialer.crt.pem")
    write("fuzz_session", bytes([0b111010]) + split + cert_hello
          + tf.frame(tf.AUTH, 0, struct.pack("<I", 1) + b"n" * 32 + FAKE_WIRE_IP + share)
          + tf.frame(tf.AUTH, 0, struct.pack("<I", 3) + der) + tf.frame(tf.AUTH, 0, struct.pack("<I", 4) + b"s" * 70))
    write("fuzz_session", bytes([0b11011]) + split + tf.auth_frame(tf.CHALLENGE, b"n" * 32) + authed
          + tf.auth_frame(tf.PROOF, b"p" * 32))
    # A peer that offers origins: its OPENs carry one.
    with_origin = tf.hello(capabilities=tf.CAP_ORIGIN, max_data=4096, stream_window=16384, session_window=65536,
                           node=b"peer")
    origin = bytes(range(1, 17)) + tf.origin_address("192.0.2.7", 40512) + tf.origin_address("10.96.0.10", 6379)
    write("fuzz_session", bytes([0b11000]) + split + with_origin
          + tf.open_frame(1, "tcp:127.0.0.1:6379", b"first", origin) + tf.fin(1)
          + tf.open_frame(3, "tcp:[::1]:80", b"", bytes(16) + tf.origin_address("fd00::5", 1) + tf.origin_address()))


def config_seeds() -> None:
    for path in [*(ROOT / "config" / "examples").glob("*.yaml"), *(ROOT / "docker" / "examples").glob("*.yaml")]:
        write("fuzz_config", path.read_bytes())
    # Flows never closed, in block lists, under keys, beside quotes and comments.
    write("fuzz_config", b"node: a # {\nlisteners:\n  - name: x\n    routes: [ {match: \"a{\", peer: b} \n")
    write("fuzz_config", b"node: a\ntunnel:\n  peer_cidrs:\n    - {cidr: 10.0.0.0/8\n  address: 1.2.3.4\n")
    # The listener limits, a metrics section, a targets entry with a PROXY header.
    write("fuzz_config", b"node: a\nmetrics: {peer_series: 0}\npeers: [{name: b, address: 10.0.0.2}]\n"
          b"listeners:\n  - {name: l, listen: \"tcp:127.0.0.1:1\", peer: b, target: \"tcp:127.0.0.1:2\", "
          b"max_connections: 10, accepts_per_second: 5, idle_timeout_ms: 60000}\n"
          b"targets: [{target: \"tcp:127.0.0.1:80\", proxy_protocol: v2}]\n")
    write("fuzz_config", b"""node: a
admin: 127.0.0.1:9901
admin_token_file: /etc/rdmagw/token
workers: 2
tunnel:
  address: 10.0.0.1
  transport: auto
  buffer_size: 32KiB
  resume_timeout_ms: 5000
  auth: {mode: psk, key_files: [/k1, /k2]}
  limits: {handshakes: 64, sessions_per_address: 4}
  rdma: {device: erdma_0, slab_size: 64MiB, recv_depth: 64, send_depth: 128, inline_threshold: 64}
peers:
  - {name: b, address: "fd00::2", tcp_port: 7481, rdma_port: 7482}
listeners:
  - {name: l, listen: "unix:/run/l.sock", peer: b, target: "tcp:127.0.0.1:6379"}
  - name: t
    listen: transparent:127.0.0.1:15001
    routes:
      - {match: "10.0.0.0/8:6379", peer: b, target: "tcp:127.0.0.1:6379"}
      - {match: "0.0.0.0/0", action: passthrough}
targets:
  - "tcp:127.0.0.1:6379"
  - "unix:/run/redis.sock"
  - {target: "tcp:127.0.0.1:5432", peers: [10.0.1.0/24, "fd00::/64"]}
  - "tcp:self:6380"
  - {target: "tcp:self:6381", peers: [10.0.2.0/24]}
shutdown_timeout_ms: 1000
log_level: debug
""")
    # A listener on an address other hosts reach, with its clients; the
    # Services' mode; a node name outside the rule.
    write("fuzz_config", b"""node: node-a.example_1
tunnel: {address: 10.0.0.1, auth: {mode: psk, key_files: [/k1]}, peer_cidrs: [10.0.0.0/16]}
peers: [{name: b, address: 10.0.0.2}]
services: {file: /run/rdmagw-k8s/services.json, direct: never}
listeners:
  - {name: l, listen: "tcp:169.254.77.1:6380", clients: [10.244.0.0/16, "fd00::/64"], peer: b,
     target: "tcp:127.0.0.1:6379"}
  - name: t
    listen: transparent:0.0.0.0:15001
    clients: [0.0.0.0/0]
    routes: [{match: "10.96.0.0/12", action: service}, {match: "10.0.0.0/16:6379", peer: destination}]
""")
    write("fuzz_config", b"node: \"x\\e]0;pwned\\a\"\nservices: {file: /s.json, direct: fallback}\n")
    # The local legs past TCP: on, with its cgroup and bound; and half-given.
    write("fuzz_config", b"node: a\nlocal_legs: {redirect: true, cgroup: /sys/fs/cgroup/pod, max_in_flight: 1MiB}\n")
    write("fuzz_config", b"node: a\nlocal_legs:\n  redirect: true\n  max_in_flight: 16KiB\n")


def endpoint_seeds() -> None:
    for text in ["tcp:127.0.0.1:6379", "tcp:[::1]:5432", "unix:/run/rdmagw/redis.sock", "127.0.0.1:9901",
                 "[fd00::1]:9901", "10.1.0.0/16:6379", "10.2.0.5:8000-8100", "0.0.0.0/0", "[fd00::/64]:6379",
                 "fd00::/64", "::ffff:127.0.0.1"]:
        write("fuzz_endpoints", text.encode())


def admin_seeds() -> None:
    token = "t" * 32
    for req in ["GET\n/stats\n\n\n\n", "GET\n/streams\noffset=1&limit=2\n\n\n127.0.0.1:9901",
                f"GET\n/metrics\n\nBearer {token}\n\n", "POST\n/drain\n\n\nhttp://evil.example\n",
                "POST\n/reload\n\n\n\nlocalhost:9901", "GET\n/peers\n\n\n\n", "GET\n/config\n\n\n\nevil.example:9901",
                "DELETE\n/stats\n\n\n\n", "GET\n/nope\n\n\n\n", "GET\n/ready\n\n\n\n"]:
        write("fuzz_admin", req.encode())


def http_seeds() -> None:
    token = "t" * 32
    for req in [b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1:9901\r\n\r\n",
                b"GET /streams?offset=1&limit=2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /live HTTP/1.1\r\n\r\n",
                b"POST /drain HTTP/1.1\r\nOrigin: http://evil.example\r\nContent-Length: 3\r\n\r\nabc",
                ("GET /metrics HTTP/1.1\r\nAuthorization: Bearer " + token + "\r\n\r\n").encode(),
                b"POST /reload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                b"GET /config HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                b"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n"]:
        write("fuzz_http", req)


def rdmagwctl_seeds() -> None:
    write("fuzz_rdmagwctl", b"\x00HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
    write("fuzz_rdmagwctl", b"\x00HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n")
    write("fuzz_rdmagwctl", b"\x02HTTP/1.0 503 Service Unavailable\r\n\r\nnot ready: draining\n")
    write("fuzz_rdmagwctl", b'\x01{"peers": [{"name": "b", "sessions": [{"rtt_us": 12, "qp": null}]}], "x": -1.5e3,'
                            b' "s": "\\u00e9\\n", "t": true, "f": false}')


def connect_params_seeds() -> None:
    magic = 0x31574752
    write("fuzz_connect_params", struct.pack("<III", magic, 128, 16640))
    write("fuzz_connect_params", struct.pack("<IIIIQQ", magic, 32, 4352, 1, 7, 9))


def takeover_channel_seeds() -> None:
    def message(kind: int, payload: bytes = b"") -> bytes:
        return struct.pack("<IIQI", 0x54574752, kind, len(payload), 0) + payload
    hello = struct.pack("<III", 1, 4242, 1)
    write("fuzz_takeover_channel", message(1, hello) + message(6) + message(2) + message(3, b"\x02" + b"\0" * 40)
          + message(7))
    write("fuzz_takeover_channel", message(5, b"the new process refused: why") + message(4))
    # A new process that adopts redirected legs, and their maps' message.
    hello_legs = struct.pack("<III", 1, 4242, 3)
    write("fuzz_takeover_channel", message(1, hello_legs) + message(6)
          + message(8, struct.pack("<I", 1) + b"/sys/fs/cgroup/unified/pod") + message(3, b"\x03" + b"\0" * 40))


def services_file_seeds() -> None:
    ep = {"address": "10.0.1.1", "port": 6380, "state": "ready", "node": "n1", "pod": "redis-0", "rdmagw": True}
    full = {"format": "rdmagw-services/1", "api": {"reachable": True, "since": "2026-11-28T01:00:00Z"},
            "services": [
                {"namespace": "default", "name": "redis", "cluster_ips": ["10.96.0.10"],
                 "ports": [{"port": 6379, "endpoints": [ep, {**ep, "address": "10.0.1.2", "state": "not-ready",
                                                             "rdmagw": False},
                                                        {**ep, "address": "10.0.1.3", "state": "terminating"}]}]},
                {"namespace": "db", "name": "pg", "cluster_ips": [],
                 "ports": [{"name": "sql", "port": 5432, "endpoints": [{**ep, "port": 5432}]},
                           {"name": "metrics", "port": 9187, "endpoints": []}]}]}
    write("fuzz_services_file", json.dumps(full, indent=1).encode())
    # Addresses no endpoint holds, and a name with a control byte: refused.
    for address in ("127.0.0.1", "169.254.169.254", "0.1.2.3", "224.0.0.1", "255.255.255.255"):
        write("fuzz_services_file", json.dumps({**full, "services": [
            {"namespace": "default", "name": "x", "cluster_ips": ["10.96.0.11"],
             "ports": [{"port": 80, "endpoints": [{**ep, "address": address}]}]}]}).encode())
    write("fuzz_services_file", json.dumps({**full, "services": [
        {"namespace": "default", "name": "x", "cluster_ips": ["10.96.0.12"],
         "ports": [{"port": 80, "endpoints": [{**ep, "pod": "p\u001b]0;t\u0007"}]}]}]}).encode())
    write("fuzz_services_file", json.dumps({"format": "rdmagw-services/1", "api": {
        "reachable": False, "since": "2026-11-28T01:00:00Z", "error": "connection refused"}, "services": []}).encode())
    # A node-mode rdmagw on n2, the node of an endpoint without a sidecar;
    # another endpoint names no node.
    behind = {"format": "rdmagw-services/1", "api": full["api"],
              "nodes": [{"name": "n2", "tunnel": "10.0.0.2"}, {"name": "n9", "tunnel": "10.0.0.9"}],
              "services": [{"namespace": "default", "name": "kv", "cluster_ips": ["10.96.0.13"],
                            "ports": [{"port": 80, "endpoints": [
                                {**ep, "address": "10.0.3.1", "node": "n2", "pod": "kv-0", "rdmagw": False},
                                {"address": "10.0.3.2", "port": 6380, "state": "ready", "rdmagw": False}, ep]}]}]}
    write("fuzz_services_file", json.dumps(behind).encode())
    # A dual-stack Service: a ClusterIP and endpoints of each family under
    # one port, and a node-mode rdmagw on an IPv6 tunnel.
    dual = {"format": "rdmagw-services/1", "api": full["api"],
            "nodes": [{"name": "n1", "tunnel": "10.0.0.1"}, {"name": "n6", "tunnel": "fd00::6"}],
            "services": [{"namespace": "default", "name": "kv6", "cluster_ips": ["fd00:96::a", "10.96.0.14"],
                          "ports": [{"name": "kv", "port": 80, "endpoints": [
                              {**ep, "address": "10.0.4.1", "pod": "kv6-0"},
                              {**ep, "address": "fd00:10::1", "node": "n6", "pod": "kv6-0", "rdmagw": False},
                              {**ep, "address": "fd00:10::2", "state": "not-ready", "node": "n6", "pod": "kv6-1",
                               "rdmagw": False}]}]}]}
    write("fuzz_services_file", json.dumps(dual).encode())
    services_table_seeds(full, behind, dual)


def services_table_seeds(full: dict, behind: dict, dual: dict) -> None:
    """Tables as rdmagw-k8s writes them (its --table-from, so the seeds are
    the production writer's bytes): the full file, an empty one, one
    Service with many endpoints (index searches that wrap), one with
    nodes behind a node-mode rdmagw, and a dual-stack one."""
    import subprocess
    import tempfile
    go = shutil.which("go") or "/usr/local/go/bin/go"
    many = {**full, "services": [{"namespace": "n", "name": "wide", "cluster_ips": ["10.96.1.1", "10.96.1.2"],
                                  "ports": [{"port": 80, "endpoints": [
                                      {"address": f"10.1.{i // 250}.{i % 250 + 1}", "port": 8080,
                                       "state": ("ready", "not-ready", "terminating")[i % 3], "node": f"n{i % 7}",
                                       "pod": f"wide-{i}", "rdmagw": i % 2 == 0} for i in range(300)]}]}]}
    empty = {"format": "rdmagw-services/1", "api": {"reachable": False, "since": "", "error": "x"}, "services": []}
    with tempfile.TemporaryDirectory() as tmp:
        agent = Path(tmp) / "rdmagw-k8s"
        subprocess.run([go, "build", "-o", str(agent), "."], cwd=ROOT / "tools" / "rdmagw-k8s", check=True,
                       env=dict(os.environ, CGO_ENABLED="0"))
        for content in (full, many, empty, behind, dual):
            source, table = Path(tmp) / "services.json", Path(tmp) / "services.table"
            source.write_text(json.dumps(content))
            subprocess.run([str(agent), "--table-from", str(source), "--table", str(table)], check=True)
            write("fuzz_services_table", table.read_bytes())


def main() -> None:
    frames_seeds()
    takeover_channel_seeds()
    session_seeds()
    config_seeds()
    endpoint_seeds()
    admin_seeds()
    http_seeds()
    rdmagwctl_seeds()
    connect_params_seeds()
    services_file_seeds()
    for name in sorted(os.listdir(HERE / "corpus")):
        print(f"{name}: {len(os.listdir(HERE / 'corpus' / name))} seeds")


if __name__ == "__main__":
    main()
