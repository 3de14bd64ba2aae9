# SPDX-License-Identifier: Apache-2.0
"""Tunnel protocol version 1 spoken by hand (docs/protocol.md), for tests that
play a hostile or broken peer against a real rdmagw.

Every frame is a 12-byte little-endian header (type u8, flags u8, reserved u16,
stream_id u32, length u32) followed by `length` payload bytes.  Every socket
operation carries a timeout and every loop is bounded in count and time.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import socket
import struct
import time

from clients import RESET_ERRORS

HEADER = struct.Struct("<BBHII")
HEADER_SIZE = HEADER.size  # 12

HELLO, OPEN, DATA, WINDOW, FIN, RESET, PING, PONG, GOAWAY, SESSION, ACK, AUTH = range(1, 13)
TYPE_NAMES = {HELLO: "HELLO", OPEN: "OPEN", DATA: "DATA", WINDOW: "WINDOW", FIN: "FIN",
              RESET: "RESET", PING: "PING", PONG: "PONG", GOAWAY: "GOAWAY", SESSION: "SESSION",
              ACK: "ACK", AUTH: "AUTH"}

# HELLO capabilities
CAP_RESUME, CAP_RDMA_PLACEMENT, CAP_AUTH, CAP_ENCRYPT, CAP_BOUND, CAP_ORIGIN = 1, 2, 4, 8, 16, 64
# AUTH steps, roles (docs/protocol.md, "Authentication")
CHALLENGE, PROOF = 1, 2
ROLE_DIALER, ROLE_ACCEPTOR = 1, 2
AUTH_LABEL = b"rdmagw peer auth v2"
# Protected records (docs/protocol.md, "Protected records"): HKDF labels
KEYS_ENCRYPT = b"rdmagw frame keys v1"
KEYS_AUTHENTICATE = b"rdmagw frame keys v1 authenticate-only"
RECORD_SIZE = 16 * 1024  # the TCP transport's largest record payload
TAG_SIZE = 16

# RESET codes
CANCEL, REFUSED, CONNECT_FAILED, NOT_ALLOWED, PEER_GONE, PROTOCOL, RESOURCE, SHUTDOWN = range(8)

HELLO_FIXED = struct.Struct("<HHIIIQ")  # version, reserved, capabilities, max_data, stream_window, session_window
MAX_FRAME_PAYLOAD = 2 * 1024 * 1024  # sanity bound on what we accept from the peer


def frame(ftype: int, stream_id: int, payload: bytes = b"", *, flags: int = 0,
          reserved: int = 0) -> bytes:
    return HEADER.pack(ftype, flags, reserved, stream_id, len(payload)) + payload


def hello(version: int = 1, capabilities: int = 0, max_data: int = 16384,
          stream_window: int = 262144, session_window: int = 33554432,
          node: bytes = b"evil") -> bytes:
    payload = HELLO_FIXED.pack(version, 0, capabilities, max_data, stream_window,
                               session_window) + bytes([len(node)]) + node
    return frame(HELLO, 0, payload)


def origin_address(address: str = "", port: int = 0) -> bytes:
    """An OPEN origin's address: family 0 (unknown) without one."""
    if not address:
        return b"\x00"
    packed = ipaddress.ip_address(address).packed
    return bytes([4 if len(packed) == 4 else 6]) + packed + struct.pack("<H", port)


def open_frame(stream_id: int, target: str, first: bytes = b"", origin: bytes | None = None) -> bytes:
    """origin: the origin's bytes (connection id, client, destination), sent
    where both HELLOs carry CAP_ORIGIN; None: none (the peer did not offer)."""
    t = target.encode()
    carried = b"" if origin is None else bytes([len(origin)]) + origin
    return frame(OPEN, stream_id, struct.pack("<H", len(t)) + t + carried + first)


def data(stream_id: int, payload: bytes) -> bytes:
    return frame(DATA, stream_id, payload)


def window(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW, stream_id, struct.pack("<I", increment))


# SESSION kinds (docs/protocol.md, "Resumption")
SESSION_NEW, SESSION_RESUME, SESSION_ACCEPTED, SESSION_RESUMED, SESSION_UNKNOWN = range(5)


