# SPDX-License-Identifier: Apache-2.0
"""The parts of the eRDMA redis kit that need no hosts: arguments, the port
plan, the files it writes (rdmagw and redis configurations), the
redis-benchmark command, and what it makes of the numbers (medians, ratios,
CPU per request, the report). erdma_bench.py drives the hosts with them;
tests/perf/test_erdma_kit.py checks them here, without eRDMA or ssh.
"""
import argparse
import datetime
import ipaddress
import json
import os
import re
import shlex
import socket
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # noqa: E402  (perf/benchlib.py)

PATHS = ("direct", "rdma", "tcp")
PATH_LABELS = {
    "direct": "kernel TCP, direct",
    "rdma": "rdmagw pair, RDMA (eRDMA)",
    "tcp": "rdmagw pair, TCP transport",
}

# Alibaba Cloud's NetACC (a socket library loaded into the application, over
# eRDMA): redis SET at 767k requests/s over eRDMA against 333k over kernel
# TCP, the figures Alibaba gives for it on g8ae-class instances, as quoted to
# this project. Its setup (redis configuration, client options, instance
# size) is not known to be this kit's, so the report sets the two side by
# side as ratios, and says so. Change them here if a newer figure is found.
NETACC = {"erdma_rps": 767_000, "tcp_rps": 333_000}
NETACC_DOC = "https://www.alibabacloud.com/help/en/ecs/user-guide/netacc-instructions"

# redis-benchmark tests whose result line benchlib.parse_redis_benchmark reads
# ("NAME: N requests per second"); others print "LRANGE_100 (first 100
# elements):" or "MSET (10 keys):", which it does not.
TESTS = ("set", "get", "incr", "lpush", "rpush", "lpop", "rpop", "sadd", "hset", "spop", "zadd", "zpopmin")

# Options of redis-benchmark the kit sets itself: --bench-extra must not.
_KIT_BENCH_OPTIONS = {"-h", "-p", "-a", "-n", "-c", "-d", "-t", "-P", "-q", "--threads", "--csv", "-s", "-u",
                      "--user", "--pass", "-l"}

# Offsets from --base-port. Only the server's tunnel ports (the first three)
# take connections from the other host; the rest are loopback or unused by
# the other host. In --server local mode both sides share one address, hence
# distinct ports for everything.
PORT_OFFSETS = {
    "b_rdma_tcp": 0, "b_rdma_rdma": 1,      # rdmagw B of the RDMA pair: TCP (unused) and RDMA CM
    "b_tcp_tcp": 2, "b_tcp_rdma": 3,        # rdmagw B of the TCP pair (its rdma_port is never listened on)
    "a_rdma_tcp": 4, "a_rdma_rdma": 5,      # rdmagw A's own tunnel ports (nobody dials them)
    "a_tcp_tcp": 6, "a_tcp_rdma": 7,
    "a_rdma_listen": 8, "a_tcp_listen": 9,  # where redis-benchmark connects, 127.0.0.1 on the client
    "a_rdma_admin": 10, "a_tcp_admin": 11, "b_rdma_admin": 12, "b_tcp_admin": 13,
}
DEFAULT_SLAB = 128 << 20  # tunnel.rdma.slab_size's default (docs/configuration.md)


# --- argument types: each error names the value and the reason; argparse adds the option ---


def _int_in(lo, hi=None):
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value
    return parse


def parse_cpu_list(text: str) -> list:
    """'0-3,8' -> [0, 1, 2, 3, 8], the notation of taskset -c and lscpu."""
    cpus = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not m:
            raise argparse.ArgumentTypeError(f"{text!r} is not a CPU list like 0-3,8 ({part!r})")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise argparse.ArgumentTypeError(f"{text!r}: range {part.strip()!r} runs backwards")
        if hi > 1023:
            raise argparse.ArgumentTypeError(f"{text!r}: CPU {hi} is above 1023")
        cpus += [c for c in range(lo, hi + 1) if c not in cpus]
    return cpus


