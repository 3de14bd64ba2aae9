# SPDX-License-Identifier: Apache-2.0
"""Backend servers for the rdmagw integration tests.

Every server listens on loopback TCP (127.0.0.1, port chosen by the kernel) or
on a Unix socket path, runs in daemon threads, applies a timeout to every
socket operation, and is torn down with stop().  Each exposes:

    .endpoint   the rdmagw endpoint text ("tcp:127.0.0.1:PORT" / "unix:PATH")
    .address    what socket.connect() takes (tuple or path)
    .family     AF_INET or AF_UNIX
"""

from __future__ import annotations

import hashlib
import os
import queue
import random
import selectors
import socket
import struct
import threading
import time
from pathlib import Path

MiB = 1 << 20
SOCK_TIMEOUT = 30.0  # default timeout for blocking backend socket operations
MAX_LIFETIME = 900.0  # no server loop runs longer than this unless told (lifetime_s), even if never stopped


# ---------------------------------------------------------------------------
# Deterministic pseudo-random data


def prng_chunks(seed: int, total: int, chunk: int = MiB):
    """Yields `total` bytes of pseudo-random data from `seed`, `chunk` at a time."""
    rng = random.Random(seed)
    left = total
    while left > 0:
        n = min(chunk, left)
        yield rng.randbytes(n)
        left -= n


def prng_bytes(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def sha256_of_prng(seed: int, total: int) -> str:
    h = hashlib.sha256()
    for c in prng_chunks(seed, total):
        h.update(c)
    return h.hexdigest()


# ---------------------------------------------------------------------------
# Base classes


class LoopServer:
    """A listening socket (`lsock`) served by one daemon thread that runs the
    subclass's `_loop()` until `_stop` is set (start() starts it, stop() ends
    it and closes `lsock`). For servers that drive every socket from that one
    thread, non-blocking (selectors), so that a reset is seen by the one call
    that meets it (see test_crash_resets.py). An exception out of `_loop()`
    lands in `.errors`, which the tests check, not in a stray thread
    traceback. The subclass makes `lsock`, then calls this __init__."""

    def __init__(self):
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=type(self).__name__, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)
        self.lsock.close()

    def _guarded(self):
        try:
            self._loop()
        except Exception as e:  # surfaced by the tests through .errors
            self.errors.append(f"{type(e).__name__}: {e}")

    def _loop(self):  # pragma: no cover - overridden
        raise NotImplementedError


class _Server:
    """A listening socket plus an accept loop in a daemon thread."""

    def _wait_released(self, released: threading.Event) -> None:
        """Bounded wait for `released` (or stop): at most 10 minutes, checked every 0.1 s."""
        for _ in range(6000):
            if released.wait(0.1) or self._stop.is_set():
                return

    def __init__(self, unix_path: str | None = None, backlog: int = 4096, lifetime_s: float = MAX_LIFETIME):
        if unix_path is None:
            self.family = socket.AF_INET
            self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.lsock.bind(("127.0.0.1", 0))
            self.address = self.lsock.getsockname()
            self.endpoint = f"tcp:127.0.0.1:{self.address[1]}"
            self.port = self.address[1]
        else:
            self.family = socket.AF_UNIX
            if os.path.exists(unix_path):
                os.unlink(unix_path)
            self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.lsock.bind(unix_path)
            self.address = unix_path
            self.endpoint = f"unix:{unix_path}"
            self.port = None
        self.unix_path = unix_path
        self.lsock.listen(backlog)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.accepted = 0
        self.errors: list[str] = []
        self._expires = time.monotonic() + lifetime_s

    def _running(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._expires

    # -- lifecycle ---------------------------------------------------------
    def start(self):
        t = threading.Thread(target=self._accept_loop, name=f"{type(self).__name__}-accept",
                             daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def _accept_loop(self):
        self.lsock.settimeout(0.2)
        while self._running():
            try:
                conn, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)
                continue
            conn.settimeout(SOCK_TIMEOUT)
            with self._lock:
                self.accepted += 1
                self._conns.add(conn)
            t = threading.Thread(target=self._run_conn, args=(conn,),
                                 name=f"{type(self).__name__}-conn", daemon=True)
            t.start()
            self._threads.append(t)

    def _run_conn(self, conn: socket.socket):
        try:
            self.handle(conn)
        except Exception as e:  # recorded, surfaced by the tests that care
            self.errors.append(f"{type(e).__name__}: {e}")
        finally:
            with self._lock:
                self._conns.discard(conn)
            try:
                conn.close()
            except OSError:
                pass

    def handle(self, conn: socket.socket):  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self):
        self._stop.set()
        try:
            self.lsock.close()
        except OSError:
            pass
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.close()
            except OSError:
                pass
        deadline = time.monotonic() + 5
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.unix_path and os.path.exists(self.unix_path):
            try:
                os.unlink(self.unix_path)
            except OSError:
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------
# Echo server: one selectors loop, many concurrent connections


