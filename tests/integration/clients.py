# SPDX-License-Identifier: Apache-2.0
"""Client-side socket helpers for the rdmagw integration tests.

Every operation is bounded: sockets always carry a timeout and every loop has
both a count limit and an absolute deadline (time.monotonic()).
"""

from __future__ import annotations

import errno
import os
import random
import selectors
import shutil
import socket
import time
from pathlib import Path

MiB = 1 << 20

# Errors that mean "the peer reset / aborted the connection".
RESET_ERRORS = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


def connect(address, timeout: float = 5.0) -> socket.socket:
    """Connects to ("127.0.0.1", port) or to a Unix socket path."""
    if isinstance(address, (str, bytes)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        assert address[0] == "127.0.0.1", f"tests only talk to loopback, not {address!r}"
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(address)
    except BaseException:
        s.close()
        raise
    return s


def send_all(sock: socket.socket, data, deadline: float) -> None:
    """sendall() bounded by an absolute deadline (time.monotonic())."""
    view = memoryview(data)
    for _ in range(1 << 30):
        if not view:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("send_all: deadline passed")
        sock.settimeout(min(left, 30.0))
        n = sock.send(view)
        view = view[n:]


def recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    out = bytearray()
    for _ in range(1 << 30):
        if len(out) >= n:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"recv_exact: got {len(out)} of {n} bytes before the deadline")
        sock.settimeout(min(left, 30.0))
        chunk = sock.recv(min(n - len(out), MiB))
        if not chunk:
            raise EOFError(f"recv_exact: EOF after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def recv_to_eof(sock: socket.socket, deadline: float, limit: int = 1 << 34) -> bytes:
    out = bytearray()
    for _ in range(1 << 30):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"recv_to_eof: no EOF before the deadline ({len(out)} bytes read)")
        sock.settimeout(min(left, 30.0))
        chunk = sock.recv(MiB)
        if not chunk:
            return bytes(out)
        out += chunk
        if len(out) > limit:
            raise AssertionError(f"recv_to_eof: more than {limit} bytes")
    raise AssertionError("recv_to_eof: loop bound reached")


def echo_roundtrip(address, payload: bytes, timeout: float = 5.0) -> bytes:
    """Connects, sends `payload`, reads the same number of bytes back, closes."""
    deadline = time.monotonic() + timeout
    s = connect(address, timeout=timeout)
    try:
        send_all(s, payload, deadline)
        return recv_exact(s, len(payload), deadline)
    finally:
        s.close()