def parse_byte_size(text: str) -> int:
    """A byte size as rdmagw's configuration writes it: 65536, 64KiB, 128 MiB, 1GiB."""
    m = re.fullmatch(r"(\d+) ?(KiB|MiB|GiB)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"must be a byte count or a number with KiB, MiB or GiB, got {text!r}")
    return int(m.group(1)) << {None: 0, "KiB": 10, "MiB": 20, "GiB": 30}[m.group(2)]


def _byte_size_in(lo, hi):
    def parse(text):
        value = parse_byte_size(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi} bytes, got {text!r} ({value})")
        return value
    return parse


def _paths(text):
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in PATHS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: each path must be one of {', '.join(PATHS)}")
    if "direct" not in names:
        # Every ratio is against direct, measured in the same rounds.
        raise argparse.ArgumentTypeError(f"{text!r}: 'direct' is needed, the other paths are measured against it")
    return [p for p in PATHS if p in names]


def _tests(text):
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in TESTS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: supported tests are {','.join(TESTS)} "
                                          f"(the output parser reads 'NAME: N requests per second' lines)")
    return names


def _bench_extra(text):
    words = shlex.split(text)
    taken = sorted(w for w in words if w in _KIT_BENCH_OPTIONS)
    if taken:
        raise argparse.ArgumentTypeError(f"{text!r}: {', '.join(taken)} is set by the kit (use its own option)")
    return words


def _ssh_dest(text):
    if text == "local":
        return text
    if not re.fullmatch(r"(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9._:-]+|(?:[A-Za-z0-9._-]+@)?\[[0-9A-Fa-f:.]+\]", text) \
            or text.startswith("-"):
        raise argparse.ArgumentTypeError(f"{text!r} is not an ssh destination like user@10.0.0.2 (or 'local')")
    return text


def _ip(text):
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a numeric IPv4 or IPv6 address, got {text!r}") from None


