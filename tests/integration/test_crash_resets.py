# SPDX-License-Identifier: Apache-2.0
"""Faults mid-transfer reach every application socket as a reset, never as a
clean EOF after a short read.

Each test runs STREAMS uploads and STREAMS downloads at the same time through
a host-a -> host-b pair, all to one target server (`TargetServer`):
  upload    the client sends a 64 MiB deterministic stream; the server hashes it;
  download  the server sends a 64 MiB deterministic stream; the client hashes it.
Once every stream has carried at least FAULT_AFTER bytes end to end, a fault
is caused to a real process (`ss -K` on the tunnel, SIGKILL of either rdmagw),
or the target itself resets each connection mid-transfer. Then every client
socket, and every target connection where the fault makes it observable, must
end with a reset; what arrived before it is checked by SHA-256 against the
same prefix of the stream that was sent.

Reset versus EOF is classified precisely (Linux): every socket is driven from
one thread, non-blocking (selectors), reading whenever it is readable, so no
other thread can take the error first.
  recv() -> ECONNRESET, send() -> ECONNRESET   "reset": the RST came while established
  recv() -> b""                                "eof": a FIN came first
  send() -> EPIPE                              "eof": an RST that arrives after a FIN
                                               (CLOSE_WAIT) is recorded as EPIPE, and
                                               one that arrives while established is
                                               ECONNRESET to the first call that looks.
A peer that closes without SO_LINGER {1, 0} sends FIN, and the RST that its
orphaned socket answers our next data with comes too late: that is "eof".
"""

from __future__ import annotations

import collections
import functools
import hashlib
import random
import selectors
import socket
import struct
import subprocess
import time

import pytest

from backends import LoopServer
from clients import connect, socket_end
from conftest import scaled, tcp_only

MiB = 1 << 20
STREAMS = scaled(16, 4)          # per direction
STREAM_SIZE = 64 * MiB           # each stream's full length: never reached before the fault
FAULT_AFTER = 1 * MiB            # every stream has moved this much end to end before the fault
IO_CHUNK = 256 * 1024
GET_GOING_S = 20.0               # bound for all streams to reach FAULT_AFTER
SETTLE_S = 5.0                   # bound for every socket to end after the fault
PROMPT_S = 3.0                   # each client must see its end this soon after the fault

PATTERN_LEN = MiB + 4093         # a stream is its seed's pattern, repeated
HDR = struct.Struct("!cxxxIQ")   # mode (b"U" | b"D"), seed, size: the first 16 bytes of a stream


@functools.lru_cache(maxsize=256)
def pattern(seed: int) -> bytes:
    return random.Random(seed).randbytes(PATTERN_LEN)


def stream_bytes(seed: int, offset: int, n: int) -> memoryview:
    """Up to n bytes of stream `seed` from `offset` (fewer at the pattern's end)."""
    start = offset % PATTERN_LEN
    return memoryview(pattern(seed))[start:start + min(n, PATTERN_LEN - start)]