def echo_concurrently(address, payloads, deadline: float, read_bytes_per_turn: int = 256 * 1024,
                      turn_pause: float = 0.0) -> list[bytes]:
    """Opens one connection per payload (all of them before any byte moves,
    so that all are open at once), then drives every socket from this
    thread, non-blocking: sends its payload, half-closes, reads the echo to
    EOF. Returns what each received. A reset, an EOF before the payload was
    all sent, more bytes than were sent or the deadline fails the test.
    `turn_pause` with a small `read_bytes_per_turn` makes a slow reader."""
    conns = []
    sel = selectors.DefaultSelector()
    try:
        for i, payload in enumerate(payloads):
            assert time.monotonic() < deadline, f"only {i} connections opened in time"
            s = connect(address, timeout=10)
            s.setblocking(False)
            conns.append({"sock": s, "out": memoryview(payload), "sent": len(payload), "in": bytearray(),
                          "wr_done": False, "i": i})
        for c in conns:
            sel.register(c["sock"], selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        open_count = len(conns)
        for _ in range(10_000_000):
            if open_count == 0:
                break
            assert time.monotonic() < deadline, f"{open_count} of {len(conns)} streams unfinished at the deadline"
            for key, ev in sel.select(timeout=1.0):
                c = key.data
                s = c["sock"]
                if ev & selectors.EVENT_WRITE and not c["wr_done"]:
                    try:
                        n = s.send(c["out"][:256 * 1024])
                        c["out"] = c["out"][n:]
                    except (BlockingIOError, InterruptedError):
                        pass
                    if not c["out"]:
                        c["wr_done"] = True
                        s.shutdown(socket.SHUT_WR)
                        sel.modify(s, selectors.EVENT_READ, c)
                if ev & selectors.EVENT_READ:
                    try:
                        data = s.recv(read_bytes_per_turn)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except RESET_ERRORS as e:
                        raise AssertionError(f"stream {c['i']} reset: {e}") from None
                    if data:
                        c["in"] += data
                        assert len(c["in"]) <= c["sent"], f"stream {c['i']}: too many bytes"
                    else:
                        assert c["wr_done"], f"stream {c['i']}: EOF before all was sent"
                        sel.unregister(s)
                        open_count -= 1
            if turn_pause:
                time.sleep(turn_pause)
        return [bytes(c["in"]) for c in conns]
    finally:
        sel.close()
        for c in conns:
            c["sock"].close()


def wait_closed(sock: socket.socket, timeout: float, max_bytes: int = 64 * MiB):
    """Reads (and discards) until the peer closes.  Returns ("eof" | "reset", seconds
    waited, bytes discarded).  Raises TimeoutError if the socket stays open."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    got = 0
    for _ in range(1 << 20):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except RESET_ERRORS:
            return "reset", time.monotonic() - t0, got
        except OSError as e:
            if e.errno in (errno.ECONNRESET, errno.EPIPE, errno.ECONNREFUSED):
                return "reset", time.monotonic() - t0, got
            raise
        if not chunk:
            return "eof", time.monotonic() - t0, got
        got += len(chunk)
        if got > max_bytes:
            raise AssertionError(f"wait_closed: peer sent more than {max_bytes} bytes")
    raise TimeoutError(f"socket still open after {timeout:.1f}s ({got} bytes read)")


def how_stream_ends(address, data: bytes, timeout: float) -> str:
    """How a stream through `address` ends that the far side will not carry:
    connects, sends `data`, waits up to `timeout` s for the close; "reset" or
    "eof". The reset may come before the connect has returned or while it
    sends (a refusal is that quick when the session is open): that is a
    reset too."""
    try:
        s = connect(address, timeout=10)
    except RESET_ERRORS:
        return "reset"
    try:
        s.sendall(data)
        how, _, _ = wait_closed(s, timeout=timeout)
    except RESET_ERRORS:
        how = "reset"
    finally:
        s.close()
    return how


def try_send(sock: socket.socket, data: bytes) -> str | None:
    """Sends `data`; returns None if it went out, "reset" if the connection was
    already reset/closed by the peer."""
    try:
        sock.sendall(data)
        return None
    except RESET_ERRORS:
        return "reset"


# ---------------------------------------------------------------------------
# Ports


_handed_out: set[int] = set()
_rng = random.Random(os.getpid() ^ int(time.time()))


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port() -> int:
    """A loopback TCP port that nobody is bound to.  Prefers ports below the
    kernel's ephemeral range, so an outgoing connection's source port cannot
    take it between now and the moment a sidecar binds it."""
    lo, _ = _ephemeral_range()
    if lo > 12000:
        for _ in range(200):
            p = _rng.randrange(10000, lo)
            if p not in _handed_out and _bindable(p):
                _handed_out.add(p)
                return p
    for _ in range(200):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p not in _handed_out:
            _handed_out.add(p)
            return p
    raise RuntimeError("no free port found")


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    """Polls `predicate` every 50 ms until it returns something true (which is
    returned); fails the test after `timeout` seconds naming `what`."""
    deadline = time.monotonic() + timeout
    for _ in range(100000):
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def socket_end(e: OSError, op: str) -> str:
    """How a connection ended, from the error `op` ("recv" | "send") got:
    "reset" for ECONNRESET; "eof" for EPIPE from send (a FIN came first, the
    reset only after it); otherwise "error:NAME"."""
    if e.errno == errno.ECONNRESET:
        return "reset"
    if e.errno == errno.EPIPE and op == "send":
        return "eof"
    return f"error:{errno.errorcode.get(e.errno, e.errno)}"


def require_root_and(tools, what: str) -> None:
    """Skips a test that needs root and `tools` where they are missing; under
    CI as root a missing tool is a failure (tools/dev/install-deps installs them)."""
    import pytest  # only the tests that call this need it

    missing = [t for t in tools if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        why = "needs root" if os.geteuid() != 0 else f"needs {', '.join(missing)}"
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail(f"{what} {why} (tools/dev/install-deps installs them)")
        pytest.skip(why)
