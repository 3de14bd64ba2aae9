# SPDX-License-Identifier: Apache-2.0
"""A client on one host of test_fleet.py's fleet, run inside that host's
namespace (as a user iptables redirects). Every socket is driven from one
thread, non-blocking, so a reset is read as a reset and never as an EOF.

  fleet_client.py run IP:PORT:CONNECTIONS:BYTES ...   (IP: IPv4, or IPv6 unbracketed)
      Connects CONNECTIONS times to each address at once, sends BYTES of
      seeded random data, half-closes, reads the echo to its end. Prints one
      JSON list: {"dest", "end": "ok" | "reset" | "short" | "timeout" | "refused"}.
  fleet_client.py hold IP:PORT ...
      One connection to each, one byte echoed through each; prints "held" and
      keeps them open until stdin closes (at most 120 s). Each line "echo" on
      stdin echoes one more byte through every one of them and prints
      "echoed N" (N: how many came back intact).
"""

from __future__ import annotations

import errno
import hashlib
import json
import random
import selectors
import socket
import sys
import time

# ENOTCONN: shutdown() on a socket the peer reset after the connect completed
# (a refused stream's reset can come that fast).
RESET = (errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED, errno.ENOTCONN)


class Conn:
    def __init__(self, dest: str, seed: int, size: int):
        ip, port = dest.rsplit(":", 1)
        self.dest = dest
        self.payload = random.Random(seed).randbytes(size)
        self.sent = 0
        self.got = hashlib.sha256()
        self.got_len = 0
        self.end: str | None = None
        self.sock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        rc = self.sock.connect_ex((ip, int(port)))
        if rc not in (0, errno.EINPROGRESS):
            self.end = "refused" if rc == errno.ECONNREFUSED else "reset"

    def on_event(self, mask: int) -> None:
        try:
            if mask & selectors.EVENT_WRITE and self.sent < len(self.payload):
                self.sent += self.sock.send(self.payload[self.sent:self.sent + 262144])
                if self.sent == len(self.payload):
                    self.sock.shutdown(socket.SHUT_WR)
            if mask & selectors.EVENT_READ:
                data = self.sock.recv(262144)
                if not data:
                    whole = self.got_len == len(self.payload) and \
                        self.got.digest() == hashlib.sha256(self.payload).digest()
                    self.end = "ok" if whole else "short"
                    return
                self.got.update(data)
                self.got_len += len(data)
        except BlockingIOError:
            pass
        except OSError as e:
            self.end = "reset" if e.errno in RESET else "refused" if e.errno == errno.ECONNREFUSED else \
                f"error:{errno.errorcode.get(e.errno, e.errno)}"

    def events(self) -> int:
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if self.sent < len(self.payload) else 0)


def run(specs: list[str], bound_s: float = 60) -> list[dict]:
    conns = []
    for spec in specs:
        ip, port, count, size = spec.rsplit(":", 3)
        for i in range(int(count)):
            conns.append(Conn(f"{ip}:{port}", seed=hash((ip, i)) & 0xFFFFFFFF, size=int(size)))
    sel = selectors.DefaultSelector()
    for c in conns:
        if c.end is None:
            sel.register(c.sock, c.events(), c)
    deadline = time.monotonic() + bound_s
    live = [c for c in conns if c.end is None]
    while live and time.monotonic() < deadline:
        for key, mask in sel.select(timeout=0.5):
            c = key.data
            c.on_event(mask)
            if c.end is not None:
                sel.unregister(c.sock)
            else:
                sel.modify(c.sock, c.events(), c)
        live = [c for c in conns if c.end is None]
    for c in conns:
        if c.end is None:
            c.end = "timeout"
        c.sock.close()
    return [{"dest": c.dest, "end": c.end} for c in conns]


def hold(dests: list[str]) -> None:
    socks = []
    for d in dests:
        ip, port = d.rsplit(":", 1)
        s = socket.create_connection((ip, int(port)), timeout=20)
        s.sendall(b"x")
        if s.recv(1) != b"x":
            print(f"no echo from {d}", flush=True)
            sys.exit(1)
        socks.append(s)
    print("held", flush=True)
    deadline = time.monotonic() + 120
    for line in sys.stdin:
        if time.monotonic() > deadline or line.strip() != "echo":
            break
        intact = 0
        for s in socks:
            try:
                s.sendall(b"y")
                intact += s.recv(1) == b"y"
            except OSError:
                pass
        print(f"echoed {intact}", flush=True)
    for s in socks:
        s.close()


if __name__ == "__main__":
    if sys.argv[1] == "run":
        print(json.dumps(run(sys.argv[2:])))
    elif sys.argv[1] == "hold":
        hold(sys.argv[2:])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
