# SPDX-License-Identifier: Apache-2.0
"""Chaos soak (docs/operations.md, "The chaos soak"): random tunnel faults for a bounded time over mixed
traffic, and not one application connection may notice.

host-a and host-b are network namespaces on a veth pair (the test makes
them); the tunnel goes through a relay in host-b (tunnel_relay.py, a
process) so that a middlebox can close it. The applications reach their
rdmagw over Unix sockets: only the tunnel crosses the link. For
RDMAGW_CHAOS_SECONDS (default 90; perf/chaos_soak.sh runs the long one)
these run at once:

  bulk     waves of BULK_STREAMS streams x BULK_SIZE both ways, SHA-256
  short    SHORT_THREADS loops of connect, send 1 B..64 KiB, half-close,
           read the echo to EOF, compare
  redis    redis-benchmark runs (SET, GET, INCR, LPUSH, LPOP) to redis-server

while faults are injected one after another at random (seed printed;
RDMAGW_CHAOS_SEED replays it; RDMAGW_CHAOS_FAULTS=reset,drop picks kinds;
RDMAGW_CHAOS_LOG_LEVEL=debug logs every stream):

  reset    ss -K on the tunnel (RST both ways)
  close    the relay closes every tunnel connection (FIN both ways, bytes in flight lost)
  drop     iptables DROP of the tunnel's packets, held past the keepalive timeout
  link     the veth down, held past the keepalive timeout, then up
  takeover a new rdmagw process takes over host-a's or host-b's (rdmagw --takeover)

It prints streams, bytes, connections, requests, faults by kind, resumes,
resets and corruption, and asserts zero resets and zero corruption.
"""

from __future__ import annotations

import collections
import datetime
import errno
import hashlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from clients import free_port, require_root_and, socket_end
from conftest import ManagedProcess, tcp_only
from netns_hosts import two_hosts
from backends import EchoServer
from test_resume import Target, move_streams, stream_problems
from test_takeover import Upgrades

DURATION_S = float(os.environ.get("RDMAGW_CHAOS_SECONDS", "90"))
SEED = int(os.environ.get("RDMAGW_CHAOS_SEED", "0")) or random.SystemRandom().randrange(1, 1 << 31)
A_IP, B_IP = "10.204.0.1", "10.204.0.2"
# resume_timeout_ms well above any fault (they hold under 3 s): the harness's
# own Python processes, the relay that carries the tunnel included, have been
# seen to stop running for up to 11 s at once (the stall watch below), and a
# relay that does not run passes no resume on. The summary prints the longest
# suspension, so a slow resume still shows.
TUNNEL = {"keepalive_interval_ms": 200, "keepalive_timeout_ms": 1000, "connect_timeout_ms": 500,
          "resume_timeout_ms": 60000}
LOG_LEVEL = os.environ.get("RDMAGW_CHAOS_LOG_LEVEL", "")
# CI leaves takeover out: one long soak twice failed to resume a session
# within resume_timeout_ms after a takeover, most likely because this
# harness's relay stopped running meanwhile (docs/operations.md, "The soak's
# two failures"); perf/chaos_soak.sh includes it, test_takeover.py covers it.
FAULT_KINDS = os.environ.get("RDMAGW_CHAOS_FAULTS", "reset,close,drop,link").split(",")
HOLD_S = (1.3, 2.5)     # drop and link faults: always past keepalive_timeout_ms
GAP_S = (0.3, 2.0)      # between faults
BULK_STREAMS = 20
BULK_SIZE = 4 << 20
WAVE_BOUND_S = 60       # a wave takes a few seconds; one stuck this long is a failure
SHORT_THREADS = 2
SHORT_MAX = 64 * 1024
REDIS_N = 20000
IO_TIMEOUT_S = 30.0     # a socket call blocked this long is a failure (faults hold < 3 s)
RELAY = os.path.join(os.path.dirname(__file__), "tunnel_relay.py")


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.n = collections.Counter()
        self.problems: list[str] = []

    def add(self, key: str, k: int = 1):
        with self.lock:
            self.n[key] += k

    def problem(self, what: str):
        with self.lock:
            self.n["problems"] += 1
            if len(self.problems) < 20:
                self.problems.append(f"{utc_now()} {what}")


def guarded(name, tally, fn, *args):
    def run():
        try:
            fn(*args)
        except Exception as e:
            tally.problem(f"{name}: {type(e).__name__}: {e}")
    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