def prefix_sha(seed: int, n: int) -> str:
    """SHA-256 (hex) of the first n bytes of stream `seed`."""
    h = hashlib.sha256()
    off = 0
    for _ in range(n // PATTERN_LEN + 2):
        if off >= n:
            break
        chunk = stream_bytes(seed, off, n - off)
        h.update(chunk)
        off += len(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------
# Target server: one selectors thread, every connection non-blocking


class TargetServer(LoopServer):
    """Serves uploads (hashes what it gets) and downloads (sends the stream the
    header names), one thread for all connections. `reset_after(seed)`, when
    given, makes it reset (SO_LINGER {1, 0}) each connection once it has moved
    that many payload bytes. Each connection is a dict in .conns:
        mode, seed, size, in (payload bytes received), sha (hex, at the end),
        out (payload bytes sent), end ("reset" | "eof" | "server-reset" |
        "error:..." | None while open), t_end (time.monotonic())."""

    def __init__(self, reset_after=None):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(1024)
        self.lsock.setblocking(False)
        self.endpoint = f"tcp:127.0.0.1:{self.lsock.getsockname()[1]}"
        self.reset_after = reset_after
        self.conns: list[dict] = []
        self._socks: dict[socket.socket, dict] = {}
        super().__init__()

    def uploads_past(self, n: int) -> int:
        return sum(1 for c in list(self.conns) if c["mode"] == b"U" and c["in"] >= n)

    def ended(self) -> bool:
        return all(c["end"] is not None for c in list(self.conns))

    def _loop(self):
        sel = selectors.DefaultSelector()
        sel.register(self.lsock, selectors.EVENT_READ, None)
        expires = time.monotonic() + 600
        try:
            while not self._stop.is_set() and time.monotonic() < expires:
                for key, ev in sel.select(timeout=0.05):
                    if key.data is None:
                        self._accept(sel)
                    elif key.data["end"] is None:
                        self._service(sel, key.fileobj, key.data, ev)
        finally:
            for s in list(self._socks):
                self._close(sel, s, self._socks[s], None)
            sel.close()

    def _accept(self, sel):
        for _ in range(256):
            try:
                s, _ = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            s.setblocking(False)
            st = {"mode": None, "seed": None, "size": 0, "hdr": bytearray(), "in": 0,
                  "hash": hashlib.sha256(), "sha": None, "out": 0, "end": None, "t_end": None}
            self._socks[s] = st
            self.conns.append(st)
            sel.register(s, selectors.EVENT_READ, st)

    def _close(self, sel, s, st, end):
        try:
            sel.unregister(s)
        except (KeyError, ValueError):
            pass
        self._socks.pop(s, None)
        if st["end"] is None:
            st["end"] = end
            st["t_end"] = time.monotonic()
            st["sha"] = st["hash"].hexdigest()
        if end == "server-reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()

    def _reset_due(self, st, moved: int) -> bool:
        return self.reset_after is not None and moved >= self.reset_after(st["seed"])

    def _service(self, sel, s, st, ev):
        if ev & selectors.EVENT_READ:
            try:
                data = s.recv(IO_CHUNK)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError as e:
                return self._close(sel, s, st, socket_end(e, "recv"))
            if data == b"":
                return self._close(sel, s, st, "eof")
            if data:
                if st["mode"] is None:
                    st["hdr"] += data
                    if len(st["hdr"]) < HDR.size:
                        return
                    st["mode"], st["seed"], st["size"] = HDR.unpack_from(st["hdr"])
                    data = bytes(st["hdr"][HDR.size:])
                    if st["mode"] == b"D":
                        sel.modify(s, selectors.EVENT_READ | selectors.EVENT_WRITE, st)
                if data:
                    st["in"] += len(data)
                    st["hash"].update(data)
                    if st["mode"] == b"U" and self._reset_due(st, st["in"]):
                        return self._close(sel, s, st, "server-reset")
        if ev & selectors.EVENT_WRITE and st["mode"] == b"D" and st["out"] < st["size"]:
            chunk = stream_bytes(st["seed"], st["out"], min(IO_CHUNK, st["size"] - st["out"]))
            try:
                st["out"] += s.send(chunk)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                return self._close(sel, s, st, socket_end(e, "send"))
            if self._reset_due(st, st["out"]):
                return self._close(sel, s, st, "server-reset")
            if st["out"] >= st["size"]:
                sel.modify(s, selectors.EVENT_READ, st)


# ---------------------------------------------------------------------------
# Clients: all driven from the test's thread


class Client:
    def __init__(self, i: int, mode: bytes, seed: int, addr):
        self.i, self.mode, self.seed = i, mode, seed
        self.sock = connect(addr, timeout=10)
        self.sock.sendall(HDR.pack(mode, seed, STREAM_SIZE))  # 16 bytes: fits any buffer
        self.sock.setblocking(False)
        self.sent = 0          # upload payload bytes handed to the socket
        self.got = 0           # download payload bytes received
        self.hash = hashlib.sha256()
        self.end: str | None = None
        self.t_end: float | None = None

    def events(self) -> int:
        ev = selectors.EVENT_READ
        if self.mode == b"U" and self.sent < STREAM_SIZE:
            ev |= selectors.EVENT_WRITE
        return ev

    def finish(self, sel, end: str):
        self.end, self.t_end = end, time.monotonic()
        sel.unregister(self.sock)

    def service(self, sel, ev: int):
        if ev & selectors.EVENT_READ:
            try:
                data = self.sock.recv(IO_CHUNK)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError as e:
                return self.finish(sel, socket_end(e, "recv"))
            if data == b"":
                complete = self.mode == b"D" and self.got == STREAM_SIZE
                return self.finish(sel, "complete" if complete else "eof")
            if data:
                self.got += len(data)
                self.hash.update(data)
                if self.mode == b"U":
                    raise AssertionError(f"upload client {self.i} received {len(data)} bytes")
        if ev & selectors.EVENT_WRITE and self.mode == b"U" and self.sent < STREAM_SIZE:
            chunk = stream_bytes(self.seed, self.sent, min(IO_CHUNK, STREAM_SIZE - self.sent))
            try:
                self.sent += self.sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                return self.finish(sel, socket_end(e, "send"))
            if self.sent >= STREAM_SIZE:
                sel.modify(self.sock, self.events(), self)


class Run:
    """STREAMS uploads and STREAMS downloads through `addr` to `server`."""

    def __init__(self, addr, server: TargetServer, seed_base: int):
        for s in range(seed_base, seed_base + 2 * STREAMS):
            pattern(s)  # generated before any stream starts
        self.server = server
        self.clients: list[Client] = []
        try:
            for i in range(2 * STREAMS):
                mode = b"U" if i % 2 == 0 else b"D"
                self.clients.append(Client(i, mode, seed_base + i, addr))
        except BaseException:
            self.close()
            raise
        self.t_fault: float | None = None

    def moving(self) -> bool:
        """Every stream has carried FAULT_AFTER bytes end to end."""
        downs = all(c.got >= FAULT_AFTER for c in self.clients if c.mode == b"D")
        return downs and self.server.uploads_past(FAULT_AFTER) == STREAMS

    def drive(self, fault=None):
        """Moves bytes until every stream is moving, then calls fault() once; then
        until every client socket has ended (at most SETTLE_S later). Without
        a fault (the target resets by itself), until every client has ended."""
        sel = selectors.DefaultSelector()
        for c in self.clients:
            sel.register(c.sock, c.events(), c)
        t0 = time.monotonic()
        try:
            for _ in range(10_000_000):
                now = time.monotonic()
                if all(c.end is not None for c in self.clients):
                    break
                if self.t_fault is None:
                    if now - t0 > GET_GOING_S:
                        what = "not all moving" if fault else "not all ended"
                        raise AssertionError(
                            f"streams {what} after {GET_GOING_S}s: {self.progress()}; {self.summary()}")
                elif now - self.t_fault > SETTLE_S:
                    break
                for key, ev in sel.select(timeout=0.02):
                    key.data.service(sel, ev)
                if self.t_fault is None and fault is not None and self.moving():
                    self.t_fault = time.monotonic()
                    fault()
            if fault is None:
                self.t_fault = t0
        finally:
            sel.close()
        # The target side: its connections end too (or SETTLE_S passes).
        deadline = time.monotonic() + SETTLE_S
        for _ in range(1000):
            if self.server.ended() or time.monotonic() > deadline:
                break
            time.sleep(0.02)

    def progress(self) -> str:
        downs = sorted(c.got // 1024 for c in self.clients if c.mode == b"D")
        ups = sorted(c["in"] // 1024 for c in list(self.server.conns) if c["mode"] == b"U")
        return f"download KiB {downs}; upload KiB at the target {ups}"

    def close(self):
        for c in self.clients:
            c.sock.close()

    # -- verdicts ----------------------------------------------------------
    def summary(self) -> str:
        cl = collections.Counter(f"{'up' if c.mode == b'U' else 'down'}:{c.end}" for c in self.clients)
        sv = collections.Counter(f"{'up' if t['mode'] == b'U' else 'down'}:{t['end']}"
                                 for t in list(self.server.conns))
        return f"clients {dict(sorted(cl.items()))}; targets {dict(sorted(sv.items()))}"

    def check_data(self):
        """What each side received is the prefix of what the other sent."""
        assert not self.server.errors, self.server.errors
        by_seed = {t["seed"]: t for t in self.server.conns}
        assert len(by_seed) == 2 * STREAMS, f"the target saw {len(by_seed)} of {2 * STREAMS} streams"
        bad = []
        for c in self.clients:
            t = by_seed[c.seed]
            if c.mode == b"D":
                assert c.got <= t["out"], f"download {c.i}: got {c.got} > sent {t['out']}"
                if c.got >= STREAM_SIZE:
                    bad.append(f"download {c.i} completed before the fault")
                elif c.hash.hexdigest() != prefix_sha(c.seed, c.got):
                    bad.append(f"download {c.i}: the {c.got} bytes received differ (SHA-256)")
            else:
                assert t["sha"] is not None, f"upload {c.i}: target connection still open"
                assert t["in"] <= c.sent, f"upload {c.i}: target got {t['in']} > sent {c.sent}"
                if t["sha"] != prefix_sha(c.seed, t["in"]):
                    bad.append(f"upload {c.i}: the {t['in']} bytes the target got differ (SHA-256)")
        assert not bad, bad

    def check_clients_reset(self):
        late = [(c.i, round(c.t_end - self.t_fault, 2)) for c in self.clients
                if c.end is not None and c.t_end - self.t_fault > PROMPT_S]
        not_reset = [(c.i, "up" if c.mode == b"U" else "down", c.end, c.got or c.sent)
                     for c in self.clients if c.end != "reset"]
        assert not not_reset, (
            f"{len(not_reset)} of {len(self.clients)} client sockets did not end with a reset "
            f"(i, direction, end, bytes): {not_reset[:12]}; {self.summary()}")
        assert not late, f"clients saw their reset late (i, seconds after the fault): {late}"

    def check_targets_reset(self):
        not_reset = [(t["seed"], "up" if t["mode"] == b"U" else "down", t["end"], t["in"] or t["out"])
                     for t in list(self.server.conns) if t["end"] != "reset"]
        assert not not_reset, (
            f"{len(not_reset)} of {len(self.server.conns)} target connections did not end with a "
            f"reset (seed, direction, end, bytes): {not_reset[:12]}; {self.summary()}")


@pytest.fixture
def fleet(pair, backend):
    """fleet(server=None) -> (pair, run): a pair serving one TargetServer, and
    2 x STREAMS streams open through it."""
    runs = []

    def make(server: TargetServer | None = None, seed_base: int = 1000, tunnel: dict | None = None):
        srv = backend(server or TargetServer())
        p = pair([{"name": "io", "target": srv.endpoint}], [srv.endpoint], a_tunnel=tunnel, b_tunnel=tunnel)
        run = Run(p.address("io"), srv, seed_base)
        runs.append(run)
        return p, run

    yield make
    for r in runs:
        r.close()


def kill_tunnel(port: int) -> str:
    """`ss -K` on every established TCP connection to or from the tunnel port."""
    r = subprocess.run(["ss", "-K", "-tn", "state", "established",
                        f"( sport = :{port} or dport = :{port} )"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, f"ss -K failed: {r.stderr}"
    return r.stdout


# ---------------------------------------------------------------------------
# a. The tunnel connection is killed


@tcp_only
@pytest.mark.deadline(60)
def test_without_resumption_tunnel_killed_with_ss_resets_every_client_and_target(fleet):
    # With resumption (the default) the streams survive this: test_resume.py.
    p, run = fleet(seed_base=1000, tunnel={"resume_timeout_ms": 0})
    killed = []
    run.drive(fault=lambda: killed.append(kill_tunnel(p.b.tunnel_port)))
    print(f"ss -K: {killed[0].strip()}\n{run.summary()}")
    assert len(killed[0].strip().splitlines()) >= 2, (
        f"ss -K killed no tunnel connection (kernel without INET_DIAG_DESTROY?): {killed[0]!r}")
    run.check_clients_reset()
    run.check_targets_reset()
    run.check_data()
    assert p.a.running() and p.b.running(), "an rdmagw died when its tunnel was cut"


# ---------------------------------------------------------------------------
# b, d. The far rdmagw is SIGKILLed


@pytest.mark.deadline(60)
def test_far_rdmagw_sigkill_resets_every_client(fleet):
    # A refused redial resets at once; where the transport cannot tell (an RDMA
    # connect that times out), resume_timeout_ms bounds the wait.
    p, run = fleet(seed_base=2000, tunnel={"resume_timeout_ms": 1500})
    run.drive(fault=p.b.kill9)
    print(run.summary())
    assert p.b.proc.returncode == -9
    run.check_clients_reset()
    run.check_data()
    assert p.a.running(), "host-a died with its peer"


@pytest.mark.deadline(60)
def test_far_rdmagw_sigkill_resets_every_target_connection(fleet):
    """host-b holds the target connections: when it dies, the kernel closes
    them. Only SO_LINGER {1, 0}, set before, makes that a reset."""
    # A refused redial resets at once; where the transport cannot tell (an RDMA
    # connect that times out), resume_timeout_ms bounds the wait.
    p, run = fleet(seed_base=3000, tunnel={"resume_timeout_ms": 1500})
    run.drive(fault=p.b.kill9)
    print(run.summary())
    run.check_targets_reset()
    run.check_data()


# ---------------------------------------------------------------------------
# c. The local rdmagw (the one the clients connect to) is SIGKILLed


@pytest.mark.deadline(60)
def test_local_rdmagw_sigkill_resets_every_client_and_target(fleet):
    """host-a holds the client connections: when it dies, the kernel closes
    them. A download client must see a reset, not EOF after a partial read.
    host-b cannot tell a dead dialer from a broken transport: it keeps the
    streams for resume_timeout_ms, then resets them (within SETTLE_S)."""
    p, run = fleet(seed_base=4000, tunnel={"resume_timeout_ms": 1500})
    run.drive(fault=p.a.kill9)
    print(run.summary())
    assert p.a.proc.returncode == -9
    run.check_clients_reset()
    run.check_targets_reset()
    run.check_data()
    assert p.b.running(), "host-b died with its peer"


# ---------------------------------------------------------------------------
# e. The target resets each connection mid-transfer


@pytest.mark.deadline(60)
def test_target_reset_mid_transfer_resets_every_client(fleet):
    # Each connection is reset at its own point between 1 and 3 MiB.
    srv = TargetServer(reset_after=lambda seed: FAULT_AFTER + (seed % 32) * 64 * 1024)
    p, run = fleet(srv, seed_base=5000)
    run.drive(fault=None)
    print(run.summary())
    ends = collections.Counter(t["end"] for t in srv.conns)
    assert ends == {"server-reset": 2 * STREAMS}, f"the target did not reset every stream: {ends}"
    run.t_fault = max(t["t_end"] for t in srv.conns)
    run.check_clients_reset()
    run.check_data()
    assert p.a.running() and p.b.running()
