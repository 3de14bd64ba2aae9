# SPDX-License-Identifier: Apache-2.0
"""local_legs.redirect: the loopback legs between applications and rdmagw
carried past the TCP stack by sockmap (docs/architecture.md, "Local legs
past TCP").

Both sidecars, the servers and the clients run in a cgroup v2 made for the
test (this process joins it for the test's length, so that every socket it
and its children make is in it). Asserted on real processes and sockets:
bytes arrive exact (SHA-256) in both directions on both hosts' legs while
the programs say they redirected them; an application that stops reading
holds a bounded amount and then gets everything in order; resets stay
resets; a stream that ended before its rdmagw exited reaches the
application whole; redis and nginx through the pair; with the mode
unavailable, rdmagw says why once and carries the same bytes on TCP;
takeovers of both hosts mid-transfer and with a stopped reader keep every
byte and the legs redirected, and one by a process without the mode is
refused while the running one carries on.

Needs root, cgroup v2 and a kernel that charges redirected bytes to the
reader (6.13 or later): skipped with the reason elsewhere (the RDMA lab's
6.1), but not on a machine that has them."""

from __future__ import annotations

import hashlib
import os
import platform
import random
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from admin_client import admin_json
from backends import EchoServer, ResetServer, Sha256Server, StallServer, nginx_config, sha256_of_prng
from clients import (RESET_ERRORS, connect, echo_concurrently, free_port, how_stream_ends, recv_exact,
                     require_root_and, wait_for)
from conftest import RDMAGW_BIN, RDMAGWCTL_BIN, ManagedProcess, scaled
from test_resume import RUN_S, Faults, Target, transfer_under_faults
from test_takeover import Upgrades

MiB = 1 << 20
BOUND = 256 * 1024


def cgroup2_mount() -> str | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return fields[1]
    return None


def kernel_charges_redirected_bytes() -> bool:
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (6, 13)


def remove_cgroup(path: Path) -> None:
    """Kills whatever a test left in the cgroup (a sidecar it did not
    stop), then removes it."""
    for _ in range(100):
        left = [p for p in (path / "cgroup.procs").read_text().split() if p]
        if not left:
            break
        for pid in left:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    path.rmdir()


