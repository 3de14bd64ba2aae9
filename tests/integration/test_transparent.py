# SPDX-License-Identifier: Apache-2.0
"""Transparent redirect, end to end: two hosts as network namespaces joined by
a veth pair (made here, deleted after). In host A, iptables (installed by
tools/rdmagw-iptables) sends an untouched client's connection to rdmagw A's
transparent listener; routes on the original destination decide: tunnel to
rdmagw B, connect directly (passthrough), or reject."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from clients import require_root_and
from netns_hosts import run, two_hosts
from conftest import key_file, REPO, RDMAGW_BIN, sanitizer_failure

# Addresses exist only inside this test's namespaces.
FAMILIES = {
    "ipv4": dict(a="10.201.0.1", b="10.201.0.2", prefix=24, net="10.201.0.0/24", loop="127.0.0.1",
                 fmt=lambda ip, port: f"{ip}:{port}", extra=[]),
    "ipv6": dict(a="fd00:201::1", b="fd00:201::2", prefix=64, net="fd00:201::/64", loop="::1",
                 fmt=lambda ip, port: f"[{ip}]:{port}", extra=["--ipv6"]),
}
NOBODY = 65534

# Server in host B: answers "<address it saw the connection come from>|<request>".
SERVER = r"""
import socket, sys, threading
def serve(port):
    s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port)); s.listen(16)
    while True:
        c, peer = s.accept()
        c.settimeout(10)
        data = b""
        while True:
            d = c.recv(65536)
            if not d: break
            data += d
        c.sendall(peer[0].encode() + b"|" + data); c.close()
for p in (8000, 9000, 9100):
    threading.Thread(target=serve, args=(p,), daemon=True).start()
threading.Event().wait(300)
"""

# Client in host A: an ordinary connect to B's address; prints what came back.
CLIENT = r"""
import errno, socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    c.sendall(sys.argv[3].encode())
    try:
        c.shutdown(socket.SHUT_WR)
    except OSError as e:  # an RST that came first: the recv below reports it
        if e.errno != errno.ENOTCONN:
            raise
    got = b""
    while True:
        d = c.recv(65536)
        if not d: break
        got += d
    print("reply:" + got.decode())
except (ConnectionResetError, BrokenPipeError) as e:
    print("reset:" + type(e).__name__)
"""


def preconditions():
    require_root_and(("ip", "iptables", "setpriv"), "transparent redirect test")


@pytest.fixture(params=sorted(FAMILIES))
def hosts(request):
    preconditions()
    fam = FAMILIES[request.param]
    with two_hosts(fam["a"], fam["b"], fam["prefix"]) as h:
        yield h.a, h.b, fam


def test_transparent_redirect_tunnels_passes_through_and_rejects(hosts):
    a, b, fam = hosts
    A_IP, B_IP, ep = fam["a"], fam["b"], fam["fmt"]
    work = Path(tempfile.mkdtemp(prefix="rdmagw-tp-"))
    os.chmod(work, 0o755)  # rdmagw A runs as nobody and must read its config
    # ... and its key: the fleet key, in a file of its own that nobody owns.
    nobody_key = key_file("fleet-nobody", content=open(key_file()).read(), uid=NOBODY)
    procs = []
    try:
        (work / "b.yaml").write_text(f"""node: host-b
workers: 1
admin: "127.0.0.1:9902"
tunnel: {{address: "{B_IP}", tcp_port: 7471, transport: tcp, auth: {{mode: psk, key_files: [{key_file()}]}}}}
targets: ["tcp:{ep(B_IP, 8000)}"]
""")
        (work / "a.yaml").write_text(f"""node: host-a
workers: 1
log_level: debug
admin: "127.0.0.1:9901"
tunnel: {{address: "{A_IP}", tcp_port: 7471, transport: tcp, auth: {{mode: psk, key_files: [{nobody_key}]}}}}
peers:
  - {{name: host-b, address: "{B_IP}", tcp_port: 7471, connect: always}}
listeners:
  - name: outbound
    listen: "transparent:{ep(fam['loop'], 15001)}"
    routes:
      - match: "{ep(B_IP, 8000)}"
        peer: host-b
      - match: "{ep(B_IP, 9000)}"
        action: passthrough
      - match: "{ep(B_IP + ('/128' if ':' in B_IP else '/32'), '9100-9199')}"
        action: reject
      - match: "{'::/0' if ':' in B_IP else '0.0.0.0/0'}"
        action: passthrough
