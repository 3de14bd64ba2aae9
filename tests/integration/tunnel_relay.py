# SPDX-License-Identifier: Apache-2.0
"""A TCP relay on loopback between two rdmagw processes' tunnel, for fault
tests: it forwards every connection to `to_host`:`to_port` with splice(2)
(no copy through Python, so it keeps up with the tunnel), and close_all()
plays a middlebox that closes every connection it carries: a FIN both ways,
whatever was in flight discarded. Used with the `backend` fixture
(start/stop), or as a process (in a network namespace):

  tunnel_relay.py LISTEN_IP LISTEN_PORT TO_IP TO_PORT

which prints "listening", then "closed N" for every SIGUSR1 (close_all),
"slow HH:MM:SS ..." (UTC) when its own loop stalled or a connect to TO was
slow or failed, and stops on SIGTERM."""

from __future__ import annotations

import fcntl
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time

from backends import LoopServer

PIPE_SIZE = 1 << 20
SPLICE = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK


class _Direction:
    """src -> pipe -> dst; at most one pipe's worth in flight."""

    def __init__(self, src: socket.socket, dst: socket.socket):
        self.src, self.dst = src, dst
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        fcntl.fcntl(self.w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        self.pending = 0
        self.eof = False

    def pump(self) -> None:
        """Moves what it can without blocking."""
        while True:
            if self.pending == 0 and not self.eof:
                try:
                    n = os.splice(self.src.fileno(), self.w, PIPE_SIZE, flags=SPLICE)
                except BlockingIOError:
                    n = None
                if n == 0:
                    self.eof = True
                    self.dst.shutdown(socket.SHUT_WR)
                elif n:
                    self.pending = n
            if self.pending == 0:
                return
            try:
                n = os.splice(self.r, self.dst.fileno(), self.pending, flags=SPLICE)
            except BlockingIOError:
                return
            self.pending -= n

    def close(self):
        os.close(self.r)
        os.close(self.w)


class _Connection:
    def __init__(self, client: socket.socket, server: socket.socket):
        self.client, self.server = client, server
        self.up = _Direction(client, server)
        self.down = _Direction(server, client)
        self.cut = False  # close_all() ended it: discard reads until both EOFs

    def events(self, sock: socket.socket) -> int:
        ev = 0
        for d in (self.up, self.down):
            if d.src is sock and not d.eof and (d.pending == 0 or self.cut):
                ev |= selectors.EVENT_READ
            if d.dst is sock and d.pending and not self.cut:
                ev |= selectors.EVENT_WRITE
        return ev

    def done(self) -> bool:
        return self.up.eof and self.down.eof and not self.up.pending and not self.down.pending


class TunnelRelay(LoopServer):
    def __init__(self, to_port: int, to_host: str = "127.0.0.1", listen: tuple = ("127.0.0.1", 0)):
        self.to = (to_host, to_port)
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(listen)
        self.lsock.listen(64)
        self.lsock.setblocking(False)
        self.port = self.lsock.getsockname()[1]
        self.refused: list[str] = []  # connections the far side did not take
        self.on_slow = None  # called with a line when the relay itself was slow (a stalled loop, a slow connect)
        self._conns: list[_Connection] = []
        self._watched: dict[socket.socket, int] = {}
        self._cuts_asked = 0
        self._cuts_served = 0
        self._cut_count = 0
        self._cut_done = threading.Condition()
        self._sel = selectors.DefaultSelector()
        super().__init__()

    def stop(self):
        super().stop()
        for c in list(self._conns):
            self._drop(c)

    def close_all(self, timeout: float = 5.0) -> int:
        """Closes every connection the relay carries (shutdown(SHUT_WR) both
        ways; bytes not yet forwarded are lost) and returns how many."""
        with self._cut_done:
            self._cuts_asked += 1
            want = self._cuts_asked
            if not self._cut_done.wait_for(lambda: self._cuts_served >= want, timeout=timeout):
                raise TimeoutError("the relay's thread did not close its connections")
            return self._cut_count

    # -- the relay's thread ------------------------------------------------
    def _watch(self, c: _Connection):
        for s in (c.client, c.server):
            ev = c.events(s)
            old = self._watched.get(s, 0)
            if ev == old:
                continue
            if old == 0:
                self._sel.register(s, ev, c)
            elif ev == 0:
                self._sel.unregister(s)
            else:
                self._sel.modify(s, ev, c)
            self._watched[s] = ev

    def _drop(self, c: _Connection, reset: bool = False):
        for s in (c.client, c.server):
            if self._watched.pop(s, 0):
                self._sel.unregister(s)
            if reset:  # pass a reset on, as a router would
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        c.up.close()
        c.down.close()
        self._conns.remove(c)

    def _serve_cuts(self):
        with self._cut_done:
            if self._cuts_served == self._cuts_asked:
                return
            n = 0
            for c in self._conns:
                if c.cut:
                    continue
                c.cut = True
                n += 1
                for s in (c.client, c.server):
                    try:
                        s.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                for d in (c.up, c.down):
                    d.pending = 0  # what sits in the pipe is lost with the connection
                self._watch(c)
            self._cut_count = n
            self._cuts_served = self._cuts_asked
            self._cut_done.notify_all()

    def _discard(self, c: _Connection, sock: socket.socket):
        """A cut connection: reads until EOF (or a reset) and drops them."""
        try:
            data = sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data == b"":
            for d in (c.up, c.down):
                if d.src is sock:
                    d.eof = True
        if c.up.eof and c.down.eof:
            self._drop(c)
        else:
            self._watch(c)

    def _loop(self):
        self._sel.register(self.lsock, selectors.EVENT_READ, None)
        last = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last > 1.0:
                self._slow(f"loop stalled {now - last:.2f} s")
            last = now
            self._serve_cuts()
            for key, _ in self._sel.select(timeout=0.02):
                c = key.data
                if c is None:
                    self._accept()
                elif c not in self._conns:
                    continue  # dropped earlier in this round
                elif c.cut:
                    self._discard(c, key.fileobj)
                else:
                    try:
                        c.up.pump()
                        c.down.pump()
                    except OSError:
                        self._drop(c, reset=True)
                        continue
                    if c.done():
                        self._drop(c)
                    else:
                        self._watch(c)

    def _slow(self, what: str):
        if self.on_slow:
            self.on_slow(what)

    def _accept(self):
        while True:
            try:
                client, _ = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            began = time.monotonic()
            try:
                server = socket.create_connection(self.to, timeout=5)
            except OSError as e:
                self._slow(f"connect failed after {time.monotonic() - began:.2f} s: {e}")
                # The far side did not take it: pass that on as a reset (a
                # router would) and keep relaying the others.
                self.refused.append(f"{type(e).__name__}: {e}")
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            if time.monotonic() - began > 0.5:
                self._slow(f"connect took {time.monotonic() - began:.2f} s")
            for s in (client, server):
                s.setblocking(False)
            c = _Connection(client, server)
            self._conns.append(c)
            self._watch(c)


def main(argv: list[str]) -> int:
    listen_ip, listen_port, to_ip, to_port = argv
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM, signal.SIGINT})
    relay = TunnelRelay(int(to_port), to_ip, (listen_ip, int(listen_port)))
    relay.on_slow = lambda what: print(f"slow {time.strftime('%H:%M:%S', time.gmtime())} {what}", flush=True)
    relay.start()
    print("listening", flush=True)
    while True:
        sig = signal.sigwait({signal.SIGUSR1, signal.SIGTERM, signal.SIGINT})
        if sig != signal.SIGUSR1:
            break
        print(f"closed {relay.close_all()}", flush=True)
    relay.stop()
    for e in relay.refused:
        print(f"refused {e}", flush=True)
    for e in relay.errors:
        print(f"error {e}", flush=True)
    return 1 if relay.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
