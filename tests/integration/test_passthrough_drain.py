# SPDX-License-Identifier: Apache-2.0
"""SIGTERM and passthrough connections (transparent listener, route action
passthrough): they drain like tunnelled streams (docs/configuration.md,
`shutdown_timeout_ms`: "On SIGTERM, how long open streams may drain before
they are closed"; README: open streams get shutdown_timeout_ms to finish,
then rdmagw exits 0; a second signal stops at once).

  - one that finishes during the drain ends cleanly, and rdmagw exits 0 at
    once, well before a long shutdown_timeout_ms;
  - one still open when shutdown_timeout_ms expires is reset, on both of its
    sockets, at that moment, and rdmagw exits 0 right after;
  - a second signal resets it at once.

Host A and host B are network namespaces joined by a veth pair (made here,
deleted after). In host A, tools/rdmagw-iptables redirects the client's
connection to rdmagw A (running as nobody, whose own connections are not
redirected), which connects straight to the server in host B. The client and
the server are sockets of this process, made inside the namespaces (setns);
each is driven from one thread, non-blocking, so reset and EOF are told apart
exactly (see test_crash_resets.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from backends import LoopServer
from clients import require_root_and, socket_end, wait_for
from conftest import key_file, REPO, RDMAGW_BIN
from netns_hosts import run, two_hosts

A_IP, B_IP, NET = "10.202.0.1", "10.202.0.2", "10.202.0.0/24"  # only inside this test's namespaces
PORT = 9000
NOBODY = 65534
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def in_netns(name: str):
    """This thread inside network namespace `name`; sockets made here stay there."""
    with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{name}") as there:
        if _libc.setns(there.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
        try:
            yield
        finally:
            if _libc.setns(home.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back home")


class EchoServer(LoopServer):
    """In host B: echoes, half-closes after the client's EOF; records how each
    connection ended ("eof", "reset", ...) and when."""

    def __init__(self, ns: str):
        with in_netns(ns):
            self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.lsock.bind((B_IP, PORT))
            self.lsock.listen(16)
        self.lsock.setblocking(False)
        self.conns: list[dict] = []
        super().__init__()
        self.start()

    def _loop(self):
        sel = selectors.DefaultSelector()
        sel.register(self.lsock, selectors.EVENT_READ, None)
        socks = {}

        def finish(s, st, end):
            sel.unregister(s)
            socks.pop(s, None)
            st["end"], st["t_end"] = end, time.monotonic()
            s.close()

        expires = time.monotonic() + 120
        try:
            while not self._stop.is_set() and time.monotonic() < expires:
                for key, ev in sel.select(timeout=0.05):
                    if key.data is None:
                        try:
                            s, _ = self.lsock.accept()
                        except BlockingIOError:
                            continue
                        s.setblocking(False)
                        st = {"in": 0, "out": bytearray(), "eof": False, "end": None, "t_end": None}
                        socks[s] = st
                        self.conns.append(st)
                        sel.register(s, selectors.EVENT_READ, st)
                        continue
                    s, st = key.fileobj, key.data
                    if ev & selectors.EVENT_READ and not st["eof"]:
                        try:
                            data = s.recv(65536)
                        except BlockingIOError:
                            data = None
                        except OSError as e:
                            finish(s, st, socket_end(e, "recv"))
                            continue
                        if data == b"":
                            st["eof"] = True
                        elif data:
                            st["in"] += len(data)
                            st["out"] += data
                    if ev & selectors.EVENT_WRITE and st["out"]:
                        try:
                            del st["out"][:s.send(st["out"])]
                        except BlockingIOError:
                            pass
                        except OSError as e:
                            finish(s, st, socket_end(e, "send"))
                            continue
                    if st["eof"] and not st["out"]:
                        s.shutdown(socket.SHUT_WR)
                        finish(s, st, "eof")
                        continue
                    want = (0 if st["eof"] else selectors.EVENT_READ) | (
                        selectors.EVENT_WRITE if st["out"] else 0)
                    sel.modify(s, want, st)
        finally:
            for s in list(socks):
                s.close()
            sel.close()


class HostA:
    """rdmagw A in its namespace, as nobody, with a transparent listener whose
    only route is passthrough to the server in host B."""

    def __init__(self, ns: str, work: Path, shutdown_timeout_ms: int, binary: str = RDMAGW_BIN):
        self.ns = ns
        self.log_path = work / "a.log"
        config = work / "a.yaml"
        config.write_text(f"""node: host-a
