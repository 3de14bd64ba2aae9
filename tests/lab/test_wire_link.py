#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that each lab-link fault really happens on the wire, measured with
real packets between host a and host b. Runs on host a:

  tools/rdma-lab run --wire -- tests/lab/test_wire_link.py

Prints one line per check and exits non-zero when any fails. Every probe is
bounded in count and time."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

PEER = os.environ.get("RDMAGW_LAB_PEER_ADDR", "")
ECHO_PORT = 7711
SINK_PORT = 7712

failures: list[str] = []


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stdout.strip()}")
    return r


def link(*args: str) -> None:
    sh("lab-link", *args)


def ping(count: int, interval: float = 0.01, size: int = 56, dont_fragment: bool = False):
    """(loss %, average rtt ms or None, output) of `count` pings to host b."""
    argv = ["ping", "-q", "-n", "-c", str(count), "-i", str(interval), "-W", "1", "-s", str(size)]
    if dont_fragment:
        argv += ["-M", "do"]
    r = sh(*argv, PEER, check=False)
    loss = re.search(r"([\d.]+)% packet loss", r.stdout)
    rtt = re.search(r"= [\d.]+/([\d.]+)/", r.stdout)
    return (float(loss.group(1)) if loss else 100.0, float(rtt.group(1)) if rtt else None, r.stdout)


def check(name: str, ok: bool, detail: str) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        failures.append(name)


ECHO_SERVER = f"""
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{PEER}", {ECHO_PORT}))
s.settimeout(20)
print("ready", flush=True)
end = time.monotonic() + 60
try:
    while time.monotonic() < end:
        data, addr = s.recvfrom(2048)
        s.sendto(data, addr)
except socket.timeout:
    pass
"""

SINK_SERVER = f"""
import socket
srv = socket.create_server(("{PEER}", {SINK_PORT}))
srv.settimeout(60)
print("ready", flush=True)
c, _ = srv.accept()
n = 0
while True:
    d = c.recv(1 << 16)
    if not d:
        break
    n += len(d)
c.sendall(str(n).encode())
c.close()
"""


def start_on_b(script: str) -> subprocess.Popen:
    p = subprocess.Popen(["lab-on", "b", sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.strip() == "ready", f"the server on host b said {line!r}"
    return p


def reordered_fraction(count: int = 400) -> float:
    """Sends numbered UDP datagrams to an echo on host b in bursts of 10 (a
    reordered packet must be overtaken by one sent within netem's delay) and
    returns the fraction that came back after a higher-numbered one."""
    server = start_on_b(ECHO_SERVER)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.0)
    got: list[int] = []
    for i in range(count):
        s.sendto(str(i).encode(), (PEER, ECHO_PORT))
        if i % 10 == 9:
            time.sleep(0.005)
        try:
            while True:
                got.append(int(s.recv(64)))
        except BlockingIOError:
            pass
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            got.append(int(s.recv(64)))
        except BlockingIOError:
            time.sleep(0.01)
    server.kill()
    server.wait()
    late = sum(1 for i, n in enumerate(got) if i and n < max(got[:i]))
    return late / max(len(got), 1)


def throughput_mbit(nbytes: int = 4 << 20) -> float:
    server = start_on_b(SINK_SERVER)
    t0 = time.monotonic()
    c = socket.create_connection((PEER, SINK_PORT), timeout=60)
    chunk = b"x" * 65536
    for _ in range(nbytes // len(chunk)):
        c.sendall(chunk)
    c.shutdown(socket.SHUT_WR)
    got = int(c.recv(64) or b"0")
    elapsed = time.monotonic() - t0
    c.close()
    server.wait(timeout=30)
    assert got == nbytes, f"the sink got {got} of {nbytes} bytes"
    return nbytes * 8 / elapsed / 1e6


def main() -> int:
    if not PEER:
        print("run me with tools/rdma-lab run --wire", file=sys.stderr)
        return 2
    link("clear")
    loss, rtt, out = ping(100)
    check("baseline", loss == 0 and rtt is not None, f"{loss}% loss, {rtt} ms average")
    base_rtt = rtt or 0.0

    link("loss", "20%")
    loss, _, _ = ping(400, 0.005)
    # 20% each way: 1 - 0.8^2 = 36% of the round trips lost.
    check("loss 20%", 20 <= loss <= 55, f"ping lost {loss}% of 400 (36% expected)")
    link("clear")

    link("delay", "40ms", "5ms")
    _, rtt, _ = ping(30, 0.05)
    check("delay 40ms 5ms", rtt is not None and rtt >= 70, f"average rtt {rtt} ms (80 expected, {base_rtt} without)")
    link("clear")

    link("reorder", "30%")
    late = reordered_fraction()
    check("reorder 30%", late >= 0.05, f"{late:.0%} of the echoes came back after a later one")
    link("clear")
    late = reordered_fraction(200)
    check("no reorder after clear", late < 0.05, f"{late:.0%} out of order")

    free = throughput_mbit()
    link("rate", "8mbit")
    limited = throughput_mbit(2 << 20)
    check("rate 8mbit", limited < 10 and limited < free / 2,
          f"{limited:.1f} Mbit/s with the limit, {free:.1f} Mbit/s without")
    link("clear")

    link("down")
    loss, _, _ = ping(10, 0.1)
    check("down", loss == 100, f"ping lost {loss}%")
    link("up")
    deadline = time.monotonic() + 10
    while (loss := ping(3, 0.1)[0]) == 100 and time.monotonic() < deadline:
        pass
    check("up", loss < 100, f"ping lost {loss}% once up")

    link("mtu", "1024")
    big_loss, _, big_out = ping(3, 0.1, size=1100, dont_fragment=True)
    small_loss, _, _ = ping(3, 0.1, size=900, dont_fragment=True)
    b_mtu = sh("lab-on", "b", "cat", f"/sys/class/net/{os.environ['RDMAGW_LAB_NETDEV']}/mtu").stdout.strip()
    check("mtu 1024 on host a only", big_loss == 100 and small_loss < 100 and b_mtu != "1024",
          f"1100-byte pings lost {big_loss}%, 900-byte {small_loss}%, host b's mtu {b_mtu}")
    link("clear")
    big_loss, _, _ = ping(3, 0.1, size=1100, dont_fragment=True)
    check("clear restores the mtu", big_loss < 100, f"1100-byte pings lost {big_loss}%")

    shown = sh("lab-link", "show").stdout
    check("show after clear", "netem: none" in shown and "mtu 1500" in shown, shown.strip().replace("\n", " | "))
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