@pytest.fixture
def test_cgroup():
    """A cgroup v2 of the test's own, holding this process (and so every
    process and socket it makes) until the test ends; then moved back and
    removed."""
    mount = cgroup2_mount()
    if os.geteuid() != 0 or mount is None:
        pytest.skip("needs root and cgroup v2")
    own = next(line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::"))
    before = Path(mount + own)
    path = Path(mount) / f"rdmagw-local-legs-{os.getpid()}"
    path.mkdir(exist_ok=True)
    (path / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield str(path)
    finally:
        (before / "cgroup.procs").write_text(str(os.getpid()))
        remove_cgroup(path)


def legs_lines(cgroup: str) -> list[str]:
    return ["local_legs:", "  redirect: true", f"  cgroup: {cgroup}", f"  max_in_flight: {BOUND}"]


def local_legs(sidecar) -> dict:
    return admin_json(sidecar.admin_port, "/stats")["local_legs"]


def redirected_pair(pair, backend, cgroup: str, server=None, target: str | None = None, name: str = "echo", **kw):
    """A pair whose two sidecars redirect their local legs, with listener
    `name` leading to `target` (default: `server`, an EchoServer unless
    given, started here). Skips, with rdmagw's reason, where the mode is
    unavailable, unless this machine kind must have it (CI on 6.13 or
    later: then it fails)."""
    if target is None:
        server = backend(server or EchoServer())
        target = server.endpoint
    p = pair([{"name": name, "target": target}], [target], a_lines=legs_lines(cgroup), b_lines=legs_lines(cgroup),
             **kw)
    require_redirected(p)
    return p, server


def test_both_hosts_legs_are_redirected_and_every_byte_arrives_exact(pair, backend, test_cgroup):
    p, _ = redirected_pair(pair, backend, test_cgroup)
    # Requests and answers, one at a time: every byte of both hosts' legs
    # (host-a: client <-> rdmagw, host-b: rdmagw <-> echo server) in both
    # directions is redirected.
    rounds, size = 300, 100
    with connect(p.address("echo")) as s:
        for i in range(rounds):
            message = bytes([i % 256]) * size
            s.sendall(message)
            got = b""
            while len(got) < size:
                chunk = s.recv(size - len(got))
                assert chunk, "EOF mid-answer"
                got += chunk
            assert got == message
    for side in (p.a, p.b):
        legs = local_legs(side)
        assert legs["bytes_redirected"] >= 2 * rounds * size, (side.name, legs)
    # Bulk, many streams at once, sizes from 1 byte to 3 MiB: exact in both
    # directions, whether the bound and the order rule sent part by TCP.
    rng = random.Random(42)
    payloads = [rng.randbytes(rng.choice([1, 64, 4096, 100_000, 3 * MiB])) for _ in range(scaled(24))]
    got = echo_concurrently(p.address("echo"), payloads, deadline=time.monotonic() + 60)
    for i, (sent, back) in enumerate(zip(payloads, got)):
        assert hashlib.sha256(back).hexdigest() == hashlib.sha256(sent).hexdigest(), f"stream {i} differs"
    metrics = subprocess.run(["curl", "-s", f"http://127.0.0.1:{p.a.admin_port}/metrics"], capture_output=True,
                             text=True, timeout=10).stdout
    assert "rdmagw_local_legs_redirected 1" in metrics
    assert 'rdmagw_local_legs_bytes_total{path="redirected"}' in metrics
    status = subprocess.run([RDMAGWCTL_BIN, "--admin", f"127.0.0.1:{p.a.admin_port}", "status"], capture_output=True,
                            text=True, timeout=10)
    assert status.returncode == 0, status.stderr
    assert f"local legs redirected past TCP (cgroup {test_cgroup})" in status.stdout, status.stdout


def test_an_open_stream_shows_its_leg_redirected(pair, backend, test_cgroup):
    p, _ = redirected_pair(pair, backend, test_cgroup)
    with connect(p.address("echo")) as s:
        s.sendall(b"ping")
        assert s.recv(4) == b"ping"
        streams = wait_for(lambda: admin_json(p.a.admin_port, "/streams")["streams"], what="the stream listed")
        assert streams[0]["local_leg"] == "redirected", streams
        far = wait_for(lambda: admin_json(p.b.admin_port, "/streams")["streams"], what="the far stream listed")
        assert far[0]["local_leg"] == "redirected", far


def unread_bytes(sock: socket.socket) -> int:
    """What the kernel holds for `sock` unread (ss's skmem r: sk_rmem_alloc,
    redirected bytes included)."""
    host, port = sock.getsockname()
    return unread_at(f"{host}:{port}")[0]


def unread_at(src: str, dst: str | None = None) -> tuple[int, int]:
    """For the socket whose own address is `src` (and peer `dst`): what it
    holds unread, and its receive buffer (TCP's own limit, ss's rb)."""
    filters = ["src", src] + (["dst", dst] if dst else [])
    out = subprocess.run(["ss", "-tmnH"] + filters, capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"skmem:\(r(\d+),rb(\d+),", out)
    assert m, f"ss shows no socket memory for {' '.join(filters)}: {out!r}"
    return int(m.group(1)), int(m.group(2))


def read_in_bursts(s: socket.socket, total: int, seed: int, seconds: float, at=None) -> tuple[int, str]:
    """Reads `s` to EOF in random sizes with random short pauses (`seed`);
    `at`: {bytes read: call} made once that many have been read. Returns
    what was read and its SHA-256."""
    rng = random.Random(seed)
    pending = dict(at or {})
    h = hashlib.sha256()
    got = 0
    deadline = time.monotonic() + seconds
    for _ in range(10_000_000):
        assert time.monotonic() < deadline, f"only {got} of {total} bytes read in time"
        for mark in sorted(m for m in pending if got >= m):
            pending.pop(mark)()
        data = s.recv(rng.choice([1, 1000, 65536, 1 << 20]))
        if not data:
            break
        h.update(data)
        got += len(data)
        if rng.random() < 0.01:
            time.sleep(rng.random() * 0.02)
    return got, h.hexdigest()


def test_an_application_that_stops_reading_holds_a_bounded_amount_then_gets_every_byte_in_order(
        pair, backend, test_cgroup):
    total = 48 * MiB
    p, server = redirected_pair(pair, backend, test_cgroup, server=Sha256Server(send_size=total, send_seed=7))
    with connect(p.address("echo"), timeout=30) as s:
        s.shutdown(socket.SHUT_WR)
        # Not a byte read for a while: host-a's rdmagw must stop sending.
        time.sleep(1.5)
        held = unread_bytes(s)
        time.sleep(0.5)
        held_later = unread_bytes(s)
        # rdmagw paces its redirected sends to under max_in_flight; then it
        # sends by TCP, whose window the redirected bytes already fill (they
        # are charged to the same receive memory).
        print(f"unread: {held} then {held_later} (max_in_flight {BOUND})")
        assert held <= 2 * BOUND and held_later <= 2 * BOUND, (held, held_later)
        assert held_later <= held + 64 * 1024, "still growing"
        stream = admin_json(p.a.admin_port, "/streams")["streams"][0]
        assert stream["local_leg"] == "redirected-sending-by-tcp", stream
        # Then read in bursts with pauses: the flow goes back and forth
        # between TCP and redirection; every byte must come in order.
        got, digest = read_in_bursts(s, total, seed=3, seconds=120)
        assert got == total
        assert digest == sha256_of_prng(7, total)
    legs = local_legs(p.a)
    print(f"host-a's legs: {legs}")
    assert legs["bytes_redirected"] > 0 and legs["bytes_tcp"] > 0, legs


def test_a_server_that_stops_reading_bounds_both_hosts_legs_then_gets_every_byte_in_order(
        pair, backend, test_cgroup):
    # The client's bytes cross host-a's leg (rdmagw reads: bounded by the
    # programs) and host-b's leg (rdmagw sends: paced by rdmagw) to a
    # server that reads nothing until released.
    p, server = redirected_pair(pair, backend, test_cgroup, server=StallServer())
    listener = "%s:%d" % p.address("echo")
    h = hashlib.sha256()
    sent = 0
    rng = random.Random(5)
    with connect(p.address("echo"), timeout=30) as s:
        s.setblocking(False)
        client = "%s:%d" % s.getsockname()
        stalled_since = None
        deadline = time.monotonic() + 60
        for _ in range(10_000_000):
            assert time.monotonic() < deadline, f"the chain never filled ({sent} bytes sent)"
            chunk = rng.randbytes(rng.choice([64, 65536]))
            try:
                n = s.send(chunk)
                h.update(chunk[:n])
                sent += n
                stalled_since = None
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 1.0:
                    break
                time.sleep(0.01)
        # Full: what rdmagw-a's socket holds from the client, and what the
        # server's socket holds from rdmagw-b.
        # Each holds at most what TCP alone would (its receive buffer, which
        # TCP grows as rdmagw reads), or twice max_in_flight: unbounded
        # redirection would have queued all that was sent.
        at_a, buffer_a = unread_at(listener, client)
        at_server, buffer_server = unread_at(f"127.0.0.1:{server.port}")
        print(f"sent {sent}; unread at host-a's socket {at_a} (rb {buffer_a}), at the server's {at_server} "
              f"(rb {buffer_server})")
        assert at_a <= max(2 * BOUND, buffer_a + 65536), (at_a, buffer_a)
        assert at_server <= max(2 * BOUND, buffer_server + 65536), (at_server, buffer_server)
        assert sent > 4 * (at_a + at_server), "the chain should hold far less than was sent"
        server.release()
        s.setblocking(True)
        s.settimeout(60)
        tail = rng.randbytes(2 * MiB)
        s.sendall(tail)
        h.update(tail)
        sent += len(tail)
        s.shutdown(socket.SHUT_WR)
        result = server.results.get(timeout=60)
    assert result["error"] is None, result
    assert result["recv_bytes"] == sent
    assert result["recv_sha"] == h.hexdigest()


def test_a_server_reset_reaches_each_client_as_a_reset(pair, backend, test_cgroup):
    p, server = redirected_pair(pair, backend, test_cgroup, server=ResetServer())
    ends = [how_stream_ends(p.address("echo"), b"x" * 1000, timeout=10) for _ in range(10)]
    assert ends == ["reset"] * 10, ends
    assert server.reset_count == 10


def test_a_killed_sidecar_reaches_a_client_holding_unread_bytes_as_a_reset(pair, backend, test_cgroup):
    # The client has redirected bytes queued unread when its rdmagw dies:
    # whatever it reads then, the stream must not end as a clean EOF.
    p, _ = redirected_pair(pair, backend, test_cgroup, server=Sha256Server(send_size=64 * MiB, send_seed=9))
    with connect(p.address("echo"), timeout=30) as s:
        wait_for(lambda: unread_bytes(s) > 0, what="bytes queued at the client")
        p.a.kill9()
        s.settimeout(10)
        got = 0
        how = None
        for _ in range(100_000):
            try:
                data = s.recv(1 << 20)
            except RESET_ERRORS:
                how = "reset"
                break
            if not data:
                how = "eof"
                break
            got += len(data)
        assert how == "reset", f"{how} after {got} bytes"


def start_redis(procs, tmp_path) -> int:
    require_root_and(("redis-server", "redis-benchmark", "redis-cli"), "redis through redirected legs")
    server = shutil.which("redis-server")
    port = free_port()
    redis = ManagedProcess("redis-server", [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                            "--appendonly", "no", "--dir", str(tmp_path)], tmp_path / "redis.log")
    procs.append(redis)
    redis.start()
    wait_for(lambda: answers(port, b"PING\r\n", b"+PONG"), what="redis-server")
    return port


def answers(port: int, request: bytes, reply: bytes) -> bool:
    """Whether a server on `port` answers `request` with `reply` first."""
    try:
        with connect(("127.0.0.1", port), timeout=1) as s:
            s.sendall(request)
            return s.recv(64).startswith(reply)
    except OSError:
        return False


def redis_command(port: int, *args: str, last: str | None = None) -> str:
    """redis-cli's answer; `last`, if given, is the command's last argument,
    passed on stdin (-x): a value too long for an argument."""
    cli = ["redis-cli", "-h", "127.0.0.1", "-p", str(port)] + (["-x"] if last is not None else [])
    out = subprocess.run(cli + list(args), input=last, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.deadline(180)
def test_redis_through_redirected_legs_answers_as_directly(pair, backend, procs, tmp_path, test_cgroup):
    rport = start_redis(procs, tmp_path)
    p, _ = redirected_pair(pair, backend, test_cgroup, target=f"tcp:127.0.0.1:{rport}", name="redis")
    _, lport = p.address("redis")
    bench = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(lport), "-q", "-n", "20000", "-P", "16",
                            "-t", "set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,mset"],
                           capture_output=True, text=True, timeout=150)
    assert bench.returncode == 0 and "ERR" not in bench.stdout + bench.stderr, bench.stdout + bench.stderr
    # Values written through the pair read back the same directly, and the
    # other way round, 1 byte to 512 KiB.
    rng = random.Random(11)
    for i, size in enumerate([1, 100, 4096, 65536, 512 * 1024]):
        value = rng.randbytes(size // 2 + 1).hex()[:size]
        assert redis_command(lport, "SET", f"k{i}", last=value).strip() == "OK"
        assert redis_command(rport, "GET", f"k{i}").rstrip("\n") == value
        assert redis_command(rport, "SET", f"d{i}", last=value).strip() == "OK"
        assert redis_command(lport, "GET", f"d{i}").rstrip("\n") == value
    for side in (p.a, p.b):
        assert local_legs(side)["bytes_redirected"] > 0, (side.name, local_legs(side))


def test_nginx_through_redirected_legs_serves_every_request_whole(pair, backend, tmp_path, test_cgroup, procs):
    require_root_and(("nginx", "wrk", "curl"), "nginx through redirected legs")
    www = tmp_path / "www"
    www.mkdir()
    page = random.Random(12).randbytes(3 * MiB)
    (www / "big").write_bytes(page)
    (www / "small").write_bytes(b"x" * 1024)
    port = free_port()
    conf = nginx_config(tmp_path, f"""    access_log off;
    server {{ listen 127.0.0.1:{port}; root {www}; }}""")
    nginx = ManagedProcess("nginx", ["nginx", "-p", str(tmp_path), "-c", str(conf)], tmp_path / "nginx.log")
    procs.append(nginx)
    nginx.start()
    wait_for(lambda: answers(port, b"GET /small HTTP/1.0\r\n\r\n", b"HTTP/1.1 200"), what="nginx")
    p, _ = redirected_pair(pair, backend, test_cgroup, target=f"tcp:127.0.0.1:{port}", name="web")
    _, lport = p.address("web")
    for _ in range(5):
        got = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{lport}/big"], capture_output=True, timeout=30)
        assert got.returncode == 0 and hashlib.sha256(got.stdout).digest() == hashlib.sha256(page).digest()
    for extra in ([], ["-H", "Connection: close"]):
        wrk = subprocess.run(["wrk", "-t", "1", "-c", "16", "-d", "2", *extra, f"http://127.0.0.1:{lport}/small"],
                             capture_output=True, text=True, timeout=60)
        assert wrk.returncode == 0, wrk.stderr
        requests = int(re.search(r"(\d+) requests in", wrk.stdout).group(1))
        assert requests > 100 and "Non-2xx" not in wrk.stdout and "Socket errors" not in wrk.stdout, wrk.stdout


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_stream_that_ended_before_its_sidecar_went_reaches_the_application_whole(pair, backend, test_cgroup, how):
    # Its bytes were redirected into the client's socket, unread, and the
    # stream ended cleanly; then host-a's rdmagw, whose maps held the
    # socket, exits (SIGTERM) or is killed. The client must still read
    # every byte, then EOF.
    size = 200_000
    p, _ = redirected_pair(pair, backend, test_cgroup, server=Sha256Server(send_size=size, send_seed=13))
    with connect(p.address("echo"), timeout=30) as s:
        s.shutdown(socket.SHUT_WR)
        wait_for(lambda: "event=access" in p.a.log_text(), what="the stream's clean end at host-a")
        assert "end=close" in p.a.log_text()
        assert local_legs(p.a)["bytes_redirected"] >= size
        if how == "stop":
            p.a.stop()
        else:
            p.a.kill9()
        h = hashlib.sha256()
        got = 0
        s.settimeout(10)
        for _ in range(10_000):
            data = s.recv(1 << 20)
            if not data:
                break
            h.update(data)
            got += len(data)
        assert got == size and h.hexdigest() == sha256_of_prng(13, size)


def test_unavailable_means_said_once_and_every_leg_on_tcp(pair, backend, test_cgroup):
    echo = backend(EchoServer())
    missing = test_cgroup + "/not-there"
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], a_lines=legs_lines(missing))
    legs = local_legs(p.a)
    assert legs["state"] == "unavailable" and legs["reason"], legs
    assert p.a.log_text().count("event=local_legs_unavailable") == 1
    assert "not-there" in p.a.log_text()
    status = subprocess.run([RDMAGWCTL_BIN, "--admin", f"127.0.0.1:{p.a.admin_port}", "status"], capture_output=True,
                            text=True, timeout=10)
    assert "local legs unavailable, on TCP (cannot open the cgroup" in status.stdout, status.stdout
    payloads = [random.Random(i).randbytes(200_000) for i in range(4)]
    got = echo_concurrently(p.address("echo"), payloads, deadline=time.monotonic() + 30)
    assert got == payloads
    assert admin_json(p.a.admin_port, "/stats")["local_legs"]["bytes_redirected"] == 0
    # A sidecar without the mode says nothing of it.
    assert local_legs(p.b)["state"] == "off"
    assert "local_legs" not in p.b.log_text()


