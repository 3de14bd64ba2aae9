#!/usr/bin/env python3
"""Benchmark: the rdmagw pair (TCP transport) against talking to the backend directly.

Runs, on this machine and in one go:
  redis-benchmark -c 100 -d 512 -t set,get          (unpipelined)
  redis-benchmark -c 100 -d 512 -t set,get -P 16    (pipelined)
  iperf3 -t SECONDS                                  (bulk, one stream)
each against the backend directly and through two rdmagw processes
(client -> rdmagw A -> tunnel -> rdmagw B -> backend), alternating direct and
through for --rounds rounds, and prints the median of each with the ratio
through/direct. Only ratios measured in the same run mean anything on a shared
2-core machine.

Usage: perf/tcp_pair_bench.py [--rounds 3] [--workers 1] [--requests 100000]
                              [--iperf-seconds 5] [--buffer-size 16384] [--out FILE]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RDMAGW = os.environ.get("RDMAGW_BIN", os.path.join(ROOT, "build", "bin", "rdmagw"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def wait_log(path, needle, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            if needle in f.read():
                return
        time.sleep(0.05)
    raise RuntimeError(f"{path}: no '{needle}' after {timeout}s")


def emit(table, out):
    """Prints the table, and writes it to `out` when given."""
    print(table)
    if out:
        with open(out, "w") as f:
            f.write(table + "\n")


def stop_all(procs):
    """SIGTERM, in reverse order of start; SIGKILL what has not gone in 15 s."""
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()


def redis_bench(port, requests, pipeline):
    cmd = ["redis-benchmark", "-p", str(port), "-c", "100", "-d", "512", "-t", "set,get",
           "-n", str(requests), "-q"]
    if pipeline > 1:
        cmd += ["-P", str(pipeline)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout.replace("\r", "\n")
    result = {}
    for name in ("SET", "GET"):
        m = re.search(rf"^{name}: ([0-9.]+) requests per second", out, re.M)
        if not m:
            raise RuntimeError(f"redis-benchmark printed no {name} result:\n{out[-2000:]}")
        result[name] = float(m.group(1))
    return result


def iperf(port, seconds):
    out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                         capture_output=True, text=True, timeout=seconds + 60).stdout
    import json
    data = json.loads(out)
    if "error" in data:
        raise RuntimeError("iperf3: " + data["error"])
    return data["end"]["sum_received"]["bits_per_second"] / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="workers per rdmagw (default 1: 2 cores are shared by 4 processes)")
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--iperf-seconds", type=int, default=5)
    ap.add_argument("--buffer-size", type=int, default=16384)
    ap.add_argument("--stream-window", default="256KiB")
    ap.add_argument("--tests", default="redis,iperf", help="comma-separated subset of: redis, iperf")
    ap.add_argument("--out", help="also write the table (markdown) to this file")
    args = ap.parse_args()
    if not os.access(RDMAGW, os.X_OK):
        sys.exit(f"{RDMAGW} not found: build first (tools/dev/build)")

    work = tempfile.mkdtemp(prefix="rdmagw-bench.")
    redis_port, iperf_port = free_port(), free_port()
    a_tunnel, b_tunnel = free_port(), free_port()
    redis_listen, iperf_listen = free_port(), free_port()
    a_admin, b_admin = free_port(), free_port()
    tunnel = (f"{{address: 127.0.0.1, tcp_port: %d, transport: tcp, buffer_size: {args.buffer_size}, "
              f"stream_window: {args.stream_window}}}")
    with open(f"{work}/a.yaml", "w") as f:
        f.write(f"""node: host-a
admin: "127.0.0.1:{a_admin}"
workers: {args.workers}
log_level: warn
tunnel: {tunnel % a_tunnel}
peers:
  - {{name: host-b, address: 127.0.0.1, tcp_port: {b_tunnel}}}
listeners:
  - {{name: redis, listen: "tcp:127.0.0.1:{redis_listen}", peer: host-b, target: "tcp:127.0.0.1:{redis_port}"}}
  - {{name: iperf, listen: "tcp:127.0.0.1:{iperf_listen}", peer: host-b, target: "tcp:127.0.0.1:{iperf_port}"}}
""")
    with open(f"{work}/b.yaml", "w") as f:
        f.write(f"""node: host-b
admin: "127.0.0.1:{b_admin}"
workers: {args.workers}
log_level: warn
tunnel: {tunnel % b_tunnel}
targets: ["tcp:127.0.0.1:{redis_port}", "tcp:127.0.0.1:{iperf_port}"]
""")
    procs = []
    try:
        procs.append(subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL))
        procs.append(subprocess.Popen(["iperf3", "-s", "-p", str(iperf_port)], stdout=subprocess.DEVNULL))
        for name in ("b", "a"):
            log = open(f"{work}/{name}.log", "w")
            procs.append(subprocess.Popen([RDMAGW, "--config", f"{work}/{name}.yaml", "--log-level", "info"],
                                          stderr=log))
        wait_port(redis_port)
        wait_port(iperf_port)
        wait_log(f"{work}/a.log", "event=ready")
        wait_log(f"{work}/b.log", "event=ready")

        rows = {}  # name -> (direct list, through list)
        def add(name, direct, through):
            d, t = rows.setdefault(name, ([], []))
            d.append(direct)
            t.append(through)

        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for pipeline in ((1, 16) if "redis" in args.tests else ()):
                n = args.requests * (4 if pipeline > 1 else 1)
                d = redis_bench(redis_port, n, pipeline)
                t = redis_bench(redis_listen, n, pipeline)
                suffix = "" if pipeline == 1 else " -P 16"
                add(f"redis SET{suffix} (req/s)", d["SET"], t["SET"])
                add(f"redis GET{suffix} (req/s)", d["GET"], t["GET"])
                print(f"  redis{suffix or ' -P 1'}: direct {d} through {t}", file=sys.stderr, flush=True)
            if "iperf" not in args.tests:
                continue
            d = iperf(iperf_port, args.iperf_seconds)
            # The iperf3 server takes one test at a time; give it a moment.
            time.sleep(0.5)
            t = iperf(iperf_listen, args.iperf_seconds)
            time.sleep(0.5)
            add("iperf3 (Gbit/s)", d, t)
            print(f"  iperf3: direct {d:.2f} through {t:.2f} Gbit/s", file=sys.stderr, flush=True)

        lines = [f"rdmagw pair (TCP transport, workers={args.workers}, buffer_size={args.buffer_size}, "
                 f"stream_window={args.stream_window}) "
                 f"vs direct; median of {args.rounds} rounds, {os.cpu_count()} cores",
                 "",
                 "| benchmark | direct | through rdmagw | ratio |",
                 "|---|---:|---:|---:|"]
        for name, (d, t) in rows.items():
            dm, tm = statistics.median(d), statistics.median(t)
            fmt = "{:.2f}" if "Gbit" in name else "{:.0f}"
            lines.append(f"| {name} | {fmt.format(dm)} | {fmt.format(tm)} | {tm / dm:.2f} |")
        emit("\n".join(lines), args.out)
    finally:
        stop_all(procs)


if __name__ == "__main__":
    main()