USAGE_EXAMPLE = """\
example (on the client host, from a checkout of rdmagw):
  perf/erdma/erdma_bench.py --server root@10.0.0.2 --rounds 5 --label "g8ae.4xlarge, cn-hangzhou-k"
  perf/erdma/erdma_bench.py --server local --paths direct,tcp --requests 20000 --rounds 1   # a smoke run here

Server-side ports to open to the client (security group), with the default --base-port 7471:
  7471-7473 (rdmagw B's tunnels: TCP transport and RDMA CM) and --redis-port (6379).
See perf/erdma/README.md.
"""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="erdma_bench.py",
        description="redis-benchmark from this host (the client) to redis-server on --server, three ways:\n"
                    "  direct  kernel TCP\n"
                    "  rdma    through an rdmagw pair on eRDMA (client -> rdmagw A -> RDMA -> rdmagw B -> redis)\n"
                    "  tcp     through the same pair on its TCP transport\n"
                    "Prints requests/s of each, the ratio to direct and each rdmagw's CPU time per request\n"
                    "(medians of --rounds), next to NetACC's published figure, and writes a markdown report.",
        epilog=USAGE_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    hosts = ap.add_argument_group("hosts")
    hosts.add_argument("--server", required=True, type=_ssh_dest, metavar="USER@HOST",
                       help="the server host, reached by ssh in BatchMode (key-based login); 'local' runs "
                            "both sides on this host (a smoke run of the kit, loopback only)")
    hosts.add_argument("--server-ip", type=_ip, metavar="IP",
                       help="the server's address on its eRDMA interface (redis and rdmagw B listen there); "
                            "default: the host of --server when it is an address")
    hosts.add_argument("--client-ip", type=_ip, metavar="IP",
                       help="this host's address on its eRDMA interface (rdmagw A's tunnel.address); "
                            "default: the source address the kernel routes --server-ip from")
    hosts.add_argument("--ssh-option", action="append", default=[], metavar="OPT",
                       help="passed to ssh as -o OPT (repeatable), e.g. IdentityFile=~/.ssh/bench")
    hosts.add_argument("--rdmagw", default=None, metavar="PATH",
                       help="rdmagw binary on this host (default: build/bin/rdmagw of this checkout if built, "
                            "else rdmagw on PATH)")
    hosts.add_argument("--server-rdmagw", default=None, metavar="PATH",
                       help="rdmagw binary on the server (default: the same path as --rdmagw)")
    hosts.add_argument("--redis-server", default="redis-server", metavar="PATH", help="on the server")
    hosts.add_argument("--redis-benchmark", default="redis-benchmark", metavar="PATH", help="on this host")

    load = ap.add_argument_group("load (redis-benchmark)")
    load.add_argument("--paths", type=_paths, default=list(PATHS), metavar="LIST",
                      help="which of direct,rdma,tcp to measure (default all; direct is always needed)")
    load.add_argument("--rounds", type=_int_in(1, 100), metavar="N", default=5,
                      help="rounds; medians are reported (default 5)")
    load.add_argument("--requests", type=_int_in(1), metavar="N", default=2_000_000,
                      help="requests per test per run, redis-benchmark -n (default 2000000)")
    load.add_argument("--warmup-requests", type=_int_in(0), metavar="N", default=200_000,
                      help="one unrecorded run of this many per path first (default 200000; 0: none)")
    load.add_argument("--clients", type=_int_in(1, 100_000), metavar="N", default=100, help="-c (default 100)")
    load.add_argument("--data-size", type=_int_in(1, 1 << 29), metavar="N", default=512,
                      help="-d, value bytes (default 512)")
    load.add_argument("--threads", type=_int_in(1, 500), metavar="N", default=4, help="--threads (default 4)")
    load.add_argument("--pipeline", type=_int_in(1, 10_000), metavar="N", default=1, help="-P (default 1: unpipelined)")
    load.add_argument("--tests", type=_tests, default=["set"], metavar="LIST", help="-t (default set)")
    load.add_argument("--bench-extra", type=_bench_extra, default=[], metavar="ARGS",
                      help="more redis-benchmark arguments, one quoted string (e.g. '-r 1000000')")
    load.add_argument("--run-timeout", type=_int_in(10, 3600), metavar="N", default=300,
                      help="seconds one redis-benchmark run may take before it is stopped (default 300)")

    gw = ap.add_argument_group("rdmagw and redis on both hosts")
    gw.add_argument("--workers", type=_int_in(1, 256), metavar="N", default=4,
                    help="rdmagw workers per process (default 4)")
    gw.add_argument("--gw-cpus", type=parse_cpu_list, metavar="LIST",
                    help="worker_cpus of every rdmagw (both hosts), e.g. 8-11; default: the kernel places them")
    gw.add_argument("--redis-cpus", type=parse_cpu_list, metavar="LIST", help="taskset for redis-server")
    gw.add_argument("--bench-cpus", type=parse_cpu_list, metavar="LIST", help="taskset for redis-benchmark")
    gw.add_argument("--buffer-size", type=_byte_size_in(1 << 10, 1 << 20), metavar="SIZE",
                    help="tunnel.buffer_size (default: rdmagw's, 32KiB)")
    gw.add_argument("--slab-size", type=_byte_size_in(1 << 20, 64 << 30), metavar="SIZE",
                    help="tunnel.rdma.slab_size (default: rdmagw's, 128MiB; memlock must cover workers x this)")
    gw.add_argument("--busy-poll-us", type=_int_in(0, 1_000_000), metavar="US",
                    help="tunnel.rdma.busy_poll_us (default: rdmagw's, 0)")
    gw.add_argument("--rdma-device", metavar="NAME", help="tunnel.rdma.device, e.g. erdma_0 (default: any)")
    gw.add_argument("--redis-port", type=_int_in(1, 65535), metavar="N", default=6379,
                    help="redis-server's port (default 6379)")
    gw.add_argument("--redis-io-threads", type=_int_in(1, 128), metavar="N", default=1,
                    help="redis io-threads, reads included when above 1 (default 1, redis' default)")
    gw.add_argument("--base-port", type=_int_in(1024, 65535 - max(PORT_OFFSETS.values())), default=7471, metavar="N",
                    help="first of 14 ports the pairs use (default 7471; see README)")

    out = ap.add_argument_group("output")
    out.add_argument("--out", metavar="FILE",
                     help="markdown report (default perf/results/DATE-erdma-redis.md, never overwritten)")
    out.add_argument("--label", default="", metavar="TEXT",
                     help="what the hosts are, for the report, e.g. 'g8ae.4xlarge x2, cn-hangzhou-k'")
    out.add_argument("--dry-run", action="store_true",
                     help="print the configurations and commands it would use, and exit (no ssh, no process)")
    return ap


def _loopback(ip: str) -> bool:
    return ipaddress.ip_address(ip).is_loopback