def session_frame(instance: int, nonce: int, kind: int = SESSION_NEW, received: int = 0) -> bytes:
    return frame(SESSION, 0, struct.pack("<QQIQ", instance, nonce, kind, received))


def ack(received: int) -> bytes:
    return frame(ACK, 0, struct.pack("<Q", received))


def fin(stream_id: int) -> bytes:
    return frame(FIN, stream_id)


def reset(stream_id: int, code: int) -> bytes:
    return frame(RESET, stream_id, struct.pack("<I", code))


def ping(opaque: int) -> bytes:
    return frame(PING, 0, struct.pack("<Q", opaque))


def pong(opaque: int) -> bytes:
    return frame(PONG, 0, struct.pack("<Q", opaque))


def auth_frame(step: int, value: bytes, dialed: bytes | None = None) -> bytes:
    """An AUTH frame; the dialer's challenge also names the address it
    dialed (`dialed`, 16 bytes: ip16())."""
    assert len(value) == 32 and (dialed is None or len(dialed) == 16)
    return frame(AUTH, 0, struct.pack("<I", step) + value + (dialed or b""))


def parse_auth(payload: bytes) -> tuple[int, bytes]:
    assert len(payload) == 36, f"AUTH payload of {len(payload)} bytes"
    return struct.unpack_from("<I", payload)[0], payload[4:]


def ip16(address: str) -> bytes:
    """An IP address as the transcript takes it: 16 bytes, IPv4 mapped."""
    packed = ipaddress.ip_address(address).packed
    return b"\0" * 10 + b"\xff\xff" + packed if len(packed) == 4 else packed


def auth_proof(key: bytes, role: int, dialer_hello: bytes, acceptor_hello: bytes,
               dialer_nonce: bytes, acceptor_nonce: bytes, dialed: bytes, transport: int = 0) -> bytes:
    """HMAC-SHA256 over the transcript, as docs/protocol.md spells it
    (transport 0 = TCP, 1 = RDMA; HELLOs are payloads, without the header;
    `dialed`: the acceptor's address as the dialer dialed it, ip16())."""
    msg = (AUTH_LABEL + bytes([role]) + struct.pack("<H", 1) + bytes([transport])
           + struct.pack("<H", len(dialer_hello)) + dialer_hello
           + struct.pack("<H", len(acceptor_hello)) + acceptor_hello
           + dialer_nonce + acceptor_nonce + dialed)
    return hmac.new(key, msg, hashlib.sha256).digest()


class Records:
    """One direction of a TCP transport's protected records: [u32 length]
    [payload + 16-byte tag], AES-256-GCM under a key from HKDF-SHA256(key,
    dialer nonce || acceptor nonce, label), nonce = 4 zero bytes and a 64-bit
    big-endian record count; authenticated only, the payload is in clear
    and the tag covers length and payload as additional data."""

    def __init__(self, key: bytes, encrypt: bool):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # python3-cryptography
        self.aead, self.encrypt, self.count = AESGCM(key), encrypt, 0

    def _nonce(self) -> bytes:
        self.count += 1
        return b"\0\0\0\0" + struct.pack(">Q", self.count - 1)

    def seal(self, data: bytes) -> bytes:
        out = b""
        for at in range(0, len(data), RECORD_SIZE):
            part = data[at:at + RECORD_SIZE]
            head = struct.pack("<I", len(part) + TAG_SIZE)
            if self.encrypt:
                out += head + self.aead.encrypt(self._nonce(), part, head)
            else:
                out += head + part + self.aead.encrypt(self._nonce(), b"", head + part)
        return out

    def open(self, wire: bytearray) -> bytes:
        """The payloads of the whole records at the start of `wire` (taken
        out of it); raises ValueError for one that does not authenticate."""
        from cryptography.exceptions import InvalidTag
        out = b""
        while len(wire) >= 4:
            size = struct.unpack_from("<I", wire)[0]
            if len(wire) < 4 + size:
                break
            head, body = bytes(wire[:4]), bytes(wire[4:4 + size])
            del wire[:4 + size]
            try:
                if self.encrypt:
                    out += self.aead.decrypt(self._nonce(), body, head)
                else:
                    part, tag = body[:-TAG_SIZE], body[-TAG_SIZE:]
                    self.aead.decrypt(self._nonce(), tag, head + part)
                    out += part
            except InvalidTag:
                raise ValueError("a record from rdmagw does not authenticate") from None
        return out