""")
        for f in ("a.yaml", "b.yaml"):
            os.chmod(work / f, 0o644)
        logs = {n: open(work / f"{n}.log", "w") for n in ("server", "a", "b")}
        procs.append(subprocess.Popen(["ip", "netns", "exec", b, "/usr/bin/python3", "-c", SERVER, B_IP],
                                      stdout=logs["server"], stderr=subprocess.STDOUT))
        procs.append(subprocess.Popen(["ip", "netns", "exec", b, RDMAGW_BIN, "--config", str(work / "b.yaml")],
                                      stdout=logs["b"], stderr=subprocess.STDOUT))
        # rdmagw A as nobody: iptables skips that uid, so its own connections
        # (the tunnel to B, passthrough connects) are never redirected back.
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", a, "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             RDMAGW_BIN, "--config", str(work / "a.yaml")], stdout=logs["a"], stderr=subprocess.STDOUT))
        save = "ip6tables-save" if fam["extra"] else "iptables-save"
        before = run("ip", "netns", "exec", a, save, "-t", "nat").stdout
        tool = str(REPO / "tools" / "rdmagw-iptables")
        run("ip", "netns", "exec", a, tool, "install", "--uid", str(NOBODY), "--capture", fam["net"],
            "--redirect-port", "15001", *fam["extra"])

        def log(name):
            return (work / f"{name}.log").read_text()

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and "event=session_open" not in log("a"):
            time.sleep(0.1)
        assert "event=session_open peer=host-b" in log("a"), \
            "rdmagw A's own tunnel connection did not reach B (was it redirected?):\n" + log("a")
        # The ready line names the listener as the configuration does.
        assert f" listeners=transparent:{ep(fam['loop'], 15001)} " in log("a"), log("a")

        def client(port, text):
            return run("ip", "netns", "exec", a, "/usr/bin/python3", "-c", CLIENT, B_IP, str(port), text).stdout.strip()

        # Tunnel: B's server sees the connection come from rdmagw B (B's own
        # address), not from host A.
        assert client(8000, "via-tunnel") == f"reply:{B_IP}|via-tunnel"
        assert f"event=stream_routed listener=outbound destination={ep(B_IP, 8000)} peer=host-b" in log("a")
        # Its access line names where the application meant to go.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "event=access" not in log("a"):
            time.sleep(0.05)
        (access,) = [line for line in log("a").splitlines() if "event=access" in line]
        assert " direction=outbound connection=" in access, access
        assert f" listener=outbound client={ep(A_IP, '')}" in access, access
        assert f" destination={ep(B_IP, 8000)} peer=host-b " in access and " end=close" in access, access
        # B's line names the same connection, its client and where it meant to go.
        connection = access.split(" connection=")[1].split()[0]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "event=access" not in log("b"):
            time.sleep(0.05)
        (inbound,) = [line for line in log("b").splitlines() if "event=access" in line]
        assert f" direction=inbound connection={connection} start=" in inbound, inbound
        assert f" client={ep(A_IP, '')}" in inbound, inbound
        assert f" destination={ep(B_IP, 8000)} remote=" in inbound, inbound
        # Passthrough: connected directly from host A.
        assert client(9000, "direct") == f"reply:{A_IP}|direct"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "direction=passthrough" not in log("a"):
            time.sleep(0.05)
        (access,) = [line for line in log("a").splitlines() if "direction=passthrough" in line]
        assert f" destination={ep(B_IP, 9000)} bytes_from_app=6 " in access and " end=close" in access, access
        # Reject: reset, and logged.
        assert client(9150, "nope").startswith("reset:")
        assert f"event=stream_rejected listener=outbound destination={ep(B_IP, 9150)}" in log("a")

        # A direct connection to the transparent listener was not redirected:
        # its original destination is the listener itself, and the catch-all
        # passthrough route made rdmagw connect to itself until it ran out of
        # descriptors. Refused with a reset now; rdmagw serves on.
        direct = run("ip", "netns", "exec", a, "/usr/bin/python3", "-c", CLIENT, fam["loop"], "15001",
                     "self").stdout.strip()
        assert direct.startswith("reset:"), direct
        assert "not redirected" in log("a"), log("a")[-2000:]
        assert client(9000, "still-serving") == f"reply:{A_IP}|still-serving"

        # Reload (SIGHUP) with the tunnel route turned into a reject: new
        # connections follow the new routes; passthrough is unchanged.
        config = (work / "a.yaml").read_text()
        (work / "a.yaml").write_text(config.replace(
            f'      - match: "{ep(B_IP, 8000)}"\n        peer: host-b\n',
            f'      - match: "{ep(B_IP, 8000)}"\n        action: reject\n'))
        procs[2].send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "event=config_reloaded" not in log("a"):
            time.sleep(0.1)
        assert 'changes="listener outbound changed"' in log("a"), log("a")
        assert client(8000, "after-reload").startswith("reset:")
        assert client(9000, "direct-again") == f"reply:{A_IP}|direct-again"

        run("ip", "netns", "exec", a, tool, "cleanup", *fam["extra"])
        after = run("ip", "netns", "exec", a, save, "-t", "nat").stdout
        strip = lambda t: [l for l in t.splitlines() if not l.startswith("#")]
        assert strip(after) == strip(before), "cleanup left rules behind"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        # On the sanitizer build, a report (or its exit code) fails the test.
        sanitized = []
        for i, name in ((1, "b"), (2, "a")):  # procs[1] is rdmagw B, procs[2] rdmagw A
            if i < len(procs):
                why = sanitizer_failure(f"rdmagw {name}", (work / f"{name}.log").read_text(),
                                        [procs[i].returncode])
                sanitized += [why] if why else []
        shutil.rmtree(work, ignore_errors=True)
        if sanitized:
            pytest.fail("\n\n".join(sanitized), pytrace=False)