@pytest.fixture
def pod_cgroup(test_cgroup):
    """test_cgroup as a pod: this process (so the sidecars, servers and
    clients it starts) in a child of it, as a container is in its pod's."""
    container = Path(test_cgroup) / "container"
    container.mkdir()
    (container / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield test_cgroup
    finally:
        (Path(test_cgroup) / "cgroup.procs").write_text(str(os.getpid()))
        remove_cgroup(container)


def test_cgroup_pod_attaches_to_the_parent_of_the_sidecars_own_cgroup(pair, backend, pod_cgroup):
    # host-a finds the hierarchy itself (the first cgroup2 mount), host-b is
    # told where it is, as a container is (local_legs.cgroup_fs).
    echo = backend(EchoServer())
    pod = ["local_legs:", "  redirect: true", "  cgroup: pod", f"  max_in_flight: {BOUND}"]
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], a_lines=pod,
             b_lines=pod + [f"  cgroup_fs: {cgroup2_mount()}"])
    require_redirected(p)
    for side in (p.a, p.b):
        assert local_legs(side)["cgroup"] == pod_cgroup, (side.name, local_legs(side))
        assert f"event=local_legs_redirected cgroup={pod_cgroup} " in side.log_text(), side.log_text()
        assert admin_json(side.admin_port, "/config")["local_legs"]["cgroup"] == "pod"
    with connect(p.address("echo")) as s:
        round_trips(s, 200)
    for side in (p.a, p.b):
        assert local_legs(side)["bytes_redirected"] >= 2 * 200 * 100, (side.name, local_legs(side))