workers: 1
log_level: debug
admin: "127.0.0.1:9901"
tunnel: {{address: "{A_IP}", tcp_port: 7471, transport: tcp, auth: {{mode: psk, key_files: [{key_file("fleet-nobody", content=open(key_file()).read(), uid=NOBODY)}]}}}}
listeners:
  - name: outbound
    listen: "transparent:127.0.0.1:15001"
    routes:
      - match: "{B_IP}:{PORT}"
        action: passthrough
shutdown_timeout_ms: {shutdown_timeout_ms}
""")
        os.chmod(config, 0o644)
        self._log = open(self.log_path, "w")
        # `ip netns exec` and setpriv exec: the pid is rdmagw's own.
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
             "--clear-groups", binary, "--config", str(config)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while "event=ready" not in self.log():
            assert self.proc.poll() is None, f"rdmagw A exited {self.proc.returncode}:\n{self.log()}"
            assert time.monotonic() < deadline, f"rdmagw A not ready:\n{self.log()}"
            time.sleep(0.05)
        run("ip", "netns", "exec", ns, str(REPO / "tools" / "rdmagw-iptables"), "install",
            "--uid", str(NOBODY), "--capture", NET, "--redirect-port", "15001")

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self._log.close()


@pytest.fixture
def hosts():
    """(namespace A, namespace B), joined by a veth pair; deleted after."""
    require_root_and(("ip", "iptables", "setpriv"), "passthrough drain test")
    with two_hosts(A_IP, B_IP, 24) as h:
        yield h.a, h.b


@pytest.fixture
def passthrough(hosts):
    """passthrough(shutdown_timeout_ms) -> (rdmagw A, server in B, client socket
    through a passthrough connection that has carried one round trip)."""
    a_ns, b_ns = hosts
    work = Path(tempfile.mkdtemp(prefix="rdmagw-ptd-"))
    os.chmod(work, 0o755)  # rdmagw A runs as nobody and must read its config
    made = []

    def make(shutdown_timeout_ms: int):
        server = EchoServer(b_ns)
        made.append(server)
        a = HostA(a_ns, work, shutdown_timeout_ms)
        made.append(a)
        with in_netns(a_ns):
            client = socket.create_connection((B_IP, PORT), timeout=5)
        made.append(client)
        client.sendall(b"hello")
        got = b""
        for _ in range(10):
            got += client.recv(64)
            if len(got) >= 5:
                break
        assert got == b"hello", f"no echo through the passthrough connection: {got!r}"
        assert "event=passthrough_open" in a.log(), a.log()
        assert len(server.conns) == 1 and server.conns[0]["end"] is None
        client.setblocking(False)
        return a, server, client

    yield make
    for m in reversed(made):
        if isinstance(m, socket.socket):
            m.close()
        else:
            m.stop()
    shutil.rmtree(work, ignore_errors=True)


def watch(client: socket.socket, until: float, send: bytes = b"", half_close: bool = False):
    """Drives the client from this thread until it ends or `until` passes:
    sends `send`, then (half_close) shuts its write side; reads all along.
    Returns (end, t_end, bytes read): end "reset" | "eof" | "error:..." | None."""
    sel = selectors.DefaultSelector()
    out = memoryview(send)
    shut = False
    got = 0
    sel.register(client, selectors.EVENT_READ | (selectors.EVENT_WRITE if out or half_close else 0))
    try:
        for _ in range(1_000_000):
            if time.monotonic() >= until:
                return None, None, got
            for _key, ev in sel.select(timeout=0.02):
                if ev & selectors.EVENT_READ:
                    try:
                        data = client.recv(65536)
                    except BlockingIOError:
                        data = None
                    except OSError as e:
                        return socket_end(e, "recv"), time.monotonic(), got
                    if data == b"":
                        return "eof", time.monotonic(), got
                    if data:
                        got += len(data)
                if ev & selectors.EVENT_WRITE:
                    try:
                        if out:
                            out = out[client.send(out):]
                        if not out and half_close and not shut:
                            client.shutdown(socket.SHUT_WR)
                            shut = True
                    except BlockingIOError:
                        pass
                    except OSError as e:
                        return socket_end(e, "send"), time.monotonic(), got
                    if not out and (shut or not half_close):
                        sel.modify(client, selectors.EVENT_READ)
        return None, None, got
    finally:
        sel.close()


def wait_log(a: HostA, needle: str, until: float) -> bool:
    for _ in range(10_000):
        if needle in a.log():
            return True
        if time.monotonic() >= until:
            return False
        time.sleep(0.02)
    return False


def wait_exit(a: HostA, until: float):
    try:
        return a.proc.wait(timeout=max(0.0, until - time.monotonic())), time.monotonic()
    except subprocess.TimeoutExpired:
        return None, None


@pytest.mark.deadline(60)
def test_passthrough_finishing_during_drain_lets_rdmagw_exit_at_once(passthrough):
    a, server, client = passthrough(shutdown_timeout_ms=20000)
    t_sig = time.monotonic()
    a.proc.send_signal(signal.SIGTERM)
    assert wait_log(a, "event=drain_started", t_sig + 5), f"no drain started:\n{a.log()}"
    # The connection stays open through a second of the drain, and rdmagw
    # with it; then it carries more bytes and finishes.
    end, _, got = watch(client, time.monotonic() + 1.0)
    assert end is None and got == 0, f"the passthrough connection ended early: {end}"
    assert a.proc.poll() is None, f"rdmagw A exited {a.proc.returncode} with a connection open"
    payload = os.urandom(256 * 1024)
    end, t_end, got = watch(client, t_sig + 10, send=payload, half_close=True)
    assert end == "eof" and got == len(payload), (
        f"a passthrough connection that finished during the drain ended with {end} "
        f"after {got} of {len(payload)} echoed bytes")
    rc, t_exit = wait_exit(a, t_sig + 10)
    assert rc == 0, f"rdmagw A exit code {rc} (None: still running 10 s after SIGTERM)\n{a.log()[-3000:]}"
    print(f"connection done {t_end - t_sig:.2f}s after SIGTERM, rdmagw A exited at {t_exit - t_sig:.2f}s")
    assert t_exit - t_end < 1.5, f"rdmagw A exited {t_exit - t_end:.2f}s after its last connection ended"
    # The server's thread records the end after its shutdown(), which the
    # client may see first.
    wait_for(lambda: server.conns[0]["end"] is not None, timeout=5, what="the server side's end")
    assert server.conns[0]["end"] == "eof", server.conns[0]["end"]


@pytest.mark.deadline(60)
def test_open_passthrough_is_reset_when_drain_times_out_and_rdmagw_exits_0(passthrough):
    """THIS FAILS TODAY: nothing ends a DirectPipe at the drain deadline; rdmagw
    stops 2 s later and the kernel closes its sockets (FIN without SO_LINGER
    armed, RST with it), so the reset comes late or never."""
    timeout_s = 1.5
    a, server, client = passthrough(shutdown_timeout_ms=int(timeout_s * 1000))
    t_sig = time.monotonic()
    a.proc.send_signal(signal.SIGTERM)
    end, t_end, _ = watch(client, t_sig + timeout_s + 8)
    rc, t_exit = wait_exit(a, t_sig + timeout_s + 8)
    when = f"{t_end - t_sig:.2f}s after SIGTERM" if t_end else "never"
    print(f"client: {end} {when}; server: {server.conns[0]['end']}; rdmagw A exit {rc} "
          f"at {(t_exit - t_sig) if t_exit else float('nan'):.2f}s")
    assert end == "reset", (f"the open passthrough client saw {end} ({when}), not a reset, "
                            f"with shutdown_timeout_ms={int(timeout_s * 1000)}")
    assert timeout_s - 0.2 <= t_end - t_sig <= timeout_s + 1.0, (
        f"the reset came {t_end - t_sig:.2f}s after SIGTERM; shutdown_timeout is {timeout_s}s")
    for _ in range(100):
        if server.conns[0]["end"] is not None:
            break
        time.sleep(0.02)
    assert server.conns[0]["end"] == "reset", f"the server side ended with {server.conns[0]['end']}"
    assert rc == 0, f"rdmagw A exit code {rc} (None: still running)\n{a.log()[-3000:]}"
    assert t_exit - t_end < 1.0, f"rdmagw A exited {t_exit - t_end:.2f}s after the reset"


@pytest.mark.deadline(60)
def test_second_signal_resets_open_passthrough_at_once(passthrough):
    """THIS FAILS TODAY, like the drain timeout above."""
    a, server, client = passthrough(shutdown_timeout_ms=20000)
    a.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    t_sig = time.monotonic()
    a.proc.send_signal(signal.SIGTERM)
    end, t_end, _ = watch(client, t_sig + 8)
    rc, t_exit = wait_exit(a, t_sig + 8)
    when = f"{t_end - t_sig:.2f}s after the second SIGTERM" if t_end else "never"
    print(f"client: {end} {when}; server: {server.conns[0]['end']}; rdmagw A exit {rc}")
    assert end == "reset", f"the open passthrough client saw {end} ({when}), not a reset"
    assert t_end - t_sig < 1.0, f"the reset came {when}"
    assert rc == 0, f"rdmagw A exit code {rc} (None: still running)\n{a.log()[-3000:]}"
    assert t_exit - t_sig < 1.5, f"rdmagw A exited {t_exit - t_sig:.2f}s after the second signal"
