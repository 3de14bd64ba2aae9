#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""perf/peers' Python application: an echo server (a child forked for each
connection) and the client that goecho and forkecho also implement: 64-byte
round trips, then echoed bulk checked byte for byte, reported as one JSON
line. Its sockets are what Python's socket module makes of them, as in any
Python service.

  echo.py server PORT
  echo.py client HOST PORT SECONDS"""

import json
import os
import random
import select
import signal
import socket
import sys
import time

def make_socket() -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


def serve(port: int) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    ln = make_socket()
    ln.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ln.bind(("0.0.0.0", port))
    ln.listen(64)
    print("listening", port, flush=True)
    while True:
        conn, _ = ln.accept()
        if os.fork() == 0:
            ln.close()
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                conn.sendall(data)
            os._exit(0)
        conn.close()


def ping_pong(addr, seconds: float) -> list[float]:
    s = make_socket()
    s.settimeout(30)
    s.connect(addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = b"p" * 64
    rtts = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(rtts) < 1_000_000:
        t0 = time.monotonic()
        s.sendall(msg)
        got = 0
        while got < len(msg):
            chunk = s.recv(len(msg) - got)
            if not chunk:
                raise ConnectionError("the echo ended early")
            got += len(chunk)
        rtts.append(time.monotonic() - t0)
    s.close()
    return rtts


# The pattern bulk sends over and over: a prime length, so that bytes lost,
# repeated or out of order show at any granularity a transport could get
# wrong. Compared byte for byte (cheaper than a digest: under emulation a
# SHA-256 would measure the client, not the path).
PERIOD = 65537
PATTERN = random.Random(1).randbytes(PERIOD) * 2
PATTERN_VIEW = memoryview(PATTERN)  # slices without copies


def bulk(addr, seconds: float):
    """Sends for `seconds` while reading the echo, on one thread."""
    s = make_socket()
    s.settimeout(30)
    s.connect(addr)
    s.setblocking(False)
    sent = got = 0
    same = True
    t0 = time.monotonic()
    deadline = t0 + seconds + 60
    writing = True
    while time.monotonic() < deadline:
        if writing and time.monotonic() - t0 >= seconds:
            s.shutdown(socket.SHUT_WR)
            writing = False
        r, w, _ = select.select([s], [s] if writing else [], [], 5)
        if w:
            try:
                at = sent % PERIOD
                sent += s.send(PATTERN_VIEW[at:at + 65536])
            except BlockingIOError:
                pass
        if r:
            data = s.recv(262144)
            if not data:
                break
            for off in range(0, len(data), 65536):
                piece = data[off:off + 65536]
                at = (got + off) % PERIOD
                same = same and piece == PATTERN_VIEW[at:at + len(piece)]
            got += len(data)
    elapsed = time.monotonic() - t0
    s.close()
    return got, elapsed, same and got == sent


def client(host: str, port: int, seconds: float) -> int:
    addr = (host, port)
    out = {}
    try:
        rtts = sorted(ping_pong(addr, seconds))
        out.update(round_trips=len(rtts), p50_us=rtts[len(rtts) // 2] * 1e6, p99_us=rtts[len(rtts) * 99 // 100] * 1e6)
        n, elapsed, same = bulk(addr, seconds)
        out.update(bulk_bytes=n, mib_s=n / 2**20 / elapsed, bytes_ok=same)
    except OSError as e:
        out["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out), flush=True)
    return 1 if "error" in out else 0


def main(argv: list[str]) -> int:
    args = argv
    if len(args) == 2 and args[0] == "server":
        serve(int(args[1]))
        return 0
    if len(args) == 4 and args[0] == "client":
        return client(args[1], int(args[2]), float(args[3]))
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
