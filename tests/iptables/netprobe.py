#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run inside a test network namespace: where do TCP connections land?

    netprobe.py --listen 15001,8080,8081 --case NAME:HOST:PORT[:UID[:GID]] ...

Opens a listener on 0.0.0.0 for every --listen port, then for every case
connects to HOST:PORT (as UID when given, from a child process) and prints one
JSON object: {NAME: {"port": <listener that accepted>, "orig": "<ip:port from
SO_ORIGINAL_DST>"} or {"error": "..."}}.  Each listener answers a connection
with its own port and the connection's original destination, so a redirected
connection shows port 15001 with the address the client asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import threading

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
# The other user must be able to run it: Debian's, not one under /root.
CHILD_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def original_dst(conn: socket.socket) -> str:
    try:
        raw = conn.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    except OSError as exc:
        return f"unknown ({exc.strerror})"
    port = struct.unpack_from("!H", raw, 2)[0]
    return f"{socket.inet_ntoa(raw[4:8])}:{port}"


def serve(sock: socket.socket, port: int) -> None:
    while True:
        conn, _ = sock.accept()
        with conn:
            reply = json.dumps({"port": port, "orig": original_dst(conn)}) + "\n"
            conn.sendall(reply.encode())


def connect(host: str, port: int) -> dict:
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        return json.loads(data)
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--connect":
        print(json.dumps(connect(sys.argv[2], int(sys.argv[3]))))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--case", action="append", default=[])
    args = ap.parse_args()

    for port in (int(p) for p in args.listen.split(",")):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
        sock.listen(16)
        threading.Thread(target=serve, args=(sock, port), daemon=True).start()

    results = {}
    for case in args.case:
        name, host, port, *ids = case.split(":")
        if ids:
            # A separate process, so only the client runs as that user; the
            # source goes by -c since that user may not read the work tree.
            with open(os.path.abspath(__file__)) as f:
                source = f.read()
            out = subprocess.run(
                [CHILD_PYTHON, "-c", source, "--connect", host, port],
                user=int(ids[0]), group=int(ids[-1]), extra_groups=[],
                capture_output=True, text=True, timeout=30,
            )
            results[name] = json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr}
        else:
            results[name] = connect(host, int(port))
    print(json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
