#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""redis over an rdmagw pair on eRDMA, against kernel TCP, between two hosts.

Run on the client host; the server host is driven over ssh (--server). Paths:

  direct  redis-benchmark -> redis-server on the server, kernel TCP
  rdma    redis-benchmark -> rdmagw A (here) -> RDMA -> rdmagw B (server) -> redis-server
  tcp     the same pair on its TCP transport (tunnel.transport: tcp)

Both pairs and redis-server run for the whole measurement; each round runs
every path once (in a rotating order), reading utime+stime of redis-server
and of that path's two rdmagw processes before and after. Prints and writes
the medians: requests/s, ratio to direct, CPU microseconds per request.

perf/erdma/README.md says what to install and open first. --help lists the
options; --dry-run shows the files and commands without running anything.
"""
import json
import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import erdma_kit as kit  # noqa: E402
from erdma_hosts import RAISE_MEMLOCK, Host, HostError, q  # noqa: E402

benchlib = kit.benchlib


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, o):
        self.o = o
        self.client = Host("client")
        self.server = Host("server") if o.local else Host("server", o.server, o.ssh_option)
        self.password = secrets.token_hex(16)
        self.key = secrets.token_hex(32) + "\n"  # 64 bytes: above the 32 the psk needs
        self.gw_paths = [p for p in o.paths if p != "direct"]
        self.cdir = self.sdir = None
        self.started = []      # (host, pid, name), stopped in reverse at the end
        self.pids = {}         # name -> pid: "redis", "a-rdma", "b-rdma", ...
        self.configs = {}      # file name -> YAML, for the report
        self.runs = []
        self.meta = {"sessions": {}}

    # --- set-up --------------------------------------------------------------------

    def preflight(self):
        o = self.o
        log(f"checking {self.server} and {self.client}")
        self.server.run("true")
        for host, tools in ((self.client, [o.redis_benchmark] + ([o.rdmagw] if self.gw_paths else [])),
                            (self.server, [o.redis_server] + ([o.server_rdmagw] if self.gw_paths else []))):
            for tool in tools:
                r = host.run(f"command -v {q(tool)}", check=False)
                if r.returncode != 0:
                    raise HostError(f"{host}: {tool} not found (see perf/erdma/README.md, 'Install')")
            if (o.bench_cpus and host is self.client) or (o.redis_cpus and host is self.server):
                if host.run("command -v taskset", check=False).returncode != 0:
                    raise HostError(f"{host}: taskset not found (util-linux), needed by --bench-cpus/--redis-cpus")
        if "rdma" in o.paths:
            need = kit.memlock_needed_kib(o)
            for host in (self.client, self.server):
                devices = host.run("ls /sys/class/infiniband 2>/dev/null", check=False).stdout.split()
                if not devices:
                    raise HostError(f"{host}: no RDMA device (/sys/class/infiniband is empty): is eRDMA enabled "
                                    f"and the erdma driver loaded? (README: 'Check the eRDMA device'), or leave "
                                    f"rdma out of --paths")
                if o.rdma_device and o.rdma_device not in devices:
                    raise HostError(f"{host}: --rdma-device {o.rdma_device} not present; devices: {' '.join(devices)}")
                # What rdmagw will get: the start script raises it the same way.
                limit = host.run(f"{RAISE_MEMLOCK}; ulimit -l")
                if not kit.memlock_ok(limit.stdout, need):
                    raise HostError(f"{host}: memlock limit (ulimit -l) is {limit.stdout.strip()} KiB and cannot be "
                                    f"raised, below the {need} KiB RDMA pins (--workers {o.workers} x slab "
                                    f"{o.slab_bytes >> 20} MiB): run as root, or raise it (README: 'Memory locking')")

    def write_files(self):
        o = self.o
        self.cdir = self.client.mkdtemp()
        self.sdir = self.cdir if o.local else self.server.mkdtemp()
        log(f"work directories: client {self.cdir}, server {self.sdir}")
        ckey, skey = f"{self.cdir}/key", f"{self.sdir}/key"
        self.client.write_file(ckey, self.key, "0400")
        if not o.local:
            self.server.write_file(skey, self.key, "0400")
        self.server.write_file(f"{self.sdir}/redis.conf", kit.redis_conf(o, self.password))
        for path in self.gw_paths:
            a, b = kit.gateway_configs(o, path, ckey, skey)
            self.client.write_file(f"{self.cdir}/a-{path}.yaml", a, "0644")
            self.server.write_file(f"{self.sdir}/b-{path}.yaml", b, "0644")
            self.configs[f"a-{path}.yaml (client)"] = a
            self.configs[f"b-{path}.yaml (server)"] = b
            # rdmagw's own parser is the judge of the files (and of a binary of another version).
            for host, binary, f in ((self.client, o.rdmagw, f"{self.cdir}/a-{path}.yaml"),
                                    (self.server, o.server_rdmagw, f"{self.sdir}/b-{path}.yaml")):
                r = host.run(f"{q(binary)} --check --config {q(f)}", check=False)
                if r.returncode != 0:
                    raise HostError(f"{host}: rdmagw --check rejected {f}:\n{(r.stdout + r.stderr).strip()}")

    def host_info(self):
        script = ("echo \"kernel: $(uname -r)\"; echo \"cpus: $(nproc)\"; "
                  "grep -m1 'model name' /proc/cpuinfo; "
                  "echo \"rdma devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\\n' ' ')\"; "
                  "rdma link 2>/dev/null; "
                  f"{RAISE_MEMLOCK}; echo \"memlock (as raised for rdmagw): $(ulimit -l)\"; ")
        o = self.o
        hosts = {"client": (self.client, f"{script} {q(o.redis_benchmark)} --version; "
                                         + (f"{q(o.rdmagw)} --version" if self.gw_paths else "true")),
                 "server": (self.server, f"{script} {q(o.redis_server)} --version; "
                                         + (f"{q(o.server_rdmagw)} --version" if self.gw_paths else "true"))}
        self.meta["hosts"] = {}
        for name, (host, s) in hosts.items():
            r = host.run(s, check=False)
            self.meta["hosts"][f"{name} ({o.client_ip if name == 'client' else o.server_ip})"] = r.stdout + r.stderr

    def start(self):
        o = self.o
        log("starting redis-server" + (" and the rdmagw pairs" if self.gw_paths else ""))
        pid = self.server.start(self.sdir, "redis", [o.redis_server, f"{self.sdir}/redis.conf"], o.redis_cpus)
        self.started.append((self.server, pid, "redis"))
        self.pids["redis"] = pid
        self.server.wait_log(pid, f"{self.sdir}/redis.log", "Ready to accept connections")
        for path in self.gw_paths:
            for host, side, binary, wd in ((self.server, "b", o.server_rdmagw, self.sdir),
                                           (self.client, "a", o.rdmagw, self.cdir)):
                name = f"{side}-{path}"
                pid = host.start(wd, name, [binary, "--config", f"{wd}/{name}.yaml"])
                self.started.append((host, pid, name))
                self.pids[name] = pid
                host.wait_log(pid, f"{wd}/{name}.log", "event=ready")
        self.check_reachable()
        for path in self.gw_paths:
            self.wait_sessions(path)

    def check_reachable(self):
        """The direct path needs redis on the server's address from here: a
        port the security group drops would hang redis-benchmark instead."""
        try:
            socket.create_connection((self.o.server_ip, self.o.redis_port), timeout=5).close()
        except OSError as e:
            raise HostError(f"cannot reach redis at {self.o.server_ip}:{self.o.redis_port} from this host ({e}): "
                            f"is the port open in the security group?") from None

    def wait_sessions(self, path, seconds=20.0):
        """Every worker of A dials a session (connect: always); all must be up
        on the path's transport before anything is measured."""
        port = kit.port_plan(self.o.base_port)[f"a_{path}_admin"]
        deadline = time.time() + seconds
        peer, problem = {}, None
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/peers", timeout=5) as r:
                    peer = json.load(r)["peers"][0]
                problem = None
            except (OSError, ValueError, KeyError, IndexError) as e:
                problem = e
            sessions = [s for s in peer.get("sessions", []) if s.get("state") == "open"]
            if len(sessions) >= self.o.workers:
                break
            time.sleep(0.2)
        if problem is not None:
            raise HostError(f"rdmagw A ({path} path): its admin endpoint 127.0.0.1:{port}/peers: {problem}")
        sessions = [s for s in peer.get("sessions", []) if s.get("state") == "open"]
        wrong = [s for s in sessions if s.get("transport") != path]
        if wrong:
            raise HostError(f"rdmagw A ({path} path): a session runs on {wrong[0].get('transport')}, not {path}")
        if not sessions:
            raise HostError(f"rdmagw A ({path} path): no session to {self.o.server_ip} after {seconds:.0f} s: "
                            f"state {peer.get('state')!r}, last error {peer.get('last_error')!r}, transport "
                            f"{peer.get('transport_reason')!r}. Are the tunnel ports open (README)?")
        n = len(sessions)
        text = f"{n} session{'s' if n != 1 else ''} on {path} ({peer.get('transport_reason', '')})"
        if len(sessions) < self.o.workers:
            text += f"; only {len(sessions)} of {self.o.workers} workers' sessions came up"
            log(f"warning: rdmagw A ({path} path): {text}")
        self.meta["sessions"][path] = text

    # --- measuring -----------------------------------------------------------------

    def bench(self, path, requests):
        o = self.o
        argv = kit.benchmark_argv(o, path, requests, self.password)
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=o.run_timeout)
        except subprocess.TimeoutExpired:
            raise HostError(f"redis-benchmark on the {path} path did not finish in {o.run_timeout} s "
                            f"(--run-timeout)") from None
        try:
            return kit.parse_bench_output(o, r.stdout)
        except ValueError as e:
            raise HostError(f"{path} path: {e}\n{r.stderr.strip()[-500:]}") from None

    def measure(self, rnd, path):
        server_pids = [self.pids["redis"]] + ([self.pids[f"b-{path}"]] if path != "direct" else [])
        client_pids = [self.pids[f"a-{path}"]] if path != "direct" else []
        s0, c0 = self.server.cpu_seconds(server_pids), self.client.cpu_seconds(client_pids)
        rps = self.bench(path, self.o.requests)
        c1, s1 = self.client.cpu_seconds(client_pids), self.server.cpu_seconds(server_pids)
        requests = self.o.requests * len(self.o.tests)
        cpu = {"redis": s1[self.pids["redis"]] - s0[self.pids["redis"]]}
        if path != "direct":
            a, b = self.pids[f"a-{path}"], self.pids[f"b-{path}"]
            cpu["a"], cpu["b"] = c1[a] - c0[a], s1[b] - s0[b]
        run = {"round": rnd, "path": path, "rps": rps, "requests": requests, "cpu_s": cpu}
        self.runs.append(run)
        per = "; ".join(f"{who} {kit.cpu_us_per_request(0, v, requests):.2f}" for who, v in cpu.items())
        log(f"  {path:6} " + " ".join(f"{t} {v:,.0f} req/s" for t, v in rps.items()) + f"; CPU us/request: {per}")

    def run(self):
        o = self.o
        self.preflight()
        self.write_files()
        self.host_info()
        self.start()
        if o.warmup_requests:
            log(f"warm-up: {o.warmup_requests} requests per path")
            for path in o.paths:
                self.bench(path, o.warmup_requests)
        for rnd in range(1, o.rounds + 1):
            log(f"round {rnd}/{o.rounds}")
            k = (rnd - 1) % len(o.paths)
            for path in o.paths[k:] + o.paths[:k]:  # rotate: no path always runs first
                self.measure(rnd, path)
        return kit.summarise(self.runs, o.paths)

    def cleanup(self):
        for host, pid, name in reversed(self.started):
            try:
                host.stop(pid)
            except HostError as e:
                log(f"warning: stopping {name} (pid {pid}) on {host}: {e}")
        if self.sdir and not self.o.local:
            # Keep the server's logs next to the client's, and leave nothing there.
            for name in ["redis"] + [f"b-{p}" for p in self.gw_paths]:
                try:
                    text = self.server.read_file(f"{self.sdir}/{name}.log")
                    with open(f"{self.cdir}/server-{name}.log", "w") as f:
                        f.write(text)
                except (HostError, OSError) as e:
                    log(f"warning: fetching the server's {name}.log: {e}")
            self.server.run(f"rm -rf {q(self.sdir)}", check=False)
        if self.cdir:
            self.client.run(f"rm -f {q(self.cdir)}/key {q(self.cdir)}/redis.conf", check=False)
            log(f"logs: {self.cdir}")


