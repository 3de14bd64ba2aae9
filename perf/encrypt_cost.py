#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What protecting the tunnel costs: CPU per GiB and per request, for three
pairs side by side on this machine (TCP transport), in front of the same
redis-server and iperf3 server:

  none           no tunnel.auth (a loopback tunnel may): frames as they are
  authenticated  tunnel.auth psk, the default: every record authenticated (GMAC)
  encrypted      tunnel.auth psk with encrypt: true: every record encrypted

It alternates, for --rounds rounds:

  iperf3 -n BYTES                   (bulk, one stream)
  redis-benchmark -c 50 -d 512 -t set,get -n REQUESTS   (unpipelined requests)

through each pair. For each run it reads the CPU time (user + system, from
/proc/PID/stat) both sidecars of the pair used, and prints the medians:
CPU seconds per GiB moved, CPU microseconds per request, throughput, and the
ratios to the pair without auth. Only ratios of one run compare on a shared
machine.

Usage: perf/encrypt_cost.py [--rounds 3] [--bytes 1G] [--requests 50000] [--out FILE]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import RDMAGW, emit, free_port, stop_all, wait_log, wait_port  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def pair_cpu(pids):
    return sum(cpu_seconds(p) for p in pids)


def parse_bytes(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not m:
        raise SystemExit(f"--bytes: {text!r} is not a number with an optional K, M or G")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def iperf_bytes(port, nbytes):
    out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-n", str(nbytes), "-J"],
                         capture_output=True, text=True, timeout=600).stdout
    data = json.loads(out)
    if "error" in data:
        raise RuntimeError("iperf3: " + data["error"])
    return data["end"]["sum_received"]["bits_per_second"] / 1e9


def redis_requests(port, requests):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", "50", "-d", "512", "-t", "set,get",
                          "-n", str(requests), "-q"], capture_output=True, text=True, timeout=600).stdout
    out = out.replace("\r", "\n")
    rates = [float(m) for m in re.findall(r"^(?:SET|GET): ([0-9.]+) requests per second", out, re.M)]
    if len(rates) != 2:
        raise RuntimeError(f"redis-benchmark printed no result:\n{out[-2000:]}")
    return 2 * requests, statistics.mean(rates)


PAIRS = ("none", "authenticated", "encrypted")