class EchoServer(_Server):
    """Echoes every byte back until EOF, then half-closes (SHUT_WR) and closes.

    A single thread multiplexes all connections with selectors, so a thousand
    concurrent connections cost a thousand fds and no threads.  A connection
    stops being read while 1 MiB of echo is pending (backpressure).
    """

    MAX_PENDING = MiB

    def __init__(self, unix_path: str | None = None, lifetime_s: float = MAX_LIFETIME):
        super().__init__(unix_path, lifetime_s=lifetime_s)
        self.completed = 0  # connections that reached EOF and were half-closed
        self.bytes_echoed = 0

    def start(self):
        t = threading.Thread(target=self._loop_guarded, name="EchoServer", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self):
        # The loop owns its sockets: let it close them, then close the listener.
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        super().stop()

    def _loop_guarded(self):
        try:
            self._loop()
        except Exception as e:  # surfaced through .errors, never a stray thread exception
            self.errors.append(f"echo loop: {type(e).__name__}: {e}")

    def _loop(self):
        sel = selectors.DefaultSelector()
        self.lsock.setblocking(False)
        sel.register(self.lsock, selectors.EVENT_READ, None)
        state: dict[socket.socket, dict] = {}

        def update(conn, st):
            ev = 0
            if not st["eof"] and len(st["out"]) < self.MAX_PENDING:
                ev |= selectors.EVENT_READ
            if st["out"]:
                ev |= selectors.EVENT_WRITE
            if ev == 0:
                if st["eof"]:
                    finish(conn)
                return
            if ev != st["ev"]:
                sel.modify(conn, ev, st)
                st["ev"] = ev

        def finish(conn, half_close=True):
            st = state.pop(conn, None)
            if st is None:
                return
            try:
                sel.unregister(conn)
            except (KeyError, ValueError):
                pass
            if half_close:
                try:
                    conn.shutdown(socket.SHUT_WR)
                    self.completed += 1
                except OSError:
                    pass
            with self._lock:
                self._conns.discard(conn)
            conn.close()

        try:
            while self._running():
                for key, ev in sel.select(timeout=0.2):
                    if key.data is None:
                        for _ in range(256):  # bounded accept burst
                            try:
                                conn, _ = self.lsock.accept()
                            except (BlockingIOError, InterruptedError):
                                break
                            except OSError:
                                break
                            conn.setblocking(False)
                            st = {"out": bytearray(), "eof": False, "ev": selectors.EVENT_READ}
                            state[conn] = st
                            with self._lock:
                                self.accepted += 1
                                self._conns.add(conn)
                            sel.register(conn, selectors.EVENT_READ, st)
                        continue
                    conn, st = key.fileobj, key.data
                    if conn not in state:
                        continue
                    try:
                        if ev & selectors.EVENT_READ:
                            data = conn.recv(256 * 1024)
                            if data:
                                st["out"] += data
                            else:
                                st["eof"] = True
                        if ev & selectors.EVENT_WRITE and st["out"]:
                            n = conn.send(st["out"])
                            self.bytes_echoed += n
                            del st["out"][:n]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        finish(conn, half_close=False)
                        continue
                    update(conn, st)
        finally:
            for conn in list(state):
                finish(conn, half_close=False)
            sel.close()


# ---------------------------------------------------------------------------
# SHA-256 sink / source