def record_keys(key: bytes, dialer_nonce: bytes, acceptor_nonce: bytes, encrypt: bool) -> tuple[bytes, bytes]:
    """(dialer -> acceptor, acceptor -> dialer) keys of one transport."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=dialer_nonce + acceptor_nonce,
               info=KEYS_ENCRYPT if encrypt else KEYS_AUTHENTICATE).derive(key)
    return okm[:32], okm[32:]


def read_key(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read().strip()


def parse_hello(payload: bytes) -> dict:
    assert len(payload) >= HELLO_FIXED.size + 1, f"HELLO payload too short: {len(payload)}"
    version, _res, caps, max_data, stream_window, session_window = HELLO_FIXED.unpack_from(payload)
    node_len = payload[HELLO_FIXED.size]
    node = payload[HELLO_FIXED.size + 1:HELLO_FIXED.size + 1 + node_len]
    assert len(payload) == HELLO_FIXED.size + 1 + node_len, "HELLO node length mismatch"
    return {"version": version, "capabilities": caps, "max_data": max_data,
            "stream_window": stream_window, "session_window": session_window,
            "node": node.decode("utf-8", "replace")}


def u32(payload: bytes) -> int:
    assert len(payload) == 4, f"expected a 4-byte payload, got {len(payload)}"
    return struct.unpack("<I", payload)[0]


def u64(payload: bytes) -> int:
    assert len(payload) == 8, f"expected an 8-byte payload, got {len(payload)}"
    return struct.unpack("<Q", payload)[0]


class PeerClosed(Exception):
    """The far side closed (EOF) or reset the connection."""


class TunnelPeer:
    """A raw TCP connection to an rdmagw tunnel port, playing the dialer."""

    def __init__(self, port: int, timeout: float = 5.0, rcvbuf: int | None = None, source: str | None = None):
        """`source`: a loopback address to connect from (127.0.0.2, ...), for
        limits that count by the peer's address."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        try:
            if source is not None:
                self.sock.bind((source, 0))
            self.sock.connect(("127.0.0.1", port))
        except BaseException:
            self.sock.close()
            raise
        self.rx = bytearray()
        self.peer_hello: dict | None = None
        self.host = "127.0.0.1"
        # After an authenticated handshake: what we send is sealed, what we
        # receive is opened (Records).
        self.sealer: Records | None = None
        self.opener: Records | None = None
        self.wire = bytearray()  # received, not yet opened

    @property
    def local_port(self) -> int:
        return self.sock.getsockname()[1]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- sending -----------------------------------------------------------
    def send(self, data: bytes, timeout: float = 5.0) -> None:
        """sendall bounded by `timeout` (in records once authenticated);
        raises PeerClosed on reset/EPIPE."""
        if self.sealer is not None:
            data = self.sealer.seal(data)
        self.send_raw(data, timeout)

    def send_raw(self, data: bytes, timeout: float = 5.0) -> None:
        """Bytes as they are, records or not."""
        view = memoryview(data)
        deadline = time.monotonic() + timeout
        for _ in range(1 << 24):
            if not view:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"send: {len(view)} bytes still unsent after {timeout}s")
            self.sock.settimeout(left)
            try:
                n = self.sock.send(view)
            except RESET_ERRORS as e:
                raise PeerClosed(f"send: {type(e).__name__}") from e
            view = view[n:]
        raise AssertionError("send: loop bound reached")

    # -- receiving ---------------------------------------------------------
    def _fill(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no frame before the deadline")
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(256 * 1024)
        except RESET_ERRORS as e:
            raise PeerClosed(f"recv: {type(e).__name__}") from e
        if not chunk:
            raise PeerClosed("recv: EOF")
        if self.opener is None:
            self.rx += chunk
            return
        self.wire += chunk
        self.rx += self.opener.open(self.wire)

    def read_frame(self, timeout: float = 5.0):
        """Returns (type, flags, reserved, stream_id, payload)."""
        deadline = time.monotonic() + timeout
        for _ in range(1 << 16):
            if len(self.rx) >= HEADER_SIZE:
                ftype, flags, reserved, sid, length = HEADER.unpack_from(self.rx)
                assert length <= MAX_FRAME_PAYLOAD, f"peer sent a frame of {length} bytes"
                if len(self.rx) >= HEADER_SIZE + length:
                    payload = bytes(self.rx[HEADER_SIZE:HEADER_SIZE + length])
                    del self.rx[:HEADER_SIZE + length]
                    return ftype, flags, reserved, sid, payload
            self._fill(deadline)
        raise AssertionError("read_frame: loop bound reached")

    def next_frame(self, timeout: float = 5.0, skip=(PING, WINDOW)):
        """Like read_frame, but answers PINGs with PONGs and skips frames whose
        type is in `skip` (keepalives and window updates that may interleave)."""
        deadline = time.monotonic() + timeout
        for _ in range(10000):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            f = self.read_frame(left)
            if f[0] == PING:
                self.send(pong(u64(f[4])))
            if f[0] in skip:
                continue
            return f
        raise TimeoutError(f"no frame other than {sorted(skip)} within {timeout}s")

    def authenticate(self, key: bytes, timeout: float = 5.0, encrypt: bool = False, dialed: str | None = None,
                     **hello_kw) -> dict:
        """The dialer's side of an authenticated handshake with `key`: checks
        the acceptor's proof and returns its parsed HELLO; from then on
        send() and read_frame() go through protected records (encrypted with
        `encrypt`). `dialed`: the address to name as the one dialed (default:
        the one connected to). Raises PeerClosed if the acceptor ends the
        connection (a wrong key, another address)."""
        hello_kw["capabilities"] = (hello_kw.get("capabilities", 0) | CAP_AUTH | CAP_BOUND
                                    | (CAP_ENCRYPT if encrypt else 0))
        my_hello = hello(**hello_kw)
        nonce = os.urandom(32)
        where = ip16(dialed or self.host)
        self.send(my_hello + auth_frame(CHALLENGE, nonce, where))
        ftype, _, _, _, payload = self.read_frame(timeout)
        assert ftype == AUTH, f"expected the acceptor's AUTH challenge, got {TYPE_NAMES.get(ftype, ftype)}"
        step, acceptor_nonce = parse_auth(payload)
        assert step == CHALLENGE
        self.send(auth_frame(PROOF, auth_proof(key, ROLE_DIALER, my_hello[HEADER_SIZE:], b"", nonce,
                                               acceptor_nonce, where)))
        to_acceptor, to_dialer = record_keys(key, nonce, acceptor_nonce, encrypt)
        self.sealer, self.opener = Records(to_acceptor, encrypt), Records(to_dialer, encrypt)
        ftype, _, _, _, their_hello = self.read_frame(timeout)
        assert ftype == HELLO, f"expected HELLO, got {TYPE_NAMES.get(ftype, ftype)}"
        ftype, _, _, _, payload = self.read_frame(timeout)
        assert ftype == AUTH
        step, proof = parse_auth(payload)
        expected = auth_proof(key, ROLE_ACCEPTOR, my_hello[HEADER_SIZE:], their_hello, nonce, acceptor_nonce, where)
        assert step == PROOF and hmac.compare_digest(proof, expected), "the acceptor's proof does not verify"
        self.peer_hello = parse_hello(their_hello)
        return self.peer_hello

    def handshake(self, timeout: float = 5.0, **hello_kw) -> dict:
        """Sends a valid HELLO (node "evil") and returns the peer's parsed HELLO."""
        self.send(hello(**hello_kw))
        ftype, flags, reserved, sid, payload = self.read_frame(timeout)
        assert (ftype, flags, reserved, sid) == (HELLO, 0, 0, 0), \
            f"expected HELLO on stream 0, got type={ftype} flags={flags} reserved={reserved} stream={sid}"
        self.peer_hello = parse_hello(payload)
        return self.peer_hello