def route_source_ip(dest_ip: str) -> str:
    """The address this host sends from to dest_ip. A UDP connect() only asks
    the routing table: no packet leaves."""
    family = socket.AF_INET6 if ":" in dest_ip else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM)
    try:
        s.connect((dest_ip, 9))
        return s.getsockname()[0]
    finally:
        s.close()


def parse_args(argv=None, route=route_source_ip) -> argparse.Namespace:
    """Parses and cross-checks the arguments; errors exit 2 with a line naming
    the argument, the value and why. `route` finds --client-ip's default."""
    ap = build_parser()
    o = ap.parse_args(argv)
    o.local = o.server == "local"
    host = o.server.rsplit("@", 1)[-1].strip("[]")
    if o.server_ip is None:
        if o.local:
            o.server_ip = "127.0.0.1"
        else:
            try:
                o.server_ip = str(ipaddress.ip_address(host))
            except ValueError:
                ap.error(f"argument --server-ip: required when --server names a host ({host!r}) rather than "
                         f"an address: give the server's address on its eRDMA interface")
    if not o.local and _loopback(o.server_ip):
        ap.error(f"argument --server-ip: {o.server_ip} is a loopback address, but --server {o.server} is "
                 f"another host: the client would not reach it")
    if o.client_ip is None:
        try:
            o.client_ip = "127.0.0.1" if o.local else route(o.server_ip)
        except OSError as e:
            ap.error(f"argument --client-ip: no route from this host to --server-ip {o.server_ip} ({e}); "
                     f"give --client-ip")
    if not o.local and _loopback(o.client_ip):
        ap.error(f"argument --client-ip: {o.client_ip} is a loopback address; the server's rdmagw must "
                 f"reach this host's over the network")
    if not o.local and o.client_ip == o.server_ip:
        ap.error(f"argument --client-ip: {o.client_ip} is also --server-ip; two hosts are measured")
    ports = port_plan(o.base_port)
    if o.redis_port in ports.values():
        ap.error(f"argument --redis-port: {o.redis_port} is one of the rdmagw ports "
                 f"{o.base_port}-{o.base_port + max(PORT_OFFSETS.values())} (--base-port {o.base_port})")
    if o.rdmagw is None:
        built = os.path.join(benchlib.ROOT, "build", "bin", "rdmagw")
        o.rdmagw = built if os.access(built, os.X_OK) else "rdmagw"
    if o.server_rdmagw is None:
        o.server_rdmagw = o.rdmagw
    o.slab_bytes = o.slab_size or DEFAULT_SLAB
    return o


def port_plan(base: int) -> dict:
    return {name: base + off for name, off in PORT_OFFSETS.items()}


def server_open_ports(o) -> list:
    """The ports the server must accept from the client (security group)."""
    p = port_plan(o.base_port)
    ports = [o.redis_port]
    if "rdma" in o.paths:
        # B listens on its tcp_port even on transport: rdma; open both.
        ports += [p["b_rdma_tcp"], p["b_rdma_rdma"]]
    if "tcp" in o.paths:
        ports.append(p["b_tcp_tcp"])
    return ports


def memlock_needed_kib(o) -> int:
    """What rdmagw on RDMA pins: workers x slab_size (docs/rdma.md)."""
    return o.workers * o.slab_bytes // 1024


def memlock_ok(ulimit_text: str, need_kib: int) -> bool:
    """`ulimit -l` prints KiB or 'unlimited'."""
    text = ulimit_text.strip()
    if text == "unlimited":
        return True
    if not text.isdigit():
        raise ValueError(f"ulimit -l printed {text!r}")
    return int(text) >= need_kib


# --- the files -------------------------------------------------------------------


