# SPDX-License-Identifier: Apache-2.0
"""The client's address at the far side (docs/deploy.md, "Client addresses"):
a targets entry with proxy_protocol: v2 makes host-b begin each connection
to it with a PROXY protocol v2 header naming the application's address as
host-a saw it. A real nginx (listen ... proxy_protocol) logs that address
as the client; without the option it logs rdmagw's own loopback end, and an
entry without it gets no header at all.
"""

from __future__ import annotations

import re
import socket
import time

from backends import nginx_config
from clients import connect, free_port, require_root_and, wait_for
from conftest import ManagedProcess


def start_nginx(tmp_path, procs) -> tuple[int, int, object]:
    """nginx on two ports: one reads PROXY headers, one does not. Each logs
    `$proxy_protocol_addr:$proxy_protocol_port $remote_addr:$remote_port $request`."""
    proxied, plain = free_port(), free_port()
    log = tmp_path / "access.log"
    conf = nginx_config(tmp_path, f"""    log_format who '$proxy_protocol_addr:$proxy_protocol_port $remote_addr:$remote_port $request';
    access_log {log} who;
    server {{ listen 127.0.0.1:{proxied} proxy_protocol; return 200 "proxied\\n"; }}
    server {{ listen 127.0.0.1:{plain}; return 200 "plain\\n"; }}""", worker_connections=64)
    nginx = ManagedProcess("nginx", ["nginx", "-p", str(tmp_path), "-c", str(conf)], tmp_path / "nginx.log")
    procs.append(nginx)
    nginx.start()
    return proxied, plain, log


def get(address, path: str) -> tuple[bytes, int]:
    """One HTTP/1.0 request through `address`; the reply and the client's own port."""
    s = connect(address, timeout=10)
    try:
        port = s.getsockname()[1]
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        reply = b""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply, port
    finally:
        s.close()


def logged(log, path: str) -> list[str]:
    return [line for line in (log.read_text() if log.exists() else "").splitlines() if f"GET {path} " in line]


def test_nginx_logs_the_applications_address_from_the_proxy_header(pair, tmp_path, procs):
    require_root_and(("nginx",), "the PROXY protocol against nginx")
    proxied, plain, log = start_nginx(tmp_path, procs)

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", plain), timeout=1).close()
            return True
        except OSError:
            return False

    wait_for(up, what="nginx")
    proxied_target, plain_target = f"tcp:127.0.0.1:{proxied}", f"tcp:127.0.0.1:{plain}"
    p = pair([{"name": "proxied", "target": proxied_target}, {"name": "plain", "target": plain_target}],
             [{"target": proxied_target, "proxy_protocol": "v2"}, plain_target])

    # With the option: nginx reads the header and logs the application's
    # own address and port, not rdmagw B's.
    for i in range(3):
        reply, client_port = get(p.address("proxied"), f"/proxied-{i}")
        assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"proxied\n"), reply
        wait_for(lambda: logged(log, f"/proxied-{i}"), what=f"nginx's line for request {i}")
        (line,) = logged(log, f"/proxied-{i}")
        said, seen = line.split()[:2]
        assert said == f"127.0.0.1:{client_port}", line  # the application, as host-a accepted it
        assert seen != said and seen.startswith("127.0.0.1:"), line  # rdmagw B's end of the connection

    # Without it: no header (nginx would answer 400 to one), and the server
    # sees only rdmagw B.
    reply, client_port = get(p.address("plain"), "/plain")
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"plain\n"), reply
    wait_for(lambda: logged(log, "/plain"), what="nginx's line for the plain request")
    (line,) = logged(log, "/plain")
    said, seen = line.split()[:2]
    assert said == "-:-", line  # no PROXY header was read (nginx logs an empty variable as -)
    assert seen != f"127.0.0.1:{client_port}", line

    # Both sidecars' access lines name the client alike.
    b_lines = [l for l in p.b.log_text().splitlines() if " event=access " in l and proxied_target in l]
    assert b_lines and all(re.search(r" client=127\.0\.0\.1:\d+ ", l) for l in b_lines), b_lines