def test_a_sidecar_with_only_cap_bpf_and_cap_net_admin_redirects(pair, backend, test_cgroup):
    # What a container gets (rdmagw-inject --local-legs): root, but with no
    # CAP_SYS_ADMIN or CAP_PERFMON, under which the verifier refuses more
    # (pointer arithmetic across paths, for one).
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], a_lines=legs_lines(test_cgroup),
             b_lines=legs_lines(test_cgroup), start=False)
    only = ["setpriv", "--bounding-set", "-all,+bpf,+net_admin,+ipc_lock", "--inh-caps", "-all", "--"]
    for side in (p.b, p.a):
        side.argv = only + side.argv
        side.start()
    for side in (p.a, p.b):
        status = Path(f"/proc/{side.proc.pid}/status").read_text()
        cap_eff = int(re.search(r"^CapEff:\t([0-9a-f]+)", status, re.M).group(1), 16)
        assert cap_eff == (1 << 39) | (1 << 12) | (1 << 14), f"{side.name}: CapEff {cap_eff:#x}"
    require_redirected(p)
    with connect(p.address("echo")) as s:
        round_trips(s, 200)
    for side in (p.a, p.b):
        assert local_legs(side)["bytes_redirected"] >= 2 * 200 * 100, (side.name, local_legs(side))