class Sha256Server(_Server):
    """Hashes everything it receives; sends pseudo-random data of its own.

    mode "duplex": while receiving, a second thread sends `send_size` bytes from
        PRNG(`send_seed`); after EOF and after its own send it half-closes.
    mode "reply_after_eof": reads to EOF, then sends the 32-byte SHA-256 digest
        of what it got followed by `send_size` bytes from PRNG(`send_seed`),
        then half-closes.

    Each finished connection puts a dict on .results:
        recv_bytes, recv_sha (hex), sent_bytes, sent_sha (hex), error
    """

    def __init__(self, send_size: int = 0, send_seed: int = 0, mode: str = "duplex",
                 unix_path: str | None = None, io_timeout: float = SOCK_TIMEOUT):
        super().__init__(unix_path)
        assert mode in ("duplex", "reply_after_eof")
        self.send_size = send_size
        self.send_seed = send_seed
        self.mode = mode
        self.io_timeout = io_timeout
        self.results: queue.Queue = queue.Queue()

    def _send_stream(self, conn, out: dict):
        h = hashlib.sha256()
        sent = 0
        try:
            for chunk in prng_chunks(self.send_seed, self.send_size):
                conn.sendall(chunk)  # conn has a timeout
                h.update(chunk)
                sent += len(chunk)
        except Exception as e:
            out["error"] = f"send: {type(e).__name__}: {e}"
        out["sent_bytes"] = sent
        out["sent_sha"] = h.hexdigest()

    def handle(self, conn):
        conn.settimeout(self.io_timeout)
        res = {"recv_bytes": 0, "recv_sha": None, "sent_bytes": 0, "sent_sha": None,
               "error": None}
        sender = None
        if self.mode == "duplex":
            sender = threading.Thread(target=self._send_stream, args=(conn, res), daemon=True)
            sender.start()
        h = hashlib.sha256()
        got = 0
        buf = bytearray(MiB)
        try:
            for _ in range(1 << 24):  # bounded: far more than 16 TiB / 1 MiB
                n = conn.recv_into(buf)
                if n == 0:
                    break
                h.update(memoryview(buf)[:n])
                got += n
        except Exception as e:
            res["error"] = f"recv: {type(e).__name__}: {e}"
        res["recv_bytes"] = got
        res["recv_sha"] = h.hexdigest()
        if sender is not None:
            sender.join(timeout=self.io_timeout * 4)
        elif res["error"] is None:
            hs = hashlib.sha256()
            sent = 0
            try:
                conn.sendall(h.digest())
                for chunk in prng_chunks(self.send_seed, self.send_size):
                    conn.sendall(chunk)
                    hs.update(chunk)
                    sent += len(chunk)
            except Exception as e:
                res["error"] = f"reply: {type(e).__name__}: {e}"
            res["sent_bytes"] = sent
            res["sent_sha"] = hs.hexdigest()
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.results.put(res)


# ---------------------------------------------------------------------------
# A server that does not read until told to


class StallServer(_Server):
    """Accepts and does not read a byte until release() is called; then reads
    everything to EOF, hashing it, and puts {recv_bytes, recv_sha, error} on
    .results."""

    def __init__(self, unix_path: str | None = None, io_timeout: float = SOCK_TIMEOUT):
        super().__init__(unix_path)
        self.released = threading.Event()
        self.connected = threading.Event()
        self.io_timeout = io_timeout
        self.results: queue.Queue = queue.Queue()

    def release(self):
        self.released.set()

    def handle(self, conn):
        self.connected.set()
        self._wait_released(self.released)
        res = {"recv_bytes": 0, "recv_sha": None, "error": None}
        h = hashlib.sha256()
        got = 0
        buf = bytearray(MiB)
        conn.settimeout(self.io_timeout)
        try:
            for _ in range(1 << 24):
                n = conn.recv_into(buf)
                if n == 0:
                    break
                h.update(memoryview(buf)[:n])
                got += n
        except Exception as e:
            res["error"] = f"{type(e).__name__}: {e}"
        res["recv_bytes"] = got
        res["recv_sha"] = h.hexdigest()
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.results.put(res)


# ---------------------------------------------------------------------------
# A server that reads everything, then echoes it when told to


class HoldEchoServer(_Server):
    """Reads each connection to EOF (counted in .eof_count), waits for
    release(), then sends back what it read and closes: the replies of every
    connection can be made to leave at one chosen moment."""

    def __init__(self, unix_path: str | None = None):
        super().__init__(unix_path)
        self.released = threading.Event()
        self.eof_count = 0

    def release(self):
        self.released.set()

    def handle(self, conn):
        data = bytearray()
        for _ in range(1 << 20):
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        with self._lock:
            self.eof_count += 1
        self._wait_released(self.released)
        conn.sendall(bytes(data))
        conn.shutdown(socket.SHUT_WR)


# ---------------------------------------------------------------------------
# A server that resets every connection


class ResetServer(_Server):
    """Accepts, waits for the first bytes (at most `wait_first` seconds), then
    closes with SO_LINGER {on, 0} so the kernel sends RST."""

    def __init__(self, unix_path: str | None = None, wait_first: float = 2.0):
        super().__init__(unix_path)
        self.wait_first = wait_first
        self.reset_count = 0
        self.got_bytes = 0

    def handle(self, conn):
        if self.wait_first > 0:
            conn.settimeout(self.wait_first)
            try:
                data = conn.recv(65536)
                self.got_bytes += len(data)
            except OSError:
                pass
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
        self.reset_count += 1


def nginx_config(work, http: str, worker_connections: int = 1024) -> Path:
    """An nginx.conf in `work` that runs in the foreground, one process, with
    its pid, error log and temporary files there; `http` is the body of its
    http block (servers, logs). Returns the file's path."""
    conf = Path(work) / "nginx.conf"
    (Path(work) / "tmp").mkdir(exist_ok=True)
    conf.write_text(f"""daemon off;
master_process off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx.err warn;
events {{ worker_connections {worker_connections}; }}
http {{
    client_body_temp_path {work}/tmp;
    proxy_temp_path {work}/tmp;
    fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp;
    scgi_temp_path {work}/tmp;
{http}
}}
""")
    return conf
