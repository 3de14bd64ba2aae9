# SPDX-License-Identifier: Apache-2.0
"""Streams survive the loss of their tunnel: resumable sessions (docs/protocol.md, "Resumption").

STREAMS application connections through a host-a -> host-b pair each move
SIZE bytes both ways at once (the client sends its seed's stream, the target
sends the next seed's), checked by SHA-256 at both ends. While they run, the
tunnel connection is killed again and again (`ss -K`, a reset on both ends).
Every stream must complete with all its bytes, in order, and no socket may
see a reset: the sessions resume on a new connection and resend what the
peer had not received.

Every socket is driven from one thread, non-blocking (selectors), so a reset
is seen as ECONNRESET by the call that meets it (see test_crash_resets.py).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import selectors
import socket
import struct
import threading
import time

import pytest

from backends import LoopServer
from clients import connect, socket_end, wait_for
from conftest import scaled, tcp_only
from test_crash_resets import kill_tunnel, pattern, prefix_sha
from test_crash_resets import stream_bytes as chunk_of
from tunnel_relay import TunnelRelay

MiB = 1 << 20
STREAMS = scaled(100, 20)
SIZE = scaled(16 * MiB, 4 * MiB)
CHUNK = 256 * 1024
FAULTS = 6                  # tunnel kills, spread over the transfer
FAULT_EVERY_S = 0.7
RUN_S = 240.0               # bound for the whole transfer
HDR = struct.Struct("!IQ")  # seed, size


# Every stream's two ends are checked against it: computed once per stream.
full_sha = functools.lru_cache(maxsize=512)(prefix_sha)


class End:
    """One side of a stream: sends `seed`'s stream of `size` bytes, then
    shuts down its write side; hashes what it receives until EOF."""

    def __init__(self, sock: socket.socket, seed: int | None, size: int):
        self.sock, self.seed, self.size = sock, seed, size
        self.sent = 0
        self.got = 0
        self.hash = hashlib.sha256()
        self.hdr = bytearray()
        self.end: str | None = None
        self.eof = False  # the peer's FIN came

    def events(self) -> int:
        ev = 0 if self.eof else selectors.EVENT_READ
        if self.seed is not None and self.sent < self.size:
            ev |= selectors.EVENT_WRITE
        return ev

    def service(self, sel, ev):
        if ev & selectors.EVENT_READ:
            try:
                data = self.sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError as e:
                return self.finish(sel, socket_end(e, "recv"))
            if data == b"":
                self.eof = True
                if self.seed is None or self.sent >= self.size:
                    return self.finish(sel, "eof")
                sel.modify(self.sock, selectors.EVENT_WRITE, self)  # still sending
                return
            if data:
                self.on_data(sel, data)
        if ev & selectors.EVENT_WRITE and self.seed is not None and self.sent < self.size:
            try:
                self.sent += self.sock.send(chunk_of(self.seed, self.sent, min(CHUNK, self.size - self.sent)))
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                return self.finish(sel, socket_end(e, "send"))
            if self.sent >= self.size:
                self.sock.shutdown(socket.SHUT_WR)
                if self.eof:
                    return self.finish(sel, "eof")
                sel.modify(self.sock, selectors.EVENT_READ, self)

    def on_data(self, sel, data: bytes):
        self.got += len(data)
        self.hash.update(data)

    def finish(self, sel, end: str):
        self.end = end
        sel.unregister(self.sock)
        self.sock.close()


class TargetEnd(End):
    """The target's side: learns the seed and size from the stream's header."""

    def __init__(self, sock):
        super().__init__(sock, None, 0)

    def on_data(self, sel, data: bytes):
        if self.seed is None:
            self.hdr += data
            if len(self.hdr) < HDR.size:
                return
            seed, self.size = HDR.unpack_from(self.hdr)
            data = bytes(self.hdr[HDR.size:])
            self.hdr = bytearray()  # its first chunk may be large: do not keep it
            self.seed = seed + 1  # what it sends back
            self.up_seed = seed
            sel.modify(self.sock, self.events(), self)
        if data:
            super().on_data(sel, data)


class Target(LoopServer):
    """The far application: on 127.0.0.1, or on a Unix socket `path` (which
    an rdmagw in another network namespace reaches too)."""

    def __init__(self, path: str | None = None, lifetime_s: float = RUN_S + 60):
        self.lifetime_s = lifetime_s  # it serves until stop(), or this long at most
        if path is None:
            self.lsock = socket.socket()
            self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.lsock.bind(("127.0.0.1", 0))
            self.endpoint = f"tcp:127.0.0.1:{self.lsock.getsockname()[1]}"
        else:
            self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.lsock.bind(path)
            self.endpoint = f"unix:{path}"
        self.lsock.listen(1024)
        self.lsock.setblocking(False)
        self.ends: list[TargetEnd] = []
        super().__init__()

    def _loop(self):
        sel = selectors.DefaultSelector()
        sel.register(self.lsock, selectors.EVENT_READ, None)
        deadline = time.monotonic() + self.lifetime_s
        while not self._stop.is_set() and time.monotonic() < deadline:
            for key, ev in sel.select(timeout=0.05):
                if key.data is None:
                    while True:
                        try:
                            s, _ = self.lsock.accept()
                        except (BlockingIOError, InterruptedError):
                            break
                        s.setblocking(False)
                        t = TargetEnd(s)
                        self.ends.append(t)
                        sel.register(s, t.events(), t)
                elif key.data.end is None:
                    key.data.service(sel, ev)


class Faults(threading.Thread):
    """Calls inject(i) `count` times, `every` seconds apart, from its own
    thread: a fault may take seconds (a DROP held until keepalive expires)
    while the test's thread keeps every socket moving. Collects what each
    call returns; stop() ends it early (the transfer is over)."""

    def __init__(self, inject, count: int = FAULTS, every: float = FAULT_EVERY_S):
        super().__init__(daemon=True)
        self.inject, self.count, self.every = inject, count, every
        self.results: list = []
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self):
        try:
            for i in range(self.count):
                if self._halt.wait(self.every):
                    return
                self.results.append(self.inject(i))
        except Exception as e:
            self.errors.append(f"{type(e).__name__}: {e}")

    def stop(self):
        self._halt.set()
        self.join(timeout=30)
        assert not self.is_alive(), "a fault injection did not finish within 30 s"


def move_streams(addr, target: Target, streams: int, size: int, bound_s: float, seed0: int = 0,
                 on_timeout=None):
    """Moves `streams` streams of `size` bytes both ways through `addr`: the
    client for seed s sends s's bytes, its target end sends s+1's. Returns
    (client ends, the target ends they made, seconds taken). on_timeout()
    runs when `bound_s` passed with streams unfinished (before they close)."""
    seeds = [seed0 + 2 * i for i in range(streams)]
    for s in seeds:
        pattern(s), pattern(s + 1)
    first_target = len(target.ends)
    clients = []
    for s in seeds:
        sock = connect(addr, timeout=10)
        sock.sendall(HDR.pack(s, size))
        sock.setblocking(False)
        clients.append(End(sock, s, size))
    sel = selectors.DefaultSelector()
    for c in clients:
        sel.register(c.sock, c.events(), c)
    t0 = time.monotonic()
    try:
        while any(c.end is None for c in clients) and time.monotonic() - t0 < bound_s:
            for key, ev in sel.select(timeout=0.02):
                key.data.service(sel, ev)
    finally:
        sel.close()
        if on_timeout is not None and any(c.end is None for c in clients):
            on_timeout()
        for c in clients:
            if c.end is None:
                c.sock.close()
    elapsed = time.monotonic() - t0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (len(target.ends) - first_target < streams
                                           or any(t.end is None for t in target.ends[first_target:])):
        time.sleep(0.05)
    return clients, target.ends[first_target:], elapsed


def stream_problems(clients, target_ends, streams: int, size: int) -> list[str]:
    """Every way the streams went wrong: an end other than a clean EOF, a
    short or corrupt byte stream (SHA-256), a missing target end."""
    bad = [f"client {c.seed}: ended with {c.end}" for c in clients if c.end != "eof"]
    bad += [f"target {getattr(t, 'up_seed', '?')}: ended with {t.end}" for t in target_ends if t.end != "eof"]
    if len(target_ends) != streams:
        bad.append(f"{len(target_ends)} target connections for {streams} streams")
    for c in clients:
        if c.got != size or c.hash.hexdigest() != full_sha(c.seed + 1, size):
            bad.append(f"client {c.seed}: got {c.got} of {size} bytes (SHA-256 differs or short)")
    for t in target_ends:
        if t.end == "eof" and (t.got != size or t.hash.hexdigest() != full_sha(t.up_seed, size)):
            bad.append(f"target {t.up_seed}: got {t.got} of {size} bytes (SHA-256 differs or short)")
    return bad


def transfer_under_faults(addr, target: Target, faults: Faults) -> str:
    """Moves STREAMS streams of SIZE bytes both ways through `addr` while
    `faults` runs, and asserts every byte arrived, once and in order, and
    every socket (client and target) ended with a clean EOF. Returns the
    summary line."""
    faults.start()
    try:
        clients, target_ends, elapsed = move_streams(addr, target, STREAMS, SIZE, RUN_S)
    finally:
        faults.stop()
    ends = collections.Counter(c.end for c in clients)
    tends = collections.Counter(t.end for t in target_ends)
    summary = (f"{STREAMS} streams x {SIZE >> 20} MiB both ways in {elapsed:.1f} s; "
               f"faults {len(faults.results)}; clients {dict(ends)}; targets {dict(tends)}")
    print(summary)
    assert not faults.errors, faults.errors
    assert not target.errors, target.errors
    bad = stream_problems(clients, target_ends, STREAMS, SIZE)
    assert not bad, f"{summary}: {bad[:10]}"
    return summary


def assert_resumed_without_resets(p, faults: int):
    """host-a resumed at least once per fault, and no stream was reset."""
    # The streams are done, but a session the last fault hit may resume
    # after that: one that carried no stream by then, on its own worker.
    wait_for(lambda: p.a.log_text().count("event=session_resumed") >= faults, timeout=20,
             what=f"host-a to log at least {faults} resumes, one per fault")
    assert "event=stream_reset" not in p.a.log_text() + p.b.log_text()
    assert p.a.running() and p.b.running()


@tcp_only
@pytest.mark.deadline(RUN_S + 60)
def test_streams_survive_repeated_tunnel_kills_byte_exact(pair, backend):
    """The tunnel is reset (`ss -K`: RST both ways) again and again."""
    target = backend(Target())
    p = pair([{"name": "io", "target": target.endpoint}], [target.endpoint])
    faults = Faults(lambda i: kill_tunnel(p.b.tunnel_port))
    transfer_under_faults(p.address("io"), target, faults)
    killed = [k for k in faults.results if len(k.strip().splitlines()) >= 2]
    assert len(killed) >= 2, f"ss -K killed no tunnel connection: {faults.results!r}"
    assert_resumed_without_resets(p, len(killed))


@tcp_only
@pytest.mark.deadline(RUN_S + 60)
@pytest.mark.parametrize("auth", ["psk", "psk+encrypt"])
def test_streams_survive_repeated_tunnel_closes_byte_exact(pair, backend, auth):
    """A middlebox closes the tunnel (a FIN both ways, bytes in flight lost)
    again and again: host-a dials host-b through a relay that does it.
    Encrypted too: every new transport gets new keys, and one that lands on
    another worker of host-b moves there with its ciphers."""
    target = backend(Target())
    p = pair([{"name": "io", "target": target.endpoint}], [target.endpoint], start=False,
             a_transport="tcp", b_transport="tcp", a_auth=auth, b_auth=auth)
    relay = backend(TunnelRelay(p.b.tunnel_port))
    point_peer_at(p.a, p.b.tunnel_port, relay.port)
    p.b.start()
    p.a.start()
    faults = Faults(lambda i: relay.close_all())
    transfer_under_faults(p.address("io"), target, faults)
    closed = [n for n in faults.results if n > 0]
    assert len(closed) >= 2, f"the relay had no tunnel connection to close: {faults.results!r}"
    assert not relay.errors, relay.errors
    assert_resumed_without_resets(p, len(closed))


def point_peer_at(sidecar, old_port: int, new_port: int) -> None:
    """Rewrites a (not started) sidecar's config: its peer's tcp_port."""
    text = sidecar.config_path.read_text()
    needle = f"tcp_port: {old_port}\n"
    assert text.count(needle) == 1, text
    sidecar.config_path.write_text(text.replace(needle, f"tcp_port: {new_port}\n"))