def test_a_transparent_listener_takes_connects_past_nat_with_its_legs_redirected(pair, backend, procs, tmp_path,
                                                                                 test_cgroup):
    # No iptables at all: with the legs redirected, a transparent listener's
    # tunnel routes are taken at connect() (cgroup/connect4). host-a runs
    # with a gid of its own, by which its own connects are never taken.
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    far = backend(EchoServer())      # behind host-b
    near = backend(EchoServer())     # a passthrough route's destination, on this host
    port = near.address[1]
    listen_port = free_port()
    listener = ["listeners:", "  - name: out", f'    listen: "transparent:127.0.0.1:{listen_port}"', "    routes:",
                f'      - {{match: "127.0.0.1/32:{port}", action: passthrough}}',
                f'      - {{match: "127.0.0.0/8:{port}", peer: host-b, target: "{far.endpoint}"}}']
    p = pair([], [far.endpoint], a_lines=legs_lines(test_cgroup), b_lines=legs_lines(test_cgroup), start=False)
    config = p.a.config_path.read_text()
    assert "listeners: []\n" in config
    p.a.config_path.write_text(config.replace("listeners: []\n", "\n".join(listener) + "\n"))
    p.a.argv = ["setpriv", "--regid", "4242", "--clear-groups", "--"] + p.a.argv
    p.b.start()
    p.a.start()
    require_redirected(p)
    assert "local_legs_capture_unavailable" not in p.a.log_text(), p.a.log_text()
    before = local_legs(p.a)["bytes_redirected"]
    # To 127.0.0.2: nothing listens there; the tunnel route takes it to host-b.
    with socket.create_connection(("127.0.0.2", port), timeout=10) as s:
        assert s.getpeername() == ("127.0.0.2", port)  # where the application meant to go
        round_trips(s, 100)
        # 3 MiB more, 64 KiB at a time, checked by SHA-256.
        payload = random.Random(5).randbytes(3 * MiB)
        back = hashlib.sha256()
        for at in range(0, len(payload), 64 * 1024):
            chunk = payload[at:at + 64 * 1024]
            s.sendall(chunk)
            back.update(recv_exact(s, len(chunk), time.monotonic() + 10))
        assert back.hexdigest() == hashlib.sha256(payload).hexdigest()
    assert local_legs(p.a)["bytes_redirected"] - before >= 2 * 100 * 100, local_legs(p.a)
    wait_for(lambda: "event=access" in p.a.log_text(), timeout=10, what="host-a's access line")
    assert f"destination=127.0.0.2:{port} peer=host-b" in p.a.log_text(), p.a.log_text()
    # To 127.0.0.1: the passthrough route, which rdmagw connects itself: its
    # own connect is not taken again (no loop), and reaches the server.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        round_trips(s, 10)
    # The echo server counts a reply after its send returns: the client may
    # have read it already.
    wait_for(lambda: near.bytes_echoed >= 1000, timeout=10, what="the passthrough's 1000 bytes at the server")
    wait_for(lambda: "direction=passthrough" in p.a.log_text(), timeout=10, what="the passthrough's access line")
    assert f"destination=127.0.0.1:{port} " in p.a.log_text()

    # A takeover of host-a: a connection held across it keeps its leg and
    # what getpeername() says; new connects are taken by the new process.
    up = Upgrades(p, procs, tmp_path, RDMAGW_BIN)
    with socket.create_connection(("127.0.0.2", port), timeout=10) as held:
        round_trips(held, 10)
        up.take_over("host-a")
        new = up.current["host-a"]
        assert "event=local_legs_adopted" in new.log_text(), new.log_text()
        assert held.getpeername() == ("127.0.0.2", port)
        round_trips(held, 100)
        with socket.create_connection(("127.0.0.2", port), timeout=10) as fresh:
            assert fresh.getpeername() == ("127.0.0.2", port)
            round_trips(fresh, 100)
    assert "local_legs_capture_unavailable" not in new.log_text(), new.log_text()
    # (The inherited connection's line has no destination: a takeover's
    # image does not carry it.)
    wait_for(lambda: f"destination=127.0.0.2:{port} peer=host-b" in new.log_text(), timeout=10,
             what="the new process's access line of the connection it took")