class StallWatch:
    """Notices when this test process itself did not run for a while (a
    starved machine, a paused VM): a fault the soak reports then may be the
    harness's, not rdmagw's, and the summary says so."""

    def __init__(self):
        self.stalls: list[str] = []

    def run(self, stop_at: float):
        last = time.monotonic()
        while last < stop_at:
            time.sleep(0.25)
            now = time.monotonic()
            if now - last > 1.25:
                self.stalls.append(f"{utc_now()} {now - last - 0.25:.1f} s")
            last = now


def admin_get(ns: str, port: int, path: str) -> str:
    r = subprocess.run(["ip", "netns", "exec", ns, "curl", "-sS", "--max-time", "5",
                        f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, timeout=10)
    return r.stdout or r.stderr


def bulk_loop(addr, target, stop_at, tally, snapshot):
    wave = 0
    while time.monotonic() < stop_at:
        clients, ends, _ = move_streams(addr, target, BULK_STREAMS, BULK_SIZE, bound_s=WAVE_BOUND_S,
                                        seed0=(wave % 4) * 2 * BULK_STREAMS, on_timeout=snapshot)
        bad = stream_problems(clients, ends, BULK_STREAMS, BULK_SIZE)
        if bad:
            stuck = [f"{c.seed}: sent {c.sent} got {c.got}" for c in clients if c.end is None]
            tally.problem(f"bulk wave {wave}: {len(bad)} problems: {bad[:3]}; stuck clients {stuck[:5]}")
        del target.ends[:]  # every end of the wave finished: a long soak keeps none
        tally.add("bulk_streams", BULK_STREAMS)
        tally.add("bulk_bytes", 2 * BULK_STREAMS * BULK_SIZE)
        wave += 1


def short_loop(path, stop_at, tally, rng):
    """One connection at a time, from this one thread: a reset is seen by the
    call that meets it."""
    while time.monotonic() < stop_at:
        payload = rng.randbytes(rng.randint(1, SHORT_MAX))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(IO_TIMEOUT_S)
        got = bytearray()
        try:
            s.connect(path)
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except OSError as e:
            kind = "reset" if e.errno in (errno.ECONNRESET, errno.EPIPE) else socket_end(e, "io")
            tally.add("short_resets" if kind == "reset" else "short_errors")
            tally.problem(f"short connection: {kind} after {len(got)} of {len(payload)} bytes")
            continue
        finally:
            s.close()
        if bytes(got) != payload:
            tally.add("short_corrupt")
            tally.problem(f"short connection: echo of {len(payload)} bytes came back as {len(got)} "
                          f"bytes, sha {hashlib.sha256(got).hexdigest()[:12]}")
        else:
            tally.add("short_ok")
            tally.add("short_bytes", 2 * len(payload))


def redis_loop(bench, path, stop_at, tally):
    while time.monotonic() < stop_at:
        try:
            r = subprocess.run([bench, "-s", path, "-c", "20", "-n", str(REDIS_N), "-q",
                                "-t", "set,get,incr,lpush,lpop"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=180)
        except subprocess.TimeoutExpired:
            tally.problem("redis-benchmark did not finish in 180 s")
            continue
        out = (r.stdout + r.stderr).decode("utf-8", "replace")
        done = len(re.findall(r"^\w+: [\d.]+ requests per second", out.replace("\r", "\n"), re.M))
        if r.returncode != 0 or "error" in out.lower() or done != 5:
            tally.problem(f"redis-benchmark exited {r.returncode}, {done} of 5 tests: {out[-400:]!r}")
        else:
            tally.add("redis_runs")
            tally.add("redis_requests", 5 * REDIS_N)


class Chaos:
    """The fault injector: one fault at a time, random kind, hold and gap."""

    def __init__(self, hosts, relay: ManagedProcess, relay_port: int, rng: random.Random, upgrades: Upgrades):
        self.hosts, self.relay, self.port, self.rng = hosts, relay, str(relay_port), rng
        self.upgrades = upgrades
        self.done = collections.Counter()
        self.effective = collections.Counter()
        self.timeline: list[str] = []  # UTC start and end of each fault, to read beside the logs

    def run(self, stop_at: float):
        kinds = FAULT_KINDS
        while time.monotonic() < stop_at:
            time.sleep(self.rng.uniform(*GAP_S))
            if time.monotonic() >= stop_at:
                return
            kind = self.rng.choice(kinds)
            began = utc_now()
            took = getattr(self, kind)()
            if took:
                self.effective[kind] += 1
            self.done[kind] += 1
            self.timeline.append(f"{began} .. {utc_now()} {kind}{'' if took else ' (no effect)'}")

    def in_a(self, *argv):
        return self.hosts.exec_in(self.hosts.a, *argv)

    def reset(self) -> bool:
        r = self.in_a("ss", "-K", "-tn", "state", "established", f"( dport = :{self.port} )")
        return len(r.stdout.strip().splitlines()) >= 2

    def close(self) -> bool:
        before = self.relay.log_text().count("closed ")
        self.relay.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            lines = re.findall(r"^closed (\d+)$", self.relay.log_text(), re.M)
            if len(lines) > before:
                return int(lines[-1]) > 0
            time.sleep(0.02)
        raise AssertionError("the relay did not answer SIGUSR1")

    def takeover(self) -> bool:
        self.upgrades.take_over(self.rng.choice(["host-a", "host-b"]))
        return self.upgrades.old[-1].returncodes()[-1] == 0

    def hold(self, on, off):
        on()
        try:
            time.sleep(self.rng.uniform(*HOLD_S))
        finally:
            off()
        return True

    def drop(self) -> bool:
        rules = [["INPUT", "-p", "tcp", "--sport", self.port, "-j", "DROP"],
                 ["OUTPUT", "-p", "tcp", "--dport", self.port, "-j", "DROP"]]
        return self.hold(lambda: [self.in_a("iptables", "-I", *r) for r in rules],
                         lambda: [self.in_a("iptables", "-D", *r) for r in rules])

    def link(self) -> bool:
        dev = self.hosts.veth_a
        return self.hold(lambda: self.in_a("ip", "link", "set", dev, "down"),
                         lambda: self.in_a("ip", "link", "set", dev, "up"))


@pytest.fixture
def hosts():
    require_root_and(("ip", "iptables", "ss"), "chaos soak")
    with two_hosts(A_IP, B_IP, 24) as h:
        yield h


@tcp_only
@pytest.mark.deadline(int(DURATION_S) + 240)
def test_chaos_soak_no_application_connection_notices(pair, backend, procs, hosts, sock_dir, tmp_path):
    server, bench = shutil.which("redis-server"), shutil.which("redis-benchmark")
    if not server or not bench:
        pytest.skip("redis-server / redis-benchmark not installed (tools/dev/install-deps installs them)")
    rng = random.Random(SEED)
    print(f"chaos seed {SEED} (RDMAGW_CHAOS_SEED={SEED} replays the sequence of faults)")

    redis_sock = str(sock_dir / "redis-server.sock")
    redis = ManagedProcess("redis-server", [server, "--port", "0", "--unixsocket", redis_sock,
                                            "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                           tmp_path / "redis.log")
    procs.append(redis)
    redis.start()
    bulk = backend(Target(str(sock_dir / "bulk-target.sock"), lifetime_s=DURATION_S + 300))
    # Both targets must outlive the soak: a server that stops at its own
    # lifetime closes what it holds, which a client would take for a failure.
    echo = backend(EchoServer(str(sock_dir / "echo-target.sock"), lifetime_s=DURATION_S + 300))
    for _ in range(200):
        if os.path.exists(redis_sock):
            break
        time.sleep(0.05)
    targets = [bulk.endpoint, f"unix:{sock_dir / 'echo-target.sock'}", f"unix:{redis_sock}"]
    p = pair([{"name": "bulk", "target": targets[0], "listen": "unix"},
              {"name": "echo", "target": targets[1], "listen": "unix"},
              {"name": "redis", "target": targets[2], "listen": "unix"}], targets,
             a_tunnel=TUNNEL, b_tunnel=TUNNEL, hosts=(hosts.a, A_IP, hosts.b, B_IP), start=False)
    if LOG_LEVEL:
        # debug: every stream's open and close with its byte counts, to find
        # one that went wrong on both sides (a long soak's logs grow large).
        for sc in (p.a, p.b):
            sc.config_path.write_text(sc.config_path.read_text() + f"log_level: {LOG_LEVEL}\n")
    relay_port = free_port()
    relay = ManagedProcess("relay", ["ip", "netns", "exec", hosts.b, sys.executable, RELAY,
                                     B_IP, str(relay_port), B_IP, str(p.b.tunnel_port)],
                           tmp_path / "relay.log")
    procs.append(relay)
    text = p.a.config_path.read_text()
    assert text.count(f"tcp_port: {p.b.tunnel_port}\n") == 1
    p.a.config_path.write_text(text.replace(f"tcp_port: {p.b.tunnel_port}\n", f"tcp_port: {relay_port}\n"))
    relay.start()
    assert relay.wait_log("^listening$", 10), relay.tail()
    p.b.start()
    p.a.start()

    tally = Tally()
    upgrades = Upgrades(p, procs, tmp_path, p.a.argv[p.a.argv.index("--config") - 1])
    chaos = Chaos(hosts, relay, relay_port, rng, upgrades)
    t0 = time.monotonic()
    stop_at = t0 + DURATION_S
    def snapshot():
        """What both sidecars say about their streams and sessions, when a wave is stuck."""
        for name, ns in (("host-a", hosts.a), ("host-b", hosts.b)):
            sc = upgrades.current[name]
            print(f"--- {name} /streams:\n{admin_get(ns, sc.admin_port, '/streams?limit=1000')}")
            print(f"--- {name} /peers:\n{admin_get(ns, sc.admin_port, '/peers')}")

    threads = [guarded("bulk", tally, bulk_loop, p.address("bulk"), bulk, stop_at, tally, snapshot),
               guarded("redis", tally, redis_loop, bench, p.address("redis"), stop_at, tally)]
    threads += [guarded(f"short{i}", tally, short_loop, p.address("echo"), stop_at, tally,
                        random.Random(SEED + i)) for i in range(SHORT_THREADS)]
    fault_thread = guarded("chaos", tally, chaos.run, stop_at)
    watch = StallWatch()
    threads.append(guarded("stall-watch", tally, watch.run, stop_at))
    for t in threads + [fault_thread]:
        t.join(timeout=DURATION_S + 200)
        assert not t.is_alive(), f"{t.name} still running past its bound"
    elapsed = time.monotonic() - t0

    # The echo target's view: every connection it accepted ended cleanly.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and echo.completed < echo.accepted:
        time.sleep(0.05)
    a_log, b_log = upgrades.logs("host-a"), upgrades.logs("host-b")
    resumes = a_log.count("event=session_resumed")
    suspended = [int(ms) for ms in re.findall(r"event=session_resumed .*suspended_ms=(\d+)", a_log + b_log)]
    stream_resets = (a_log + b_log).count("event=stream_reset")
    n = tally.n
    print(f"chaos soak: {elapsed:.0f} s, seed {SEED}\n"
          f"  faults: {sum(chaos.done.values())} ({dict(chaos.done)}), took effect {dict(chaos.effective)}\n"
          f"  resumes (host-a): {resumes}, longest suspension {max(suspended, default=0)} ms\n"
          f"  bulk: {n['bulk_streams']} streams, {n['bulk_bytes'] / 2**30:.2f} GiB\n"
          f"  short connections: {n['short_ok']} ok, {n['short_bytes'] / 2**20:.1f} MiB\n"
          f"  redis: {n['redis_runs']} runs, {n['redis_requests']} requests\n"
          f"  echo target: accepted {echo.accepted}, ended cleanly {echo.completed}\n"
          f"  resets: short {n['short_resets']}, streams reset by rdmagw {stream_resets}\n"
          f"  corruption: short {n['short_corrupt']}; problems {n['problems']}\n"
          f"  stalls of the test process (> 1 s): {len(watch.stalls)} {watch.stalls[:10]}\n"
          f"  relay: {relay.log_text().count('slow ')} slow moments {re.findall('^slow .*$', relay.log_text(), re.M)[:10]}")
    if tally.problems:
        print("faults:\n  " + "\n  ".join(chaos.timeline))
    assert not tally.problems, tally.problems
    assert n["short_resets"] == 0 and n["short_corrupt"] == 0 and stream_resets == 0
    assert echo.completed == echo.accepted, f"echo target: {echo.accepted} accepted, {echo.completed} clean"
    assert not bulk.errors and not echo.errors, bulk.errors + echo.errors
    assert n["bulk_streams"] > 0 and n["short_ok"] > 0 and n["redis_runs"] > 0
    assert sum(chaos.effective.values()) >= min(4, sum(chaos.done.values())), dict(chaos.effective)
    assert resumes >= 1
    assert all(sc.running() for sc in upgrades.current.values())
    bad_exits = [(sc.name, sc.returncodes()) for sc in upgrades.old if sc.returncodes()[-1] != 0]
    assert not bad_exits, f"old processes that did not hand over cleanly: {bad_exits}"
