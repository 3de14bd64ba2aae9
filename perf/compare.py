#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""rdmagw against HAProxy and against no proxy at all, in one run, same topology.

Eight paths to the same backends on this machine:
  direct          client -> backend
  haproxy         client -> haproxy A -> haproxy B -> backend   (mode tcp)
  haproxy-splice  the same, with option splice-request/splice-response
  rdmagw          client -> rdmagw A -> tunnel (TCP transport) -> rdmagw B -> backend
  rdmagw-splice   the same with tunnel.tcp_splice: true (B pipes large DATA payloads by splice)
  direct-unix     client -> backend over its Unix socket        (redis tests only)
  rdmagw-unix     client -> rdmagw A over a Unix socket, B -> backend over its Unix socket
                  (the local legs of node mode or explicit listeners; redis tests only:
                  the other clients speak TCP alone)
  rdmagw-redirect the rdmagw path with local_legs.redirect: both local legs past TCP
                  (sockmap). Opt-in (--paths): needs root and cgroup v2. It gets its
                  own backends, started in a cgroup made for it with both rdmagw, and
                  its clients run in that cgroup too, so the other paths' connections
                  never meet its programs.
and, through each, in turns (the order of the paths rotates every round):
  redis-set, redis-get      redis-benchmark -c 50 -d 512, unpipelined
  redis-set-p16, redis-get-p16   the same with -P 16
  iperf3                    one bulk stream
  pingpong                  sockperf ping-pong, 64 B, round-trip p50/p99
  hol                       the same ping-pong while an iperf3 stream runs
                            through the same path (for rdmagw: the same session)
  hol-apart                 rdmagw only: the bulk stream through a second rdmagw
                            pair instead, as busy cores without a shared session
  http-keepalive            wrk -c 32 against nginx (a 1 KiB page)
  http-close                the same with Connection: close