def test_a_root_sidecar_takes_no_connect_and_says_why_once(pair, backend, test_cgroup):
    # As root:root rdmagw's own connects could not be told from the
    # applications': nothing is taken at connect(), which it says once; the
    # legs stay redirected and transparent connections are left to iptables
    # (none here, so the connect below goes where it was sent).
    far = backend(EchoServer())
    port, listen_port = free_port(), free_port()
    p = pair([], [far.endpoint], a_lines=legs_lines(test_cgroup), b_lines=legs_lines(test_cgroup), start=False)
    config = p.a.config_path.read_text()
    p.a.config_path.write_text(config.replace("listeners: []\n", "\n".join([
        "listeners:", "  - name: out", f'    listen: "transparent:127.0.0.1:{listen_port}"', "    routes:",
        f'      - {{match: "127.0.0.0/8:{port}", peer: host-b, target: "{far.endpoint}"}}']) + "\n"))
    p.b.start()
    p.a.start()
    require_redirected(p)
    assert p.a.log_text().count("event=local_legs_capture_unavailable") == 1, p.a.log_text()
    assert "rdmagw runs as uid 0 and gid 0" in p.a.log_text()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=5).close()


def test_cgroup_pod_is_refused_where_the_parent_is_the_hierarchys_root(pair, backend, test_cgroup):
    # test_cgroup is a child of the root: its parent holds every process of
    # the host, which `pod` never takes. Said once, and the legs run on TCP.
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint],
             a_lines=["local_legs:", "  redirect: true", "  cgroup: pod"])
    legs = local_legs(p.a)
    assert legs["state"] == "unavailable", legs
    assert f"the parent of rdmagw's cgroup {test_cgroup} is the root of the hierarchy" in legs["reason"], legs
    assert p.a.log_text().count("event=local_legs_unavailable") == 1
    payloads = [random.Random(i).randbytes(100_000) for i in range(3)]
    assert echo_concurrently(p.address("echo"), payloads, deadline=time.monotonic() + 30) == payloads


