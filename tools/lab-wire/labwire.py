# SPDX-License-Identifier: Apache-2.0
"""What lab-agent (on host B of the RDMA lab's wire) and lab-on (on host A)
share: the control network's address and port, and the framing of a remote
command's standard streams, signals and exit status.

A frame is one type byte, a 4-byte big-endian length and that many bytes.
lab-on sends one "h" frame (the command, as JSON) and then "i" (standard
input), "e" (standard input ended) and "k" (a signal number) frames; the agent
sends "o" (standard output), "r" (standard error) and finally "x" (the exit
status, as a decimal number, 128+N for a signal N). Python standard library
only: it runs in the guests on the host's interpreter."""

from __future__ import annotations

import os
import socket
import struct

AGENT_PORT = 7700
HEADER = struct.Struct("!cI")
MAX_FRAME = 1 << 20


def control_peer() -> str:
    """The other host's address on the control network (never faulted)."""
    addr = os.environ.get("RDMAGW_LAB_CONTROL_PEER")
    if not addr:
        raise SystemExit("not inside `tools/rdma-lab run --wire`: RDMAGW_LAB_CONTROL_PEER is unset")
    return addr


def send_frame(sock: socket.socket, kind: bytes, data: bytes = b"") -> None:
    for off in range(0, max(len(data), 1), MAX_FRAME):
        chunk = data[off:off + MAX_FRAME]
        sock.sendall(HEADER.pack(kind, len(chunk)) + chunk)


class FrameReader:
    """Frames from a socket, as (kind, bytes); None once the socket closed."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.buf += chunk
        return True

    def read(self):
        if not self._fill(HEADER.size):
            return None
        kind, length = HEADER.unpack(self.buf[:HEADER.size])
        if length > MAX_FRAME:
            raise ValueError(f"frame of {length} bytes exceeds {MAX_FRAME}")
        if not self._fill(HEADER.size + length):
            return None
        data = self.buf[HEADER.size:HEADER.size + length]
        self.buf = self.buf[HEADER.size + length:]
        return kind, data
