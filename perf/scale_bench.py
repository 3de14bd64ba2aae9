#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: what connections cost an rdmagw pair (TCP transport) at scale.

In one run on this machine (client, echo backend and both sidecars share the
cores; only same-run ratios compare):

  idle      N idle connections held through the pair, for each N of --idle
            (default 1000,10000,20000): RSS of each sidecar before and with
            them, the cost per connection, and the rate at which they were
            opened (connect + one byte echoed) through the pair and directly.
  churn     --churn short connections in a row (connect, one 64-byte
            request echoed, close) from --clients processes at once: the rate
            directly, through the rdmagw pair and through an HAProxy pair
            (same topology: client -> proxy A -> proxy B -> backend), and the
            pair's RSS and open descriptors before and after, and how many
            sessions it dialled.

Usage: perf/scale_bench.py [--idle 1000,10000,20000] [--churn 100000]
                           [--clients 4] [--workers 1] [--buffer-size 32KiB]
                           [--no-churn] [--quick] [--out FILE]
--quick: 1000 idle, 5000 short connections (a minute; a smoke run).
Each process holds one descriptor per idle connection: idle levels above the
hard RLIMIT_NOFILE (less 500) are lowered to it. The HAProxy column needs
haproxy (tools/dev/install-deps installs it).
"""
import argparse
import os
import resource
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import RDMAGW, admin_json, emit, free_port, stop_all, wait_log, wait_port  # noqa: E402

ECHO_SERVER = r"""
import asyncio, sys
async def echo(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(echo, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


# --- helpers run as subprocesses (one client per process) -------------------

def hold(port: int, count: int) -> None:
    """Opens `count` connections (512 connecting at once), echoes one byte
    through each, prints "held SECONDS", keeps them until stdin closes."""
    sel = selectors.DefaultSelector()
    socks, pending, started = [], {}, time.monotonic()
    opened = 0
    while opened < count or pending:
        while opened < count and len(pending) < 512:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            pending[s] = "connect"
            sel.register(s, selectors.EVENT_WRITE)
            opened += 1
        for key, _ in sel.select(timeout=10):
            s = key.fileobj
            if pending[s] == "connect":
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    sys.exit(f"connect failed: {os.strerror(err)} after {len(socks)} connections")
                s.send(b"x")
                pending[s] = "echo"
                sel.modify(s, selectors.EVENT_READ)
            else:
                if s.recv(1) != b"x":
                    sys.exit(f"no echo after {len(socks)} connections")
                sel.unregister(s)
                del pending[s]
                socks.append(s)
        if time.monotonic() - started > 300:
            sys.exit("holding took over 300 s")
    print(f"held {time.monotonic() - started:.3f}", flush=True)
    sys.stdin.read()
    for s in socks:
        s.close()


def churn(port: int, count: int) -> None:
    """`count` short connections in a row; prints "SECONDS FAILURES"."""
    payload = b"q" * 64
    failures = 0
    started = time.monotonic()
    for _ in range(count):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(payload)
                got = b""
                while len(got) < len(payload):
                    chunk = s.recv(64)
                    if not chunk:
                        break
                    got += chunk
                failures += got != payload
        except OSError:
            failures += 1
    print(f"{time.monotonic() - started:.3f} {failures}", flush=True)


# --- measurements --------------------------------------------------------------

def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def streams_active(admin_port: int) -> int:
    return admin_json(admin_port, "/stats")["streams"]["active"]


def wait_quiet(admin_ports, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(streams_active(p) == 0 for p in admin_ports):
            return
        time.sleep(0.2)
    raise RuntimeError("streams still open after the clients closed them")


def run_hold(port: int, count: int):
    """(seconds to open them, the Popen holding them)."""
    p = subprocess.Popen([sys.executable, __file__, "--_hold", str(port), str(count)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    if not line or line[0] != "held":
        p.kill()
        raise RuntimeError(f"holding {count} connections to {port} failed (see above)")
    return float(line[1]), p


def release(p):
    p.stdin.close()
    p.wait(timeout=120)


def run_churn(port: int, total: int, clients: int):
    """(connections per second, failures)."""
    each = total // clients
    ps = [subprocess.Popen([sys.executable, __file__, "--_churn", str(port), str(each)],
                           stdout=subprocess.PIPE, text=True) for _ in range(clients)]
    started = time.monotonic()
    failures = 0
    for p in ps:
        out, _ = p.communicate(timeout=1800)
        failures += int(out.split()[1])
    return each * clients / (time.monotonic() - started), failures


def haproxy_pair(work: str, listen: int, backend: int, procs: list) -> int:
    """client -> haproxy A (listen) -> haproxy B -> backend; returns listen."""
    middle = free_port()
    # Each connection takes two descriptors; haproxy refuses a maxconn the
    # descriptor limit cannot hold.
    maxconn = min(100000, (resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 100) // 2)
    for name, front, back in (("hb", middle, backend), ("ha", listen, middle)):
        with open(f"{work}/{name}.cfg", "w") as f:
            f.write(f"""global
    maxconn {maxconn}
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend in
    bind 127.0.0.1:{front}
    default_backend out
backend out
    server s 127.0.0.1:{back}
""")
        procs.append(subprocess.Popen(["haproxy", "-f", f"{work}/{name}.cfg"], stdout=subprocess.DEVNULL))
    wait_port(listen)
    return listen


def start_rdmagw(work: str, name: str, text: str):
    with open(f"{work}/{name}.yaml", "w") as f:
        f.write(text)
    log = open(f"{work}/{name}.log", "w")
    p = subprocess.Popen([RDMAGW, "--config", f"{work}/{name}.yaml", "--log-level", "info"], stderr=log)
    wait_log(f"{work}/{name}.log", "event=ready")
    return p


def settled_rss(pid: int) -> int:
    """RSS once it stops moving (allocations at start, sessions opening)."""
    last = -1
    for _ in range(50):
        now = rss_kib(pid)
        if now == last:
            return now
        last = now
        time.sleep(0.2)
    return last


def sizing(work: str):
    """(KiB per worker, KiB per session on the dialer, on the acceptor): an
    idle rdmagw with 1 and 4 workers; and a pair with 0 and 64 sessions
    (64 named peers, `connect: always`, all at the same rdmagw)."""
    rss = {}
    for workers in (1, 4):
        p = start_rdmagw(work, f"w{workers}", f"""node: w{workers}
admin: "127.0.0.1:{free_port()}"
workers: {workers}
tunnel: {{address: 127.0.0.1, tcp_port: {free_port()}, transport: tcp}}
""")
        rss[workers] = settled_rss(p.pid)
        stop_all([p])
    per_worker = (rss[4] - rss[1]) / 3
    b_port = free_port()
    b = start_rdmagw(work, "sb", f"""node: sb
admin: "127.0.0.1:{free_port()}"
workers: 1
tunnel: {{address: 127.0.0.1, tcp_port: {b_port}, transport: tcp, limits: {{handshakes_per_address: 256}}}}
""")
    procs = [b]
    try:
        b0 = settled_rss(b.pid)
        peers = "\n".join(f"  - {{name: p{i}, address: 127.0.0.1, tcp_port: {b_port}, connect: always}}"
                          for i in range(64))
        a = start_rdmagw(work, "sa", f"""node: sa
admin: "127.0.0.1:{free_port()}"
workers: 1
tunnel: {{address: 127.0.0.1, tcp_port: {free_port()}, transport: tcp}}
peers:
{peers}
""")
        procs.append(a)
        deadline = time.time() + 30
        while open(f"{work}/sa.log").read().count("event=session_open") < 64:
            if time.time() > deadline:
                raise RuntimeError("64 sessions did not open")
            time.sleep(0.1)
        a64, b64 = settled_rss(a.pid), settled_rss(b.pid)
    finally:
        stop_all(procs)
    return per_worker, (a64 - rss[1]) / 64, (b64 - b0) / 64


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle", default="1000,10000,20000", help="comma-separated idle connection counts")
    ap.add_argument("--churn", type=int, default=100000, help="short connections in a row")
    ap.add_argument("--clients", type=int, default=4, help="processes making the short connections")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--buffer-size", default="32KiB", help="tunnel.buffer_size of both sidecars (default: rdmagw's, 32KiB)")
    ap.add_argument("--no-churn", action="store_true", help="idle connections only")
    ap.add_argument("--quick", action="store_true", help="1000 idle, 5000 short connections")
    ap.add_argument("--out", help="also write the tables (markdown) to this file")
    args = ap.parse_args()
    if args.quick:
        args.idle, args.churn = "1000", 5000
    levels = [int(x) for x in args.idle.split(",") if x]
    if not os.access(RDMAGW, os.X_OK):
        sys.exit(f"{RDMAGW} not found: build first (tools/dev/build)")
    # Every process (client, sidecars, echo server) holds one descriptor per
    # idle connection; raise the soft limit to the hard one, and stop the
    # idle levels below it ("20k or the descriptor limit").
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    room = hard - 500
    if max(levels) > room:
        print(f"descriptor limit {hard}: idle levels above {room} are lowered to {room}", file=sys.stderr)
        levels = sorted({min(n, room) for n in levels})

    work = tempfile.mkdtemp(prefix="rdmagw-scale.")
    echo_port, a_tunnel, b_tunnel, listen = free_port(), free_port(), free_port(), free_port()
    a_admin, b_admin = free_port(), free_port()
    with open(f"{work}/a.yaml", "w") as f:
        f.write(f"""node: host-a
admin: "127.0.0.1:{a_admin}"
workers: {args.workers}
log_level: warn
tunnel: {{address: 127.0.0.1, tcp_port: {a_tunnel}, transport: tcp, buffer_size: {args.buffer_size}}}
peers:
  - {{name: host-b, address: 127.0.0.1, tcp_port: {b_tunnel}}}
listeners:
  - {{name: echo, listen: "tcp:127.0.0.1:{listen}", peer: host-b, target: "tcp:127.0.0.1:{echo_port}"}}
""")
    with open(f"{work}/b.yaml", "w") as f:
        f.write(f"""node: host-b
admin: "127.0.0.1:{b_admin}"
workers: {args.workers}
log_level: warn
# One session per worker pair carries every stream: above the default 16384
# streams per session (tunnel.limits) with --workers 1.
tunnel: {{address: 127.0.0.1, tcp_port: {b_tunnel}, transport: tcp, buffer_size: {args.buffer_size},
         limits: {{streams_per_session: 65536}}}}
targets: ["tcp:127.0.0.1:{echo_port}"]
""")
    procs = []
    try:
        procs.append(subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(echo_port)]))
        sidecars = {}
        for name in ("b", "a"):
            log = open(f"{work}/{name}.log", "w")
            sidecars[name] = subprocess.Popen([RDMAGW, "--config", f"{work}/{name}.yaml", "--log-level", "info"],
                                              stderr=log)
            procs.append(sidecars[name])
        wait_port(echo_port)
        wait_log(f"{work}/a.log", "event=ready")
        wait_log(f"{work}/b.log", "event=ready")
        a, b = sidecars["a"].pid, sidecars["b"].pid
        # One connection first: the session exists (on demand), buffers warm.
        _, warm = run_hold(listen, 1)
        release(warm)
        wait_quiet((a_admin, b_admin))

        # Memory a level touched stays resident and serves the next one, so
        # each level's cost is measured from the fresh process.
        fresh = rss_kib(a), rss_kib(b)
        lines = [f"rdmagw pair (TCP transport, workers={args.workers}, buffer_size={args.buffer_size}), "
                 f"{os.cpu_count()} cores; "
                 f"RSS in KiB (VmRSS); fresh: after one connection, before the first level; "
                 f"per connection: (RSS with them - fresh) / N", "",
                 "| idle connections | A RSS fresh | A RSS with | A per conn | B RSS fresh | B RSS with | "
                 "B per conn | open rate direct (conn/s) | open rate through | ratio |",
                 "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        per_conn = [0.0, 0.0]
        for n in levels:
            print(f"idle: {n} connections", file=sys.stderr, flush=True)
            direct_s, p = run_hold(echo_port, n)
            release(p)
            through_s, p = run_hold(listen, n)
            time.sleep(1)  # let both sides settle (every stream opened at the target)
            with_ = rss_kib(a), rss_kib(b)
            release(p)
            wait_quiet((a_admin, b_admin))
            per = [(w - f0) * 1024 / n for f0, w in zip(fresh, with_)]
            per_conn = per
            lines.append(f"| {n} | {fresh[0]} | {with_[0]} | {per[0]:.0f} B | {fresh[1]} | {with_[1]} | "
                         f"{per[1]:.0f} B | {n / direct_s:.0f} | {n / through_s:.0f} | "
                         f"{direct_s / through_s:.2f} |")

        if args.no_churn:
            emit("\n".join(lines), args.out)
            return
        print(f"churn: {args.churn} short connections, {args.clients} clients", file=sys.stderr, flush=True)
        rss0, fd0 = (rss_kib(a), rss_kib(b)), (fds(a), fds(b))
        sessions0 = open(f"{work}/a.log").read().count("event=session_open")
        direct_rate, direct_fail = run_churn(echo_port, args.churn, args.clients)
        through_rate, through_fail = run_churn(listen, args.churn, args.clients)
        wait_quiet((a_admin, b_admin))
        time.sleep(1)
        rss1, fd1 = (rss_kib(a), rss_kib(b)), (fds(a), fds(b))
        sessions = open(f"{work}/a.log").read().count("event=session_open") - sessions0
        rows = [("direct", direct_rate, direct_fail), ("rdmagw pair", through_rate, through_fail)]
        if shutil.which("haproxy"):
            hp = haproxy_pair(work, free_port(), echo_port, procs)
            hp_rate, hp_fail = run_churn(hp, args.churn, args.clients)
            rows.append(("HAProxy pair", hp_rate, hp_fail))
        else:
            print("haproxy not installed (tools/dev/install-deps): no HAProxy column", file=sys.stderr)
        lines += ["", f"{args.churn} short connections (connect, 64 B echoed, close), {args.clients} clients at once",
                  "", "| path | conn/s | vs direct | failed |", "|---|---:|---:|---:|"]
        for name, rate, failed in rows:
            lines.append(f"| {name} | {rate:.0f} | {rate / direct_rate:.2f} | {failed} |")
        lines += ["", "| after churn | A | B |", "|---|---:|---:|",
                  f"| RSS before → after (KiB) | {rss0[0]} → {rss1[0]} | {rss0[1]} → {rss1[1]} |",
                  f"| open descriptors before → after | {fd0[0]} → {fd1[0]} | {fd0[1]} → {fd1[1]} |",
                  f"| sessions dialled during churn | {sessions} | |"]
        print("sizing: workers and sessions", file=sys.stderr, flush=True)
        per_worker, per_session_a, per_session_b = sizing(work)
        lines += ["", "| sizing (idle, TCP transport) | RSS |", "|---|---:|",
                  f"| one worker (1 vs 4 workers, no peers) | {per_worker:.0f} KiB |",
                  f"| one session, dialer (0 vs 64 sessions) | {per_session_a:.1f} KiB |",
                  f"| one session, acceptor | {per_session_b:.1f} KiB |",
                  f"| one idle connection, each sidecar (largest level above) | "
                  f"{max(per_conn) / 1024:.1f} KiB |"]
        emit("\n".join(lines), args.out)
    finally:
        stop_all(procs)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--_hold":
        hold(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "--_churn":
        churn(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