def require_redirected(p) -> None:
    """Skips, with rdmagw's reason, where the mode is unavailable, unless
    this machine kind must have it (CI on 6.13 or later: then it fails)."""
    for side in (p.a, p.b):
        legs = local_legs(side)
        if legs["state"] != "redirected":
            if kernel_charges_redirected_bytes() and os.environ.get("CI"):
                pytest.fail(f"{side.name}: local legs {legs['state']} on kernel {platform.release()}: "
                            f"{legs['reason']}")
            pytest.skip(f"local legs unavailable here: {legs['reason']}")


def round_trips(s: socket.socket, rounds: int, size: int = 100) -> None:
    for i in range(rounds):
        message = bytes([i % 256]) * size
        s.sendall(message)
        assert recv_exact(s, size, time.monotonic() + 10) == message


@pytest.mark.deadline(RUN_S + 120)
def test_takeovers_of_both_sides_mid_transfer_keep_every_byte_and_the_legs_redirected(
        pair, backend, procs, tmp_path, test_cgroup):
    # test_takeover.py's transfer (streams both ways, SHA-256 at both ends,
    # no reset, old processes exit 0), with both hosts' legs redirected:
    # the maps and the cgroup attachment move with the connections.
    target = backend(Target())
    echo = backend(EchoServer())
    lines = legs_lines(test_cgroup)
    p = pair([{"name": "io", "target": target.endpoint}, {"name": "echo", "target": echo.endpoint}],
             [target.endpoint, echo.endpoint], a_lines=lines, b_lines=lines)
    require_redirected(p)
    up = Upgrades(p, procs, tmp_path, RDMAGW_BIN)
    with connect(p.address("echo"), timeout=10) as held:
        round_trips(held, 10)
        order = ["host-a", "host-b", "host-a"]
        summary = transfer_under_faults(p.address("io"), target,
                                        Faults(lambda i: up.take_over(order[i]), len(order), 1.0))
        assert len(up.old) == len(order), f"{len(up.old)} takeovers happened during the transfer: {summary}"
        for old in up.old:
            assert old.returncodes()[-1] == 0, f"{old.name} exited {old.returncodes()}:\n{old.tail()}"
            log = old.log_text()
            assert "event=taken_over" in log, f"{old.name} did not hand over:\n{old.tail()}"
            assert "event=stream_reset" not in log, f"{old.name} reset streams:\n{old.tail()}"
        # The stream held open throughout is still redirected in the new
        # processes, in both directions of both hosts' legs.
        a, b = up.current["host-a"], up.current["host-b"]
        for sc in (a, b):
            assert "event=local_legs_adopted" in sc.log_text(), sc.tail()
            assert local_legs(sc)["state"] == "redirected"
            assert "event=local_legs_programs_kept" not in sc.log_text(), sc.tail()
        before = {sc.name: local_legs(sc)["bytes_redirected"] for sc in (a, b)}
        round_trips(held, 300)
        for sc in (a, b):
            grew = local_legs(sc)["bytes_redirected"] - before[sc.name]
            assert grew >= 2 * 300 * 100, (sc.name, grew)
            # The transfer's streams are done: the held one is left.
            streams = wait_for(lambda: (lambda l: l if len(l) == 1 else None)(
                admin_json(sc.admin_port, "/streams")["streams"]), what=f"{sc.name}'s one stream left")
            assert streams[0]["local_leg"] == "redirected", streams
    # A connection made now is redirected by the new processes' programs.
    with connect(p.address("echo"), timeout=10) as fresh:
        before = local_legs(a)["bytes_redirected"]
        round_trips(fresh, 100)
        assert local_legs(a)["bytes_redirected"] - before >= 2 * 100 * 100


