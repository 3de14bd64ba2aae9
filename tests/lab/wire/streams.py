# SPDX-License-Identifier: Apache-2.0
"""Many echo streams at once, driven from one thread (non-blocking), checked
by SHA-256 without holding the bytes: each stream sends `size` bytes made of
64 KiB chunks that name their stream and position, half-closes, and reads the
echo to its end. How each one ended is reported, never assumed: "ok" (all
bytes back, same hash), "reset", "eof" (a clean end before all came back),
"mismatch" (all bytes, wrong hash) or "timeout"."""

from __future__ import annotations

import hashlib
import random
import selectors
import socket
import struct
import time

CHUNK = 64 * 1024
RESET_ERRORS = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)
_BASE = random.Random(2026).randbytes(1 << 20)


def chunk(stream: int, index: int) -> bytes:
    off = (index * 4093) % (len(_BASE) - CHUNK)
    return struct.pack("!II", stream, index) + _BASE[off:off + CHUNK - 8]


class Stream:
    def __init__(self, i: int, size: int, address):
        self.i, self.size = i, size
        self.sock = socket.create_connection(address, timeout=30)
        self.sock.setblocking(False)
        self.sent = 0
        self.pending = b""
        self.index = 0
        self.received = 0
        self.sent_hash = hashlib.sha256()
        self.recv_hash = hashlib.sha256()
        self.wr_done = False
        self.end: str | None = None

    def next_bytes(self) -> bytes:
        if not self.pending and self.sent < self.size:
            data = chunk(self.i, self.index)[:self.size - self.sent]
            self.index += 1
            self.sent_hash.update(data)
            self.pending = data
        return self.pending


def echo_streams(address, count: int, size: int | list[int], timeout: float, during=None) -> dict[str, int]:
    """Runs `count` streams of `size` bytes (or size[i] for stream i) through
    `address`; returns how many ended which way. `during(elapsed_s)` is called
    about every 0.1 s (to fault the link while bytes move); it returns nothing."""
    deadline = time.monotonic() + timeout
    start = time.monotonic()
    sizes = size if isinstance(size, list) else [size] * count
    streams = [Stream(i, sizes[i], address) for i in range(count)]
    sel = selectors.DefaultSelector()
    for s in streams:
        sel.register(s.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, s)
    open_count = count
    next_tick = start
    try:
        while open_count and time.monotonic() < deadline:
            if during and time.monotonic() >= next_tick:
                during(time.monotonic() - start)
                next_tick = time.monotonic() + 0.1
            for key, ev in sel.select(timeout=0.1):
                s: Stream = key.data
                if s.end:
                    continue
                try:
                    if ev & selectors.EVENT_WRITE and not s.wr_done:
                        data = s.next_bytes()
                        if data:
                            n = s.sock.send(data)
                            s.pending = data[n:]
                            s.sent += n
                        if s.sent >= s.size and not s.pending:
                            s.wr_done = True
                            s.sock.shutdown(socket.SHUT_WR)
                            sel.modify(s.sock, selectors.EVENT_READ, s)
                    if ev & selectors.EVENT_READ:
                        data = s.sock.recv(256 * 1024)
                        if data:
                            s.received += len(data)
                            s.recv_hash.update(data)
                        else:
                            s.end = ("ok" if s.recv_hash.digest() == s.sent_hash.digest() else "mismatch") \
                                if s.wr_done and s.received == s.size else "eof"
                except (BlockingIOError, InterruptedError):
                    continue
                except RESET_ERRORS:
                    s.end = "reset"
                if s.end:
                    sel.unregister(s.sock)
                    open_count -= 1
    finally:
        sel.close()
        for s in streams:
            s.sock.close()
    outcome: dict[str, int] = {}
    for s in streams:
        outcome[s.end or "timeout"] = outcome.get(s.end or "timeout", 0) + 1
    return outcome
