# SPDX-License-Identifier: Apache-2.0
"""The takeover channel (proxy/runtime/takeover_channel.h) spoken by hand, for
tests that play either end against a real rdmagw: a new process that stalls
or answers late, an old process that refuses to let go or sends a forged
image, another user squatting the channel's name.

A message is a 20-byte little-endian header (magic, type, payload length,
socket count), the sockets riding on it (SCM_RIGHTS), then the payload.
Every socket operation carries a timeout; every loop is bounded."""

from __future__ import annotations

import array
import os
import socket
import struct
import time

HEADER = struct.Struct("<IIQI")  # magic, type, payload length, sockets
MAGIC = 0x54574752
HELLO, SOCKETS, IMAGE, ADOPTED, REFUSED, WELCOME, RELEASED, LOCAL_LEGS = range(1, 9)
COMMIT = 1  # HELLO's feature bit: WELCOME and RELEASED, please
LOCAL_LEGS_ADOPTED = 2  # HELLO's feature bit: redirected local legs may come (LOCAL_LEGS)
IMAGE_VERSION = 2


def channel_name(tunnel_port: int, address: str = "127.0.0.1") -> str:
    """The abstract socket's name as Python's socket module takes it."""
    return f"\0rdmagw-takeover/{address}:{tunnel_port}"


def hello(features: int = COMMIT, pid: int | None = None) -> bytes:
    return struct.pack("<III", 1, pid or os.getpid(), features)


def send(sock: socket.socket, kind: int, payload: bytes = b"", fds=(), credentials: bool = False) -> None:
    ancillary = []
    if fds:
        ancillary.append((socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds)))
    if credentials:
        ancillary.append((socket.SOL_SOCKET, socket.SCM_CREDENTIALS,
                          struct.pack("iII", os.getpid(), os.geteuid(), os.getegid())))
    head = HEADER.pack(MAGIC, kind, len(payload), len(fds))
    sent = sock.sendmsg([head], ancillary)
    # Nothing left is nothing sent: a send of 0 bytes fails with EPIPE once
    # the other end has read the message and closed (RELEASED, then the new
    # process lets go of the channel), which is no error of theirs.
    rest = head[sent:] + payload
    if rest:
        sock.sendall(rest)


def receive(sock: socket.socket, deadline_s: float = 20) -> tuple[int, bytes, list[int], tuple | None]:
    """(type, payload, received fds, (pid, uid, gid) or None). Raises
    ConnectionError when the other end closes."""
    deadline = time.monotonic() + deadline_s
    head, fds, creds = b"", [], None
    while len(head) < HEADER.size:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data, anc, _, _ = sock.recvmsg(HEADER.size - len(head), socket.CMSG_SPACE(250 * 4) + socket.CMSG_SPACE(12))
        if not data:
            raise ConnectionError("the other process closed the channel")
        head += data
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", payload[:len(payload) - len(payload) % 4]).tolist()
            elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                creds = struct.unpack("iII", payload[:12])
    magic, kind, size, count = HEADER.unpack(head)
    assert magic == MAGIC and count == len(fds), (magic, count, fds)
    body = b""
    while len(body) < size:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        part = sock.recv(size - len(body))
        if not part:
            raise ConnectionError("the other process closed the channel mid-message")
        body += part
    return kind, body, fds, creds


def image(listeners=(), tunnel_fds=(), fd_count: int = 0, instance: int = 0x5eed) -> bytes:
    """A process image with `listeners` [(endpoint, [socket index...])],
    the tunnel's socket indexes, and no worker."""
    out = struct.pack("<IQI", IMAGE_VERSION, instance, fd_count)
    out += struct.pack("<Q", len(listeners))
    for endpoint, indexes in listeners:
        text = endpoint.encode()
        out += struct.pack("<Q", len(text)) + text + b"\0" + struct.pack("<Q", len(indexes))
        out += b"".join(struct.pack("<I", i) for i in indexes)
    out += struct.pack("<Q", len(tunnel_fds)) + b"".join(struct.pack("<I", i) for i in tunnel_fds)
    return out + struct.pack("<Q", 0)  # workers


class StalledTakeover:
    """A new process that asks for a takeover, takes the sockets and the
    image, then does what the test says: vanish (as one that crashed), or
    answer ADOPTED late."""

    def __init__(self, tunnel_port: int, features: int = 0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.settimeout(20)
        self.sock.connect(channel_name(tunnel_port))
        self.features = features
        self.sockets = 0
        self.welcome: tuple | None = None  # (credentials, listening socket fd count)

    def take_image(self) -> int:
        send(self.sock, HELLO, hello(self.features))
        for _ in range(10000):
            kind, body, fds, creds = receive(self.sock)
            for fd in fds:
                os.close(fd)  # a copy: the connections live on in the old process
            if kind == WELCOME:
                self.welcome = (creds, len(fds))
                continue
            self.sockets += len(fds)
            if kind == IMAGE:
                return len(body)
            assert kind == SOCKETS, (kind, body[:200])
        raise AssertionError("no image")

    def adopt(self) -> tuple[int, bytes]:
        """Sends ADOPTED; the answer's (type, payload), or (0, b"") when the
        old process closed the channel instead."""
        try:
            send(self.sock, ADOPTED)
            kind, body, fds, _ = receive(self.sock, 15)
        except (ConnectionError, BrokenPipeError, ConnectionResetError):
            return 0, b""
        for fd in fds:
            os.close(fd)
        return kind, body

    def vanish(self):
        self.sock.close()


# A process of another user that takes the channel's name and keeps it
# (run as `python3 -c SQUATTER NAME SECONDS MODE` under setpriv). MODE
# "race": tries to bind every millisecond for SECONDS, then says whether it
# ever held the name. MODE "hold": binds at once, prints "bound", then for
# SECONDS accepts whoever connects and answers as an old rdmagw of the
# version before WELCOME would: a forged image whose one unix listener
# names the path in the environment's FORGED_PATH; at the end prints how
# many bytes it was sent.
SQUATTER = r"""
import os, socket, struct, sys, time
name, seconds, mode = sys.argv[1].replace("@", "\0", 1), float(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
deadline = time.monotonic() + seconds
bound = False
while time.monotonic() < deadline:
    try:
        s.bind(name)
        s.listen(4)
        bound = True
        break
    except OSError:
        if mode == "hold":
            print("cannot bind", flush=True)
            sys.exit(1)
        time.sleep(0.001)
if mode == "race":
    print("bound" if bound else "never bound", flush=True)
    sys.exit(0)
print("bound", flush=True)
got = 0
s.settimeout(0.2)
while time.monotonic() < deadline:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    c.settimeout(2)
    try:
        got += len(c.recv(4096))
        lure = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lure.bind("\0rdmagw-test-lure-%d" % os.getpid())
        lure.listen(1)
        path = os.environ["FORGED_PATH"].encode()
        image = struct.pack("<IQIQ", 2, 1, 1, 1) + struct.pack("<Q", len(path)) + path + b"\0"
        image += struct.pack("<QI", 1, 0) + struct.pack("<QQ", 0, 0)
        hdr = struct.pack("<IIQI", 0x54574752, 2, 0, 1)
        c.sendmsg([hdr], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", lure.fileno()))])
        c.sendall(struct.pack("<IIQI", 0x54574752, 3, len(image), 0) + image)
        while True:
            part = c.recv(4096)
            if not part:
                break
            got += len(part)
    except OSError:
        pass
    c.close()
print("received", got, flush=True)
"""