@pytest.mark.deadline(240)
def test_a_reader_stopped_across_takeovers_stays_bounded_then_gets_every_byte_in_order(
        pair, backend, procs, tmp_path, test_cgroup):
    total = 48 * MiB
    p, _ = redirected_pair(pair, backend, test_cgroup, server=Sha256Server(send_size=total, send_seed=17))
    up = Upgrades(p, procs, tmp_path, RDMAGW_BIN)
    with connect(p.address("echo"), timeout=30) as s:
        s.shutdown(socket.SHUT_WR)
        time.sleep(1.0)
        # Taken over while the client holds what it was paced to: the new
        # process goes on pacing the same flow.
        up.take_over("host-a")
        time.sleep(1.0)
        held = unread_bytes(s)
        print(f"unread after the takeover: {held} (max_in_flight {BOUND})")
        assert held <= 2 * BOUND, held
        got, digest = read_in_bursts(s, total, seed=19, seconds=150,
                                     at={total // 3: lambda: up.take_over("host-b"),
                                         2 * total // 3: lambda: up.take_over("host-a")})
        assert got == total and digest == sha256_of_prng(17, total)
    assert len(up.old) == 3
    for old in up.old:
        assert old.returncodes()[-1] == 0 and "event=taken_over" in old.log_text(), old.tail()
    legs = local_legs(up.current["host-a"])
    assert legs["bytes_redirected"] > 0 and legs["bytes_tcp"] > 0, legs


def test_a_takeover_by_a_process_without_the_mode_is_refused_and_the_running_one_carries_on(
        pair, backend, test_cgroup, sidecar):
    p, _ = redirected_pair(pair, backend, test_cgroup)
    with connect(p.address("echo")) as s:
        s.sendall(b"before")
        assert s.recv(6) == b"before"
        newer = sidecar("host-a-new", p.a.config_path.read_text().replace("  redirect: true", "  redirect: false"))
        newer.argv.append("--takeover")
        newer.start(wait=False)
        code = newer.wait(timeout=30)
        assert code != 0
        assert "local_legs.redirect" in newer.log_text(), newer.tail()
        assert "event=takeover_failed" in p.a.log_text(), p.a.tail()
        # The running one carries on, its stream and its legs untouched.
        s.sendall(b"after")
        assert s.recv(5) == b"after"
        assert local_legs(p.a)["state"] == "redirected"
        before = local_legs(p.a)["bytes_redirected"]
        round_trips(s, 50)
        assert local_legs(p.a)["bytes_redirected"] - before >= 2 * 50 * 100