def write_pair(work, name, key, redis_port, iperf_port):
    a_tunnel, b_tunnel = free_port(), free_port()
    redis_listen, iperf_listen = free_port(), free_port()
    auth = "" if name == "none" else (
        f", auth: {{mode: psk, key_files: [{key}], encrypt: {'true' if name == 'encrypted' else 'false'}}}")
    tunnel = "{address: 127.0.0.1, tcp_port: %d, transport: tcp" + auth + "}"
    with open(f"{work}/{name}-a.yaml", "w") as f:
        f.write(f"""node: {name}-a
admin: "127.0.0.1:{free_port()}"
workers: 1
log_level: warn
tunnel: {tunnel % a_tunnel}
peers:
  - {{name: b, address: 127.0.0.1, tcp_port: {b_tunnel}}}
listeners:
  - {{name: redis, listen: "tcp:127.0.0.1:{redis_listen}", peer: b, target: "tcp:127.0.0.1:{redis_port}"}}
  - {{name: iperf, listen: "tcp:127.0.0.1:{iperf_listen}", peer: b, target: "tcp:127.0.0.1:{iperf_port}"}}
""")
    with open(f"{work}/{name}-b.yaml", "w") as f:
        f.write(f"""node: {name}-b
admin: "127.0.0.1:{free_port()}"
workers: 1
log_level: warn
tunnel: {tunnel % b_tunnel}
targets: ["tcp:127.0.0.1:{redis_port}", "tcp:127.0.0.1:{iperf_port}"]
""")
    return redis_listen, iperf_listen


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bytes", default="1G", help="bytes per iperf3 run (K, M, G suffixes)")
    ap.add_argument("--requests", type=int, default=50000, help="per command (SET, GET) per redis-benchmark run")
    ap.add_argument("--out", help="also write the table (markdown) to this file")
    args = ap.parse_args()
    nbytes = parse_bytes(args.bytes)
    if not os.access(RDMAGW, os.X_OK):
        sys.exit(f"{RDMAGW} not found: build first (tools/dev/build)")

    work = tempfile.mkdtemp(prefix="rdmagw-encrypt-bench.")
    key = f"{work}/key"
    with open(key, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(key, 0o400)
    redis_port, iperf_port = free_port(), free_port()
    ports = {name: write_pair(work, name, key, redis_port, iperf_port) for name in PAIRS}
    procs, pids = [], {}
    try:
        procs.append(subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL))
        procs.append(subprocess.Popen(["iperf3", "-s", "-p", str(iperf_port)], stdout=subprocess.DEVNULL))
        for name in ports:
            for side in ("b", "a"):
                log = open(f"{work}/{name}-{side}.log", "w")
                p = subprocess.Popen([RDMAGW, "--config", f"{work}/{name}-{side}.yaml", "--log-level", "info"],
                                     stderr=log)
                procs.append(p)
                pids.setdefault(name, []).append(p.pid)
        wait_port(redis_port)
        wait_port(iperf_port)
        for name in ports:
            for side in ("a", "b"):
                wait_log(f"{work}/{name}-{side}.log", "event=ready")

        runs = {name: {"cpu_s_per_gib": [], "gbit_s": [], "cpu_us_per_req": [], "req_s": []} for name in ports}
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for name, (redis_listen, iperf_listen) in ports.items():
                before = pair_cpu(pids[name])
                gbit = iperf_bytes(iperf_listen, nbytes)
                used = pair_cpu(pids[name]) - before
                time.sleep(0.5)  # the iperf3 server takes one test at a time
                runs[name]["cpu_s_per_gib"].append(used / (nbytes / (1 << 30)))
                runs[name]["gbit_s"].append(gbit)
                before = pair_cpu(pids[name])
                requests, rate = redis_requests(redis_listen, args.requests)
                used = pair_cpu(pids[name]) - before
                runs[name]["cpu_us_per_req"].append(used / requests * 1e6)
                runs[name]["req_s"].append(rate)
                print(f"  {name}: {runs[name]['cpu_s_per_gib'][-1]:.2f} CPU s/GiB at {gbit:.2f} Gbit/s; "
                      f"{runs[name]['cpu_us_per_req'][-1]:.1f} CPU us/request at {rate:.0f} req/s",
                      file=sys.stderr, flush=True)

        med = {n: {k: statistics.median(v) for k, v in m.items()} for n, m in runs.items()}
        base = med["none"]
        lines = [f"Protected records: CPU of both sidecars of a pair (TCP transport, workers=1), "
                 f"iperf3 -n {args.bytes} and redis-benchmark -c 50 -d 512 -n {args.requests} (SET and GET); "
                 f"median of {args.rounds} rounds, {os.cpu_count()} cores",
                 "",
                 "| measure | " + " | ".join(PAIRS) + " | authenticated/none | encrypted/none |",
                 "|---|" + "---:|" * (len(PAIRS) + 2)]
        for key_name, label, fmt in (("cpu_s_per_gib", "CPU seconds per GiB (bulk)", "{:.2f}"),
                                     ("gbit_s", "bulk throughput (Gbit/s)", "{:.2f}"),
                                     ("cpu_us_per_req", "CPU microseconds per request", "{:.1f}"),
                                     ("req_s", "requests per second", "{:.0f}")):
            values = " | ".join(fmt.format(med[n][key_name]) for n in PAIRS)
            ratios = " | ".join(f"{med[n][key_name] / base[key_name]:.2f}" for n in ("authenticated", "encrypted"))
            lines.append(f"| {label} | {values} | {ratios} |")
        emit("\n".join(lines), args.out)
    finally:
        stop_all(procs)


if __name__ == "__main__":
    main()