def dry_run(o) -> None:
    wd = "/tmp/rdmagw-erdma.XXXXXX"
    print(f"# server: {o.server} ({o.server_ip}); client: this host ({o.client_ip})")
    print(f"# open on the server, from the client: TCP {', '.join(map(str, kit.server_open_ports(o)))}")
    print(f"# redis.conf (server):\n{kit.redis_conf(o, '<password>')}")
    for path in [p for p in o.paths if p != "direct"]:
        a, b = kit.gateway_configs(o, path, f"{wd}/key", f"{wd}/key")
        print(f"# a-{path}.yaml (client):\n{a}\n# b-{path}.yaml (server):\n{b}")
    for path in o.paths:
        print(f"# {path}: " + " ".join(shlex.quote(a) for a in kit.benchmark_argv(o, path, o.requests, "<password>")))


def main(argv=None) -> int:
    o = kit.parse_args(argv)
    if o.dry_run:
        dry_run(o)
        return 0
    out = o.out or kit.default_out(benchlib.ROOT, kit.today())
    bench = Bench(o)
    try:
        summary = bench.run()
    except (HostError, ValueError) as e:
        log(f"erdma_bench: error: {e}")
        return 1
    except KeyboardInterrupt:
        log("erdma_bench: interrupted")
        return 130
    finally:
        bench.cleanup()
    commit = subprocess.run(["git", "-C", benchlib.ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, timeout=10).stdout.strip()
    meta = dict(bench.meta, date=kit.today(), commit=commit, configs=bench.configs,
                command="perf/erdma/erdma_bench.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])))
    print(kit.results_table(summary))
    print()
    print(kit.netacc_line(summary))
    report = kit.format_report(o, summary, bench.runs, meta)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(report)
    log(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