For every run it reads the CPU time of both proxy processes of the path
(utime + stime from /proc/PID/stat), of the backend, and of the client (as
this script's waited-for child), and prints medians: throughput and its
ratio to direct, CPU per request, per GiB or per round trip, latencies,
everyone's CPU per request with the throughput ratio it predicts on shared
cores, the targets (CPU, throughput, latency) as ratios against HAProxy at its best
setting for each figure, and the rdmagw pair's RSS and descriptors before
the run and after each round.  --perf-sched adds one ping-pong per path
under `perf sched record`: the wake-ups of a round trip and their delays.

  perf/compare.py                        # 5 paths, 3 rounds, about 13 minutes
  perf/compare.py --out perf/results/$(date +%F)-compare.md
  perf/compare.py --guard                # CI: under a minute; exit 1 when rdmagw
                                         # costs more CPU per request than HAProxy

Everything shares the 2 cores: the client, the backends and both proxies of
a path. Only ratios measured in the same run mean anything here.
"""
import argparse
import datetime
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from benchlib import free_port, wait_port  # noqa: E402

PATHS = ("direct", "haproxy", "haproxy-splice", "rdmagw", "rdmagw-splice", "direct-unix", "rdmagw-unix",
         "rdmagw-redirect")
DEFAULT_PATHS = PATHS[:-1]  # rdmagw-redirect needs root and cgroup v2: asked for by name
REDIRECT = "rdmagw-redirect"
UNIX_PATHS = ("direct-unix", "rdmagw-unix")  # redis only: redis-benchmark -s
TESTS = ("redis-set", "redis-get", "redis-set-p16", "redis-get-p16", "iperf3", "pingpong", "hol", "hol-apart",
         "http-keepalive", "http-close")
BACKENDS = ("redis", "iperf", "sockperf", "http")
TWIN = "rdmagw-twin"  # a second rdmagw pair: hol-apart's bulk stream goes through it
GIB = 1 << 30


# --- the backends and the proxies ----------------------------------------------


class Topology:
    """Starts the backends and every proxy pair; ports[path][backend] is
    where a client connects, pids[path] the proxy processes to measure."""

    def __init__(self, work: str, args):
        self.work = work
        self.args = args
        self.procs = []
        self.ports = {}
        self.pids = {}
        self.admin = {}  # rdmagw paths: admin ports, in the order of pids
        self.backend_pids = {}
        self.own_backend_pids = {}  # paths with backends of their own (rdmagw-redirect)
        self.cgroup = None  # rdmagw-redirect's: (its directory, the one this script came from)

    def spawn(self, cmd, **kw):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=kw.pop("stderr", subprocess.DEVNULL), **kw)
        self.procs.append(p)
        return p

    def start_backends(self, tag="", cgroup=None):
        """The four backends; in `cgroup` if given. Returns their ports and pids."""
        backend = {name: free_port() for name in BACKENDS}
        join = (lambda: benchlib.join_cgroup(cgroup)) if cgroup else None
        pids = {
            "redis": self.spawn(["redis-server", "--port", str(backend["redis"]), "--bind", "127.0.0.1",
                                 "--unixsocket", f"{self.work}/redis{tag}.sock", "--unixsocketperm", "700",
                                 "--save", "", "--appendonly", "no"], preexec_fn=join).pid,
            "iperf": self.spawn(["iperf3", "-s", "-p", str(backend["iperf"])], preexec_fn=join).pid,
            "sockperf": self.spawn(["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p",
                                    str(backend["sockperf"])], preexec_fn=join).pid,
            "http": self.start_nginx(backend["http"], tag, join).pid,  # master_process off: one process
        }
        for port in backend.values():
            wait_port(port)
        return backend, pids

    def backends_for(self, path):
        return self.own_backend_pids.get(path, self.backend_pids)

    def joined(self, path):
        """While measuring rdmagw-redirect, this script (and so its clients)
        is in that path's cgroup."""
        if path != REDIRECT or not self.cgroup:
            return benchlib.nothing()
        return benchlib.in_cgroup(*self.cgroup)

    def start(self, paths):
        self.redis_socket = f"{self.work}/redis.sock"
        backend, self.backend_pids = self.start_backends()
        self.ports["direct"] = backend
        self.pids["direct"] = []
        for path in paths:
            if path == "haproxy":
                self.start_haproxy(path, backend, splice=False)
            elif path == "haproxy-splice":
                self.start_haproxy(path, backend, splice=True)
            elif path in ("rdmagw", "rdmagw-splice"):
                self.start_rdmagw(path, backend, splice=path == "rdmagw-splice")
            elif path == "direct-unix":
                benchlib.wait_path(self.redis_socket)
                self.ports[path] = {"redis": self.redis_socket}
                self.pids[path] = []
            elif path == "rdmagw-unix":
                self.start_rdmagw(path, backend, splice=False, unix=True)
            elif path == REDIRECT:
                self.cgroup = benchlib.make_cgroup(f"rdmagw-compare-{os.getpid()}")
                own, self.own_backend_pids[path] = self.start_backends("-redirect", self.cgroup[0])
                self.start_rdmagw(path, own, splice=False, redirect=self.cgroup[0])
        if "hol-apart" in self.args.tests and "rdmagw" in paths:
            self.start_rdmagw(TWIN, backend, splice=False)

    def start_nginx(self, port, tag="", preexec_fn=None):
        os.makedirs(f"{self.work}/www", exist_ok=True)
        with open(f"{self.work}/www/index.html", "w") as f:
            f.write("x" * 1023 + "\n")
        with open(f"{self.work}/nginx{tag}.conf", "w") as f:
            f.write(f"""daemon off;
master_process off;
worker_processes 1;
pid {self.work}/nginx{tag}.pid;
error_log {self.work}/nginx{tag}.err warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 10000000;
    client_body_temp_path {self.work}/nginx-tmp;
    proxy_temp_path {self.work}/nginx-tmp;
    fastcgi_temp_path {self.work}/nginx-tmp;
    uwsgi_temp_path {self.work}/nginx-tmp;
    scgi_temp_path {self.work}/nginx-tmp;
    server {{
        listen 127.0.0.1:{port};
        root {self.work}/www;
    }}
}}
""")
        return self.spawn(["nginx", "-p", self.work, "-c", f"{self.work}/nginx{tag}.conf"], preexec_fn=preexec_fn)

    def start_haproxy(self, path, backend, splice):
        front = {name: free_port() for name in BACKENDS}
        middle = {name: free_port() for name in BACKENDS}
        options = "    option splice-request\n    option splice-response\n" if splice else ""
        pids = []
        for name, listen, to in (("b", middle, backend), ("a", front, middle)):
            sections = "".join(f"""listen {b}
    bind 127.0.0.1:{listen[b]}
    server s 127.0.0.1:{to[b]}
""" for b in BACKENDS)
            cfg = f"{self.work}/{path}-{name}.cfg"
            with open(cfg, "w") as f:
                f.write(f"""global
    nbthread {self.args.haproxy_threads}
    maxconn 4000
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
{options}{sections}""")
            pids.append(self.spawn(["haproxy", "-f", cfg]).pid)
        for port in front.values():
            wait_port(port)
        self.ports[path] = front
        self.pids[path] = pids

    def start_rdmagw(self, path, backend, splice, unix=False, redirect=None):
        """unix: redis alone, with Unix sockets on both local legs. redirect:
        a cgroup both rdmagw run in, with their local legs redirected."""
        if unix:
            listen = {"redis": f"{self.work}/{path}-redis.sock"}
            local = {"redis": (f"unix:{listen['redis']}", f"unix:{self.redis_socket}")}
        else:
            listen = {name: free_port() for name in BACKENDS}
            local = {b: (f"tcp:127.0.0.1:{listen[b]}", f"tcp:127.0.0.1:{backend[b]}") for b in BACKENDS}
        a_tunnel, b_tunnel = free_port(), free_port()
        size = f", buffer_size: {self.args.buffer_size}" if self.args.buffer_size else ""
        size += ", tcp_splice: true" if splice else ""
        tunnel = f"{{address: 127.0.0.1, tcp_port: %d, transport: tcp{size}}}"
        listeners = "".join(f"""  - {{name: {b}, listen: "{entry}", peer: host-b, target: "{target}"}}
""" for b, (entry, target) in local.items())
        targets = ", ".join(f'"{target}"' for _, target in local.values())
        admin = {"b": free_port(), "a": free_port()}
        bound = f", max_in_flight: {self.args.local_legs_bound}" if self.args.local_legs_bound else ""
        legs = f"local_legs: {{redirect: true, cgroup: {redirect}{bound}}}\n" if redirect else ""
        configs = {
            "b": f"""node: host-b
admin: "127.0.0.1:{admin['b']}"
workers: {self.args.workers}
tunnel: {tunnel % b_tunnel}
targets: [{targets}]
{legs}""",
            "a": f"""node: host-a
admin: "127.0.0.1:{admin['a']}"
workers: {self.args.workers}
tunnel: {tunnel % a_tunnel}
peers:
  - {{name: host-b, address: 127.0.0.1, tcp_port: {b_tunnel}}}
listeners:
{listeners}{legs}""",
        }
        pids = []
        for name in ("b", "a"):
            base = f"{self.work}/{path}-{name}"
            with open(f"{base}.yaml", "w") as f:
                f.write(configs[name])
            log = open(f"{base}.log", "w")
            join = (lambda: benchlib.join_cgroup(redirect)) if redirect else None
            pids.append(self.spawn([benchlib.RDMAGW, "--config", f"{base}.yaml", "--log-level", "info"],
                                   stderr=log, preexec_fn=join).pid)
        for name in ("b", "a"):
            benchlib.wait_log(f"{self.work}/{path}-{name}.log", "event=ready")
        for where in listen.values():
            if unix:
                benchlib.wait_path(where)
            else:
                wait_port(where)
        self.ports[path] = listen
        self.pids[path] = pids
        self.admin[path] = [admin["b"], admin["a"]]
        if redirect:
            for name in ("b", "a"):
                legs = benchlib.admin_json(admin[name], "/stats")["local_legs"]
                if legs["state"] != "redirected":
                    raise RuntimeError(f"{path}: rdmagw {name}'s local legs are {legs['state']}: {legs['reason']}")

    def stop(self):
        benchlib.stop_all(self.procs)
        if self.cgroup:
            benchlib.remove_cgroup(self.cgroup[0])


# --- one run of one test through one path ---------------------------------------


def run(cmd, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {p.returncode}:\n{(p.stdout + p.stderr)[-1500:]}")
    return p.stdout + p.stderr


def redis(where, test, requests, pipeline):
    """where: a TCP port, or a Unix socket's path."""
    to = ["-s", where] if isinstance(where, str) else ["-p", str(where)]
    cmd = ["redis-benchmark", *to, "-c", "50", "-d", "512", "-t", test, "-n", str(requests), "-q"]
    if pipeline > 1:
        cmd += ["-P", str(pipeline)]
    rps = benchlib.parse_redis_benchmark(run(cmd, 300))[test.upper()]
    return {"rate": rps, "units": requests}


def iperf(port, seconds, extra=()):
    out = run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J", *extra], seconds + 60)
    r = benchlib.parse_iperf3_json(out)
    return {"rate": r["gbps"], "units": r["bytes"] / GIB}


def pingpong(port, seconds):
    out = run(["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-m", "64", "-t",
               str(seconds), "--full-rtt"], seconds + 30)
    r = benchlib.parse_sockperf(out)
    r["units"] = r["round_trips"]  # the proxies' CPU is read per round trip
    return r


def hol(ports, seconds, rate, bulk_ports=None):
    """The ping-pong while one bulk stream, paced at `rate` so that it
    leaves CPU to spare, runs through the same path (or through
    `bulk_ports`, another pair): beside the same path the ping-pong waits
    for the bulk stream's frames and for the cores, beside another pair
    for the cores alone."""
    bulk_ports = bulk_ports or ports
    bulk = subprocess.Popen(["iperf3", "-c", "127.0.0.1", "-p", str(bulk_ports["iperf"]), "-t", str(seconds + 2), "-J",
                             "-b", rate],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1)
        r = pingpong(ports["sockperf"], seconds)
    finally:
        out, _ = bulk.communicate(timeout=seconds + 60)
    r["bulk_gbps"] = benchlib.parse_iperf3_json(out)["gbps"]
    return r


def wrk(port, seconds, close):
    cmd = ["wrk", "-t", "1", "-c", "32", "-d", f"{seconds}s", f"http://127.0.0.1:{port}/index.html"]
    if close:
        cmd[1:1] = ["-H", "Connection: close"]
    r = benchlib.parse_wrk(run(cmd, seconds + 60))
    if r["errors"]:
        raise RuntimeError(f"wrk through port {port}: {r['errors']} errors")
    return {"rate": r["rps"], "units": r["requests"]}


def one(test, ports, args, twin_ports=None):
    s = args.seconds
    if test.startswith("redis-"):
        pipelined = test.endswith("-p16")
        name = test.split("-")[1]
        return redis(ports["redis"], name, args.requests * (4 if pipelined else 1), 16 if pipelined else 1)
    if test == "iperf3":
        return iperf(ports["iperf"], s)
    if test == "pingpong":
        return pingpong(ports["sockperf"], s)
    if test == "hol":
        return hol(ports, s, args.hol_rate)
    if test == "hol-apart":
        return hol(ports, s, args.hol_rate, bulk_ports=twin_ports)
    if test == "http-keepalive":
        return wrk(ports["http"], s, close=False)
    if test == "http-close":
        return wrk(ports["http"], s, close=True)
    raise ValueError(test)


def backends_of(test):
    if test.startswith("redis-"):
        return ["redis"]
    if test.startswith("http-"):
        return ["http"]
    return {"iperf3": ["iperf"], "pingpong": ["sockperf"], "hol": ["sockperf", "iperf"],
            "hol-apart": ["sockperf", "iperf"]}[test]


def children_cpu():
    """CPU seconds of this script's children that have ended and been waited
    for: the clients (redis-benchmark, wrk, iperf3, sockperf)."""
    t = os.times()
    return t.children_user + t.children_system


def measured(test, path, topo, args):
    """Runs `test` through `path`; adds the CPU seconds of the proxies (cpu)
    and of the client and backend (app_cpu), and the run's length (wall)."""
    pids = topo.pids[path]
    recorder = None
    if args.perf_record and path.startswith("rdmagw") and test in args.perf_record_tests:
        # The first round's run of each chosen test, both sidecars, call graphs.
        data = os.path.join(args.perf_record, f"{path}-{test}.data")
        if not os.path.exists(data):
            recorder = subprocess.Popen(["perf", "record", "-q", "-F", "1999", "-g", "-o", data, "-p",
                                         ",".join(str(p) for p in pids)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
    admin = topo.admin.get(path, [])
    payload_before = [peer_payload(port) for port in admin]
    before = [benchlib.cpu_seconds(p) for p in pids]
    backends = [topo.backends_for(path)[b] for b in backends_of(test)]
    apps_before = sum(benchlib.cpu_seconds(p) for p in backends) + children_cpu()
    started = time.monotonic()
    with topo.joined(path):
        r = one(test, topo.ports[path], args, topo.ports.get(TWIN))
    r["wall"] = time.monotonic() - started
    # Before perf is stopped and waited for: the time it takes to write its
    # report is not the run's, and its CPU is not the client's.
    r["cpu"] = sum(benchlib.cpu_seconds(p) - b for p, b in zip(pids, before))
    r["app_cpu"] = sum(benchlib.cpu_seconds(p) for p in backends) + children_cpu() - apps_before
    share = queued_share(payload_before, [peer_payload(port) for port in admin]) if admin else None
    if share is not None:
        r["queued_share"] = share
    if recorder:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=60)
        with open(os.path.join(args.perf_record, f"{path}-{test}.txt"), "w") as f:
            subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio",
                            "-g", "none", "--percent-limit", "0.5"], stdout=f, stderr=subprocess.DEVNULL,
                           timeout=300)
    # The iperf3 server takes one test at a time, and a closed test's
    # sockets linger a moment: let each run start on a quiet machine.
    time.sleep(0.3)
    return r


# --- where a ping-pong's time goes: perf sched ---------------------------------------

# A line of `perf sched timehist`: time, [cpu], comm[tid] or comm[tid/pid],
# then wait time, scheduling delay and run time, in ms. <idle> has no [tid].
TIMEHIST_LINE = re.compile(r"^\s*[0-9.]+\s+\[\d+\]\s+(.*)\[(\d+)(?:/(\d+))?\]"
                           r"\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$")


def parse_timehist(text, classify):
    """{class: [runs, scheduling delay ms, run time ms]} summed over the
    lines of `perf sched timehist`; classify(comm, pid) names a line's
    class, or None to leave it out."""
    sums = {}
    for line in text.splitlines():
        m = TIMEHIST_LINE.match(line)
        if not m:
            continue
        comm, tid, pid = m.group(1).strip(), int(m.group(2)), int(m.group(3) or m.group(2))
        name = classify(comm, pid)
        if name is None:
            continue
        acc = sums.setdefault(name, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += float(m.group(5))
        acc[2] += float(m.group(6))
    return sums


def sched_row(path, p50, sums):
    """A report row, per round trip (one wake-up of sockperf's client, which
    blocks on each reply): how often the proxies and sockperf's server were
    switched in, and their scheduling delays."""
    trips = sums.get("client", (0, 0.0, 0.0))[0]
    row = [path, fmt(p50, 1), str(trips)]
    if not trips:
        return row + ["–"] * 5
    for name in ("proxies", "server"):
        runs, delay, _ = sums.get(name, (0, 0.0, 0.0))
        if path == "direct" and name == "proxies":
            row += ["–", "–"]
            continue
        row += [f"{runs / trips:.2f}", fmt(delay * 1000 / trips, 1)]
    return row + [fmt(sums["client"][1] * 1000 / trips, 1)]


def sched_profile(path, topo, args):
    """One extra ping-pong through `path`, not counted in the medians, under
    a system-wide `perf sched record`; DIR/pingpong-PATH.data is kept for
    `perf sched timehist -i` or `perf sched latency -i`."""
    data = os.path.join(args.perf_sched, f"pingpong-{path}.data")
    rec = subprocess.Popen(["perf", "sched", "record", "-o", data], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        r = pingpong(topo.ports[path]["sockperf"], min(args.seconds, 3))
    finally:
        rec.send_signal(signal.SIGINT)
        rec.wait(timeout=120)
    text = run(["perf", "sched", "timehist", "-i", data], 900)
    proxies, server = set(topo.pids[path]), topo.backends_for(path)["sockperf"]

    def classify(comm, pid):
        if pid in proxies:
            return "proxies"
        if pid == server:
            return "server"
        return "client" if comm.startswith("sockperf") else None
    return sched_row(path, r["p50"], parse_timehist(text, classify))


# --- the report -------------------------------------------------------------------


def median(results, key):
    values = [r[key] for r in results if key in r]
    return statistics.median(values) if values else None


def cpu_per_unit(results):
    """Median of each run's CPU per request (µs) or per GiB (s)."""
    per = [r["cpu"] / r["units"] for r in results if r.get("units")]
    return statistics.median(per) if per else None


def rate_unit(test):
    return "Gbit/s" if test == "iperf3" else "req/s"


def fmt(v, digits=0):
    return "–" if v is None else f"{v:.{digits}f}"


def report(results, paths, tests, args, pair_state, sched=None):
    """results[test][path] = [run, ...]; returns (markdown, targets missed in guard mode)."""
    lines = []
    proxies = [p for p in paths if p != "direct"]
    rows = []
    for test in tests:
        if test in ("pingpong", "hol"):
            continue
        d = median(results[test]["direct"], "rate")
        row = [f"{test} ({rate_unit(test)})", fmt(d, 2 if test == "iperf3" else 0)]
        for p in proxies:
            v = median(results[test][p], "rate")
            row.append(f"{fmt(v, 2 if test == 'iperf3' else 0)} ({v / d:.2f})" if v and d else "–")
        rows.append(row)
    lines += ["### Throughput (ratio to direct)", "",
              benchlib.markdown_table(["test", "direct"] + proxies, rows), ""]

    rows = []
    for test in tests:
        if test in ("pingpong", "hol"):
            continue
        unit = "s/GiB" if test == "iperf3" else "µs/req"
        scale = 1 if test == "iperf3" else 1e6
        row = [f"{test} ({unit})"]
        for p in proxies:
            v = None if p.startswith("direct") else cpu_per_unit(results[test][p])  # direct-unix: no proxy
            row.append(fmt(v * scale if v is not None else None, 2 if test == "iperf3" else 1))
        rows.append(row)
    lines += ["### CPU of both proxy processes, per request or per GiB", "",
              benchlib.markdown_table(["test"] + proxies, rows), ""]

    if "pingpong" in tests:
        rows = []
        d50 = median(results["pingpong"]["direct"], "p50")
        for p in (p for p in paths if results["pingpong"][p]):
            p50, p99 = median(results["pingpong"][p], "p50"), median(results["pingpong"][p], "p99")
            added = None if p == "direct" else p50 - d50
            cpu = cpu_per_unit(results["pingpong"][p]) if p != "direct" else None
            row = [p, fmt(p50, 1), fmt(p99, 1), fmt(added, 1), fmt(cpu * 1e6 if cpu is not None else None, 1)]
            for test in ("hol", "hol-apart"):
                if test in tests:
                    h99 = median(results[test][p], "p99")
                    row += [fmt(h99, 1), f"{h99 / p99:.2f}" if h99 and p99 else "–"]
            rows.append(row)
        header = ["path", "p50 µs", "p99 µs", "added p50 µs", "proxies' CPU per round trip µs"]
        if "hol" in tests:
            header += ["p99 with a bulk stream µs", "p99 ratio"]
        if "hol-apart" in tests:
            header += ["p99 with the bulk stream through another rdmagw pair µs", "p99 ratio"]
        lines += ["### 64 B ping-pong round trip (sockperf --full-rtt)", "",
                  benchlib.markdown_table(header, rows), ""]

    rows = [[test] + [fmt(median(results[test][p], "queued_share"), 4) for p in proxies if p.startswith("rdmagw")]
            for test in tests]
    if any(p.startswith("rdmagw") for p in proxies) and any(x != "–" for r in rows for x in r[1:]):
        lines += ["### Payload that rdmagw copied (the application's socket did not take it on arrival)", "",
                  "Of the stream payload both sidecars received from the tunnel, the share that went through "
                  "a stream's queue (GET /stats `queued_bytes`); the rest was written to the socket straight "
                  "from the transport's receive buffer. A new stream's first bytes are queued while B connects "
                  "to the backend (http-close: a connection per request). hol-apart counts the ping-pong's "
                  "pair only, not the second pair that carries the bulk stream.", "",
                  benchlib.markdown_table(["test"] + [p for p in proxies if p.startswith("rdmagw")], rows), ""]

    budget, leaves = cpu_budget_tables(results, paths, tests)
    if budget:
        lines += ["### Everything's CPU per request: what the throughput ratios come from", "",
                  "Client + backend: the load generator (its CPU as this script's waited-for child) and the "
                  "server process. All of it shares the same cores, so where they are busy the throughput "
                  "follows the CPU per request: the ratio the CPU predicts is direct's total over the path's.",
                  "", benchlib.markdown_table(["test", "path", "client + backend µs/req", "proxies µs/req",
                                               "cores busy", "ratio the CPU predicts", "ratio measured"], budget),
                  ""]
    if leaves:
        lines += ["### What the ratio-to-direct targets leave the rdmagw pair", "",
                  "The pair's CPU per request at which the cores would carry the target: direct's total / "
                  "target − the client's and backend's CPU per request through rdmagw, with the cores as busy "
                  "as they were for direct, and with all of them busy (the most the path could have).", "",
                  benchlib.markdown_table(["test", "target", "client + backend µs/req, direct",
                                           "client + backend µs/req, via rdmagw", "pair µs/req allowed",
                                           "allowed, all cores busy", "pair µs/req measured"], leaves), ""]
    if sched:
        lines += ["### Wake-ups in a ping-pong round trip (`perf sched`, one extra run per path)", "",
                  "Per round trip (a wake-up of sockperf's client, which blocks on each reply): how many times "
                  "the proxies' threads and sockperf's server were switched in, and how long the processes "
                  "waited from their wake-up until they ran (scheduling delay; from an idle core it includes "
                  "the core's wake-up). Recording every switch slows the run: compare its p50 with the table "
                  "above.", "",
                  benchlib.markdown_table(["path", "p50 µs (recorded)", "round trips", "proxies: runs",
                                           "proxies: delay µs", "server: runs", "server: delay µs",
                                           "client: delay µs"], sched), ""]
    targets, missed = targets_table(results, paths, tests, pair_state)
    if targets:
        lines += ["### Targets: rdmagw against HAProxy at its best setting for each figure", "",
                  benchlib.markdown_table(["figure", "rdmagw", "HAProxy best", "ratio", "target", "met"], targets),
                  ""]
    if pair_state:
        lines += ["### The rdmagw pair's memory and descriptors (2 s after each round)", "",
                  "Buffers are taken as load needs them; a worker gives back the pages of those unused for a "
                  "second but for the 64 used last, so the resident part of its buffer slab (GET /stats "
                  "`buffer_bytes_resident`, read just after RSS) follows the last seconds' load. The rest of "
                  "RSS (code, heap, stacks) is what a leak would make climb round after round.", "",
                  benchlib.markdown_table(["", "before"] + [f"after round {i + 1}"
                                                            for i in range(len(pair_state[0]) - 2)],
                                          pair_state), ""]
    return "\n".join(lines), missed


REQUEST_TESTS = ("redis-set", "redis-get", "redis-set-p16", "redis-get-p16", "http-keepalive", "http-close")
RATIO_TARGETS = {"http-keepalive": 0.7, "http-close": 0.75}


def per_request(runs, key):
    """Median of each run's `key` CPU seconds per request, in µs."""
    per = [r[key] / r["units"] * 1e6 for r in runs if r.get("units") and key in r]
    return statistics.median(per) if per else None


def cpu_budget_tables(results, paths, tests, cores=None):
    """Rows of everyone's CPU per request for each request test and path,
    and, for the HTTP ratio targets, the rdmagw pair's CPU per request at
    which the cores would allow the target."""
    cores = cores or os.cpu_count()
    budget, leaves = [], []
    for test in tests:
        if test not in REQUEST_TESTS:
            continue
        d_rate = median(results[test]["direct"], "rate")
        d_app = per_request(results[test]["direct"], "app_cpu")
        d_total = d_app  # direct has no proxies
        d_busy = [(r["cpu"] + r["app_cpu"]) / r["wall"] for r in results[test]["direct"] if r.get("wall")]
        for p in paths:
            runs = results[test][p]
            app, proxies = per_request(runs, "app_cpu"), per_request(runs, "cpu") or 0.0
            if app is None:
                continue
            total = app + proxies
            busy = [(r["cpu"] + r["app_cpu"]) / r["wall"] for r in runs if r.get("wall")]
            rate = median(runs, "rate")
            budget.append([test, p, fmt(app, 1), "–" if p.startswith("direct") else fmt(proxies, 1),
                           fmt(statistics.median(busy), 2) if busy else "–",
                           f"{d_total / total:.2f}" if d_total else "–",
                           f"{rate / d_rate:.2f}" if rate and d_rate else "–"])
            if p == "rdmagw" and test in RATIO_TARGETS and d_total:
                target = RATIO_TARGETS[test]
                # Throughput is cores busy / CPU per request: at direct's
                # utilisation, and with every core busy (the most it can be).
                full = (cores / statistics.median(d_busy)) if d_busy else None
                leaves.append([test, f"≥ {target}", fmt(d_app, 1), fmt(app, 1), fmt(d_total / target - app, 1),
                               fmt(d_total * full / target - app, 1) if full else "–", fmt(proxies, 1)])
    return budget, leaves


def best(results, test, paths, key, lower=True):
    """(value, path) of the HAProxy path with the best median `key`."""
    cands = []
    for p in paths:
        if p.startswith("haproxy"):
            v = cpu_per_unit(results[test][p]) if key == "cpu" else median(results[test][p], key)
            if v is not None:
                cands.append((v, p))
    if not cands:
        return None, None
    return (min if lower else max)(cands)


def targets_table(results, paths, tests, pair_state):
    """Rows of (figure, rdmagw, HAProxy best, ratio, target, met) and the
    names of the CPU-per-request figures where rdmagw costs more than HAProxy."""
    rows, worse = [], []
    if "rdmagw" not in paths or not any(p.startswith("haproxy") for p in paths):
        return rows, worse

    def add(figure, mine, theirs, target, lower_is_better=True, digits=1, source=""):
        if mine is None or theirs is None or theirs == 0:
            return
        ratio = mine / theirs
        ok = ratio <= target if lower_is_better else ratio >= target
        sign = "≤" if lower_is_better else "≥"
        rows.append([figure, fmt(mine, digits), f"{fmt(theirs, digits)} {source}".strip(), f"{ratio:.2f}",
                     f"{sign} {target}", "yes" if ok else "**no**"])

    for test in REQUEST_TESTS:
        if test not in tests:
            continue
        mine = cpu_per_unit(results[test]["rdmagw"])
        theirs, src = best(results, test, paths, "cpu")
        if mine is None or theirs is None:
            continue
        if mine > theirs:
            worse.append(test)
        add(f"CPU per request, {test} (µs)", mine * 1e6, theirs * 1e6, 0.33 if test == "redis-set" else 1.0,
            source=f"({src})")
    if "iperf3" in tests:
        mine = cpu_per_unit(results["iperf3"]["rdmagw"])
        theirs, src = best(results, "iperf3", paths, "cpu")
        add("CPU per GiB of bulk (s)", mine, theirs, 0.8, digits=2, source=f"({src})")
        mine = median(results["iperf3"]["rdmagw"], "rate")
        theirs, src = best(results, "iperf3", paths, "rate", lower=False)
        add("bulk throughput (Gbit/s)", mine, theirs, 1.0, lower_is_better=False, digits=2, source=f"({src})")
    if "pingpong" in tests:
        d50 = median(results["pingpong"]["direct"], "p50")
        mine = median(results["pingpong"]["rdmagw"], "p50") - d50
        theirs, src = best(results, "pingpong", paths, "p50")
        add("added p50 latency, 64 B ping-pong (µs)", mine, theirs - d50 if theirs else None, 0.5,
            source=f"({src})")
    for test, target in RATIO_TARGETS.items():
        if test in tests:
            d = median(results[test]["direct"], "rate")
            mine = median(results[test]["rdmagw"], "rate")
            if d and mine:
                rows.append([f"{test}, ratio to direct", f"{mine / d:.2f}", "–", f"{mine / d:.2f}", f"≥ {target}",
                             "yes" if mine / d >= target else "**no**"])
    if "hol" in tests and "pingpong" in tests:
        alone, shared = median(results["pingpong"]["rdmagw"], "p99"), median(results["hol"]["rdmagw"], "p99")
        if alone and shared:
            rows.append(["ping-pong p99 beside a bulk stream / alone", f"{shared / alone:.2f}", "–",
                         f"{shared / alone:.2f}", "≤ 2", "yes" if shared / alone <= 2 else "**no**"])
    return rows, worse


def admin_stats(admin_port: int):
    """GET /stats, or None (with a warning) if it cannot be had: a figure
    missing from the report must not cost the measured rounds."""
    try:
        return benchlib.admin_json(admin_port, "/stats")
    except (OSError, ValueError) as e:
        print(f"GET /stats on 127.0.0.1:{admin_port} failed: {e}", file=sys.stderr)
        return None


def peer_payload(admin_port: int):
    """(payload bytes received from peers, of those queued) per GET /stats, or None."""
    stats = admin_stats(admin_port)
    if stats is None:
        return None
    return (sum(p["bytes_received"] for p in stats["peers"]), sum(p["queued_bytes"] for p in stats["peers"]))


def queued_share(before, after):
    """Of the payload both sidecars received from the tunnel between the two
    readings, the share their application sockets did not take on arrival
    (copied into a stream's queue); None if nothing arrived."""
    if any(x is None for x in list(before) + list(after)):
        return None
    received = sum(a[0] - b[0] for a, b in zip(after, before))
    queued = sum(a[1] - b[1] for a, b in zip(after, before))
    return queued / received if received > 0 else None


def buffer_kib_resident(admin_port: int) -> int:
    """What of the process's buffer slabs is in memory (GET /stats
    per_worker buffer_bytes_resident, summed), in KiB."""
    stats = admin_stats(admin_port)
    return None if stats is None else sum(w["buffer_bytes_resident"] for w in stats["per_worker"]) // 1024


def pair_snapshot(topo):
    """Per rdmagw process of the pair (B, A): (RSS KiB, fds, resident buffers KiB)."""
    if "rdmagw" not in topo.pids:
        return None
    return [(benchlib.rss_kib(p), benchlib.fd_count(p), buffer_kib_resident(port))
            for p, port in zip(topo.pids["rdmagw"], topo.admin["rdmagw"])]


def pair_state_rows(before, snapshots):
    """The memory table's rows: each process's RSS, what of it is buffer
    slabs, the rest of its RSS (code, heap, stacks: what must not climb),
    and its descriptors, before the rounds and after each."""
    rows = []
    for i, name in enumerate(("B", "A")):
        seq = [before[i]] + [snap[i] for snap in snapshots]
        rows.append([f"rdmagw {name} RSS KiB"] + [s[0] for s in seq])
        rows.append([f"rdmagw {name} buffers resident KiB"] + ["–" if s[2] is None else s[2] for s in seq])
        rows.append([f"rdmagw {name} RSS outside buffers KiB"] + ["–" if s[2] is None else s[0] - s[2] for s in seq])
    for i, name in enumerate(("B", "A")):
        rows.append([f"rdmagw {name} fds", before[i][1]] + [snap[i][1] for snap in snapshots])
    return rows


# --- main -------------------------------------------------------------------------------


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="runs of each test through each path (default 3)")
    ap.add_argument("--seconds", type=int, default=5, help="length of the timed tests (default 5)")
    ap.add_argument("--requests", type=int, default=100000,
                    help="redis-benchmark requests per run, 4x that pipelined (default 100000)")
    ap.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                    help=f"comma-separated subset of {', '.join(PATHS)} (default: all but {REDIRECT})")
    ap.add_argument("--tests", default=",".join(TESTS), help=f"comma-separated subset of {', '.join(TESTS)}")
    ap.add_argument("--hol-rate", default="2G",
                    help="iperf3 -b of the bulk stream beside the ping-pong in the hol test (default 2G: "
                         "unpaced, it takes both cores and the test measures the scheduler)")
    ap.add_argument("--workers", type=int, default=1, help="workers per rdmagw (default 1)")
    ap.add_argument("--haproxy-threads", type=int, default=1, help="nbthread of each haproxy (default 1)")
    ap.add_argument("--buffer-size", type=int,
                    help="tunnel.buffer_size of both rdmagw (default: rdmagw's own, 32 KiB)")
    ap.add_argument("--local-legs-bound", metavar="SIZE",
                    help=f"local_legs.max_in_flight of {REDIRECT}'s pair (default: rdmagw's own, 256KiB)")
    ap.add_argument("--guard", action="store_true",
                    help="CI's short check: redis SET/GET and HTTP Connection: close through rdmagw and "
                         "HAProxy, 3 rounds; exit 1 when rdmagw's CPU per request is above HAProxy's")
    ap.add_argument("--out", help="also write the report (markdown) to this file")
    ap.add_argument("--perf-record", metavar="DIR",
                    help="profile both rdmagw processes (perf record -g) during their first run of each test in "
                         "--perf-record-tests, for each rdmagw path; DIR/PATH-TEST.data and a flat report "
                         "DIR/PATH-TEST.txt")
    ap.add_argument("--perf-record-tests", default="redis-set,iperf3",
                    help="the tests --perf-record profiles (default redis-set,iperf3)")
    ap.add_argument("--perf-sched", metavar="DIR",
                    help="after the rounds, one extra ping-pong through each path under a system-wide "
                         "`perf sched record` (DIR/pingpong-PATH.data), and a table of the wake-ups and scheduling "
                         "delays per round trip")
    args = ap.parse_args(argv)
    if args.guard:
        args.paths = "direct,haproxy,rdmagw"
        args.tests = "redis-set,redis-get,http-close"
        args.requests = min(args.requests, 30000)
        args.seconds = min(args.seconds, 2)
    default_tests = args.tests == ",".join(TESTS)
    for name, allowed in (("paths", PATHS), ("tests", TESTS)):
        chosen = [x for x in getattr(args, name).split(",") if x]
        bad = [x for x in chosen if x not in allowed]
        if bad or not chosen:
            ap.error(f"--{name} {getattr(args, name)!r}: unknown {', '.join(bad) or '(empty)'}; "
                     f"choose from {', '.join(allowed)}")
        setattr(args, name, chosen)
    args.perf_record_tests = args.perf_record_tests.split(",")
    if args.perf_record:
        if not shutil.which("perf"):
            ap.error("--perf-record: perf is not installed (tools/dev/install-deps installs linux-perf)")
        os.makedirs(args.perf_record, exist_ok=True)
    if args.perf_sched:
        if not shutil.which("perf"):
            ap.error("--perf-sched: perf is not installed (tools/dev/install-deps installs linux-perf)")
        os.makedirs(args.perf_sched, exist_ok=True)
    if "direct" not in args.paths:
        args.paths.insert(0, "direct")  # every ratio is against it
    for t in ("hol", "hol-apart"):
        if t in args.tests and "pingpong" not in args.tests:
            ap.error(f"--tests: {t} is read against pingpong; add pingpong")
    if "hol-apart" in args.tests and "rdmagw" not in args.paths:
        if not default_tests:
            ap.error("--tests: hol-apart runs through rdmagw only; add rdmagw to --paths")
        args.tests.remove("hol-apart")
    for name in ("rounds", "seconds", "requests", "workers", "haproxy_threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    return args


def check_tools(args):
    need = {"redis-server": True, "iperf3": True, "sockperf": True, "nginx": True, "wrk": True,
            "redis-benchmark": True, "haproxy": any(p.startswith("haproxy") for p in args.paths)}
    missing = [t for t, needed in need.items() if needed and not shutil.which(t)]
    if missing:
        sys.exit(f"compare.py: missing {', '.join(missing)}: run tools/dev/install-deps")
    if any(p.startswith("rdmagw") for p in args.paths) and not os.access(benchlib.RDMAGW, os.X_OK):
        sys.exit(f"compare.py: {benchlib.RDMAGW} not found: build first (tools/dev/build)")


def header(args):
    try:
        commit = subprocess.run(["git", "-C", benchlib.ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit = "?"
    return (f"# rdmagw vs HAProxy vs direct ({datetime.date.today()})\n\n"
            f"`perf/compare.py --rounds {args.rounds} --seconds {args.seconds} --requests {args.requests}"
            f" --workers {args.workers} --haproxy-threads {args.haproxy_threads}"
            f"{f' --buffer-size {args.buffer_size}' if args.buffer_size else ''}"
            f"{f' --local-legs-bound {args.local_legs_bound}' if args.local_legs_bound else ''}"
            f" --paths {','.join(args.paths)} --tests {','.join(args.tests)}"
            f"{' --perf-sched DIR' if args.perf_sched else ''}`"
            f"{' --guard' if args.guard else ''}; commit {commit}; "
            f"{os.cpu_count()} cores, kernel {platform.release()}; medians of {args.rounds} rounds. "
            f"rdmagw on its TCP transport (loopback), client, backends and proxies on the same cores.\n")


def main(argv=None):
    args = parse_args(argv)
    check_tools(args)
    work = tempfile.mkdtemp(prefix="rdmagw-compare.")
    topo = Topology(work, args)
    results = {t: {p: [] for p in args.paths} for t in args.tests}
    try:
        topo.start(args.paths)
        # One warm-up request stream per path: the first connection through
        # rdmagw dials its session, and nobody's first run should pay for it.
        for p in topo.ports:
            with topo.joined(p):
                redis(topo.ports[p]["redis"], "set", 2000, 1)
        time.sleep(1)
        before = pair_snapshot(topo)
        snapshots = []
        runs_of = {t: [p for p in args.paths if (t != "hol-apart" or p == "rdmagw")
                       and (p not in UNIX_PATHS or t.startswith("redis-"))] for t in args.tests}
        total = args.rounds * sum(len(v) for v in runs_of.values())
        done, started = 0, time.monotonic()
        for rnd in range(args.rounds):
            order = args.paths[rnd % len(args.paths):] + args.paths[:rnd % len(args.paths)]
            for test in args.tests:
                for path in (p for p in order if p in runs_of[test]):
                    r = measured(test, path, topo, args)
                    results[test][path].append(r)
                    done += 1
                    shown = {k: round(v, 6 if k == "cpu" else 2) for k, v in r.items()}
                    print(f"[{done}/{total}, {time.monotonic() - started:.0f}s] round {rnd + 1} {test} {path}: "
                          f"{shown}", file=sys.stderr, flush=True)
            time.sleep(2)
            snapshots.append(pair_snapshot(topo))
            if snapshots[-1]:
                print(f"after round {rnd + 1}: rdmagw B, A: RSS KiB {[s[0] for s in snapshots[-1]]}, "
                      f"buffers resident KiB {[s[2] for s in snapshots[-1]]}, "
                      f"fds {[s[1] for s in snapshots[-1]]}", file=sys.stderr, flush=True)
        state = None
        if before and snapshots:
            state = pair_state_rows(before, snapshots)
        sched = []
        for path in args.paths if args.perf_sched else ():
            print(f"perf sched: a ping-pong through {path}", file=sys.stderr, flush=True)
            try:
                sched.append(sched_profile(path, topo, args))
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                # The rounds are measured already: report them without it.
                print(f"perf sched through {path} failed, left out of the report: {e}", file=sys.stderr)
        body, worse = report(results, args.paths, args.tests, args, state, sched)
    finally:
        topo.stop()
        shutil.rmtree(work, ignore_errors=True)
    text = header(args) + "\n" + body
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.guard and worse:
        print(f"compare.py --guard: rdmagw costs more CPU per request than HAProxy in: {', '.join(worse)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