def _q(text) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset of it)."""
    return json.dumps(str(text))


def _endpoint(ip: str, port: int) -> str:
    return f"tcp:[{ip}]:{port}" if ":" in ip else f"tcp:{ip}:{port}"


def gateway_configs(o, path: str, key_a: str, key_b: str) -> tuple:
    """(rdmagw A's YAML, rdmagw B's YAML) for path 'rdma' or 'tcp'. A runs on
    the client with a listener for redis-benchmark on 127.0.0.1; B on the
    server may open only redis on 127.0.0.1."""
    assert path in ("rdma", "tcp")
    p = port_plan(o.base_port)
    target = _endpoint("127.0.0.1", o.redis_port)

    def common(side, ip, key, tcp_port, rdma_port, admin):
        lines = [f"# rdmagw {side.upper()} of the {path} path, written by perf/erdma/erdma_bench.py",
                 f"node: {_q(f'erdma-{side}-{path}')}",
                 f"admin: {_q(f'127.0.0.1:{admin}')}",
                 f"workers: {o.workers}"]
        if o.gw_cpus:
            lines.append(f"worker_cpus: [{', '.join(str(c) for c in o.gw_cpus)}]")
        lines += ["log_level: info",
                  "tunnel:",
                  f"  address: {_q(ip)}",
                  f"  tcp_port: {tcp_port}",
                  f"  rdma_port: {rdma_port}",
                  # rdma never falls back: a run that says RDMA was on RDMA.
                  f"  transport: {path}"]
        if o.buffer_size:
            lines.append(f"  buffer_size: {o.buffer_size}")
        # A tunnel other hosts reach needs auth; the key is made for this run only.
        lines.append(f"  auth: {{mode: psk, key_files: [{_q(key)}]}}")
        if path == "rdma":
            rdma = []
            if o.rdma_device:
                rdma.append(f"    device: {_q(o.rdma_device)}")
            if o.slab_size:
                rdma.append(f"    slab_size: {o.slab_size}")
            if o.busy_poll_us is not None:
                rdma.append(f"    busy_poll_us: {o.busy_poll_us}")
            if rdma:
                lines += ["  rdma:"] + rdma
        return lines

    a = common("a", o.client_ip, key_a, p[f"a_{path}_tcp"], p[f"a_{path}_rdma"], p[f"a_{path}_admin"])
    a += ["peers:",
          # always: every worker dials its session at start, so the transport
          # is checked before the first measured request.
          f"  - {{name: b, address: {_q(o.server_ip)}, tcp_port: {p[f'b_{path}_tcp']}, "
          f"rdma_port: {p[f'b_{path}_rdma']}, connect: always}}",
          "listeners:",
          f"  - {{name: redis, listen: {_q(_endpoint('127.0.0.1', p[f'a_{path}_listen']))}, peer: b, "
          f"target: {_q(target)}}}",
          "targets: []"]
    b = common("b", o.server_ip, key_b, p[f"b_{path}_tcp"], p[f"b_{path}_rdma"], p[f"b_{path}_admin"])
    b += [f"targets: [{_q(target)}]"]
    return "\n".join(a) + "\n", "\n".join(b) + "\n"


def redis_conf(o, password: str) -> str:
    binds = "127.0.0.1" if o.server_ip == "127.0.0.1" else f"{o.server_ip} 127.0.0.1"
    lines = ["# redis-server for perf/erdma/erdma_bench.py: in memory only, password per run",
             f"port {o.redis_port}",
             f"bind {binds}",
             'save ""',
             "appendonly no",
             "daemonize no",
             'logfile ""',
             f"requirepass {password}"]
    if o.redis_io_threads > 1:
        lines += [f"io-threads {o.redis_io_threads}", "io-threads-do-reads yes"]
    return "\n".join(lines) + "\n"


def bench_target(o, path: str) -> tuple:
    """Where redis-benchmark connects for a path: (host, port)."""
    if path == "direct":
        return o.server_ip, o.redis_port
    return "127.0.0.1", port_plan(o.base_port)[f"a_{path}_listen"]


def benchmark_argv(o, path: str, requests: int, password: str) -> list:
    host, port = bench_target(o, path)
    argv = []
    if o.bench_cpus:
        argv += ["taskset", "-c", ",".join(str(c) for c in o.bench_cpus)]
    argv += [o.redis_benchmark, "-h", host, "-p", str(port), "-a", password,
             "-c", str(o.clients), "-d", str(o.data_size), "--threads", str(o.threads),
             "-P", str(o.pipeline), "-t", ",".join(o.tests), "-n", str(requests), "-q"]
    return argv + o.bench_extra


def bench_label(o) -> str:
    """The load as one would type it (without host, port and password)."""
    words = ["redis-benchmark", "-c", o.clients, "-d", o.data_size, "--threads", o.threads, "-t", ",".join(o.tests),
             "-n", o.requests]
    if o.pipeline > 1:
        words += ["-P", o.pipeline]
    return " ".join(str(w) for w in words + o.bench_extra)


def parse_bench_output(o, text: str) -> dict:
    """{"SET": requests/s, ...} for every test asked; a missing one is an error."""
    found = benchlib.parse_redis_benchmark(text)
    missing = [t.upper() for t in o.tests if t.upper() not in found]
    if missing:
        raise ValueError(f"redis-benchmark printed no result for {', '.join(missing)}:\n{text[-1500:]}")
    return {t.upper(): found[t.upper()] for t in o.tests}


# --- the numbers -------------------------------------------------------------------


def cpu_us_per_request(before: float, after: float, requests: int) -> float:
    """CPU microseconds per request from two utime+stime readings (seconds)."""
    if requests <= 0:
        raise ValueError(f"requests must be positive, got {requests}")
    if after < before:
        raise ValueError(f"CPU time went backwards ({before} s -> {after} s): was the process restarted?")
    return (after - before) / requests * 1e6


def summarise(runs: list, paths: list) -> dict:
    """Medians per path from the recorded runs.

    A run: {"round", "path", "rps": {TEST: r/s}, "requests": n,
            "cpu_s": {"a": s, "b": s, "redis": s}} (a and b absent for direct).
    Returns {path: {"rounds": n, "rps": {TEST: median}, "ratio": {TEST: median/direct median},
                    "ratio_range": {TEST: (min, max) of same-round ratios},
                    "cpu_us": {"a"|"b"|"pair"|"redis": median µs per request}}}.
    """
    by_path = {p: [r for r in runs if r["path"] == p] for p in paths}
    if not by_path.get("direct"):
        raise ValueError("no direct run recorded: the ratios have no baseline")
    out = {}
    for p, rs in by_path.items():
        if not rs:
            continue
        tests = list(rs[0]["rps"])
        cpu = {}
        for who in ("a", "b", "redis"):
            per = [r["cpu_s"][who] / r["requests"] * 1e6 for r in rs if who in r["cpu_s"]]
            if per:
                cpu[who] = statistics.median(per)
        pair = [(r["cpu_s"]["a"] + r["cpu_s"]["b"]) / r["requests"] * 1e6 for r in rs
                if "a" in r["cpu_s"] and "b" in r["cpu_s"]]
        if pair:
            cpu["pair"] = statistics.median(pair)
        out[p] = {"rounds": len(rs), "rps": {t: statistics.median(r["rps"][t] for r in rs) for t in tests},
                  "cpu_us": cpu}
    direct_by_round = {r["round"]: r for r in by_path["direct"]}
    for p, s in out.items():
        s["ratio"] = {t: s["rps"][t] / out["direct"]["rps"][t] for t in s["rps"]}
        s["ratio_range"] = {}
        for t in s["rps"]:
            same = [r["rps"][t] / direct_by_round[r["round"]]["rps"][t] for r in by_path[p]
                    if r["round"] in direct_by_round]
            if same:
                s["ratio_range"][t] = (min(same), max(same))
    return out


def netacc_line(summary: dict) -> str:
    """One line that sets this run's RDMA/direct next to NetACC's eRDMA/TCP."""
    theirs = NETACC["erdma_rps"] / NETACC["tcp_rps"]
    head = (f"NetACC (Alibaba Cloud, published): redis SET {NETACC['erdma_rps'] / 1000:.0f}k req/s over eRDMA "
            f"vs {NETACC['tcp_rps'] / 1000:.0f}k over kernel TCP, {theirs:.2f}x.")
    if "rdma" not in summary or "SET" not in summary["rdma"]["rps"]:
        return head + " This run measured no SET over the RDMA pair, so there is nothing to set beside it."
    ours = summary["rdma"]["ratio"]["SET"]
    return (f"{head} This run: rdmagw over eRDMA {summary['rdma']['rps']['SET'] / 1000:.0f}k vs direct "
            f"{summary['direct']['rps']['SET'] / 1000:.0f}k, {ours:.2f}x "
            f"({ours / theirs:.2f} of NetACC's gain; setups differ, compare ratios, not req/s).")


def _fmt_rps(x) -> str:
    return f"{x:,.0f}"


def _fmt_us(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def results_table(summary: dict) -> str:
    paths = [p for p in PATHS if p in summary]
    tests = list(summary["direct"]["rps"])
    header = ["path"]
    for t in tests:
        header += [f"{t} req/s", f"{t} vs direct"]
    header += ["rdmagw A µs CPU/req", "rdmagw B µs CPU/req", "A+B µs CPU/req", "redis-server µs CPU/req"]
    rows = []
    for p in paths:
        s = summary[p]
        row = [PATH_LABELS[p]]
        for t in tests:
            lo, hi = s["ratio_range"].get(t, (None, None))
            spread = f" ({lo:.2f}-{hi:.2f})" if p != "direct" and lo is not None else ""
            row += [_fmt_rps(s["rps"][t]), f"{s['ratio'][t]:.2f}{spread}"]
        row += [_fmt_us(s["cpu_us"].get(k)) for k in ("a", "b", "pair", "redis")]
        rows.append(row)
    return benchlib.markdown_table(header, rows)


def rounds_table(runs: list) -> str:
    """Every run, in the order it ran."""
    rows = []
    for r in runs:
        cpu = r["cpu_s"]
        rows.append([r["round"], PATH_LABELS[r["path"]],
                     " ".join(f"{t} {_fmt_rps(v)}" for t, v in r["rps"].items()),
                     _fmt_us(cpu["a"] / r["requests"] * 1e6 if "a" in cpu else None),
                     _fmt_us(cpu["b"] / r["requests"] * 1e6 if "b" in cpu else None),
                     _fmt_us(cpu["redis"] / r["requests"] * 1e6 if "redis" in cpu else None)])
    return benchlib.markdown_table(["round", "path", "req/s", "A µs/req", "B µs/req", "redis µs/req"], rows)


def format_report(o, summary: dict, runs: list, meta: dict) -> str:
    """The markdown report. meta: {"date", "command", "commit", "hosts": {name: text},
    "sessions": {path: text}, "configs": {name: yaml}}."""
    rounds = max((s["rounds"] for s in summary.values()), default=0)
    parts = [f"# redis over rdmagw on eRDMA vs kernel TCP ({meta.get('date', '')})", ""]
    if o.label:
        parts += [f"Hosts: {o.label}.", ""]
    parts += [f"Command: `{meta.get('command', '')}`" + (f" at {meta['commit']}" if meta.get("commit") else "")
              + ".", "",
              f"Load: `{bench_label(o)}` from the client host; median of {rounds} rounds, paths in a rotating "
              f"order within each round. rdmagw: workers={o.workers}"
              + (f", worker_cpus {','.join(map(str, o.gw_cpus))}" if o.gw_cpus else "")
              + (f", buffer_size {o.buffer_size}" if o.buffer_size else "")
              + (f", slab_size {o.slab_size}" if o.slab_size else "")
              + (f", busy_poll_us {o.busy_poll_us}" if o.busy_poll_us is not None else "")
              + "; psk auth, no encryption. CPU per request: utime+stime of each process "
                "(/proc/PID/stat) over the run, divided by the requests of the run.", "",
              results_table(summary), "",
              netacc_line(summary), "",
              "Ratio: median req/s of the path over median req/s of direct; in parentheses the lowest and "
              "highest same-round ratio. The rdmagw paths add two loopback hops (redis-benchmark to rdmagw A, "
              "rdmagw B to redis) that NetACC, a library inside the application, does not have.", ""]
    if meta.get("sessions"):
        parts += ["Sessions (rdmagw A's /peers after the warm-up):", ""]
        parts += [f"- {PATH_LABELS[p]}: {text}" for p, text in meta["sessions"].items()] + [""]
    parts += ["## Every run", "", rounds_table(runs), ""]
    if meta.get("hosts"):
        parts += ["## Hosts", ""]
        for name, text in meta["hosts"].items():
            parts += [f"{name}:", "", "```", text.strip(), "```", ""]
    if meta.get("configs"):
        parts += ["## rdmagw configurations", ""]
        for name, text in meta["configs"].items():
            parts += [f"`{name}`:", "", "```yaml", text.strip(), "```", ""]
    return "\n".join(parts).rstrip() + "\n"


def default_out(root: str, date: str) -> str:
    """perf/results/DATE-erdma-redis.md, or -2, -3... if taken: a report is never overwritten."""
    base = os.path.join(root, "perf", "results", f"{date}-erdma-redis")
    path, n = base + ".md", 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}.md"
    return path


def today() -> str:
    return datetime.date.today().isoformat()
