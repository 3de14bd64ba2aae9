#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: what the Kubernetes Services table costs the sidecars of one
node (docs/kubernetes.md, "The services table").

It writes a services file of --services Services with --endpoints endpoints
each (the shape of a large cluster), has rdmagw-k8s write it as a table
(`--table-from`: the agent's own writer), starts --sidecars rdmagw
processes on this machine that all read the table (`services.file`, as the
sidecars of one node do), then changes one endpoint --changes times, each
time writing the table anew and renaming it into place as the agent does.
It prints, per sidecar and over all of them:

  memory   RSS and PSS (/proc/PID/smaps_rollup) after the last change, and
           the PSS of the table's mapping alone (/proc/PID/smaps): the
           table's pages are the page cache's, shared by every sidecar
  cpu      CPU (utime + stime) per change: the changes' phase less a
           control phase of as many rounds of the same length with the same
           polling and no change (what the admin polling, the workers'
           timers and the 100 ms file check cost); every change's file is
           made before either phase, so the rounds last alike
  load     the CPU time of the load itself, as each sidecar logs it
           (services_loaded cpu_us: its main thread's clock around opening,
           mapping or parsing and checking the file): exact where the
           process's CPU above is tick-sampled, but without the workers'
           share and what the kernel does for the mapping afterwards
  delay    from the rename to the sidecar's table in use (GET /stats
           services.loaded_unix, the time its main thread loaded it and
           handed it to the workers): median, p99 and max over the changes

and, as the baseline in the same run, --baseline-changes changes with the
same sidecars reading the JSON file instead (`services.file` parsed), with
the same figures.

Usage: perf/services_table_bench.py [--services 10000] [--endpoints 10]
           [--sidecars 20] [--changes 100] [--baseline-changes 3] [--out FILE]
       perf/services_table_bench.py --quick    # 1000 x 10, 4 sidecars, 10 changes
Needs go (to build tools/rdmagw-k8s) and a built rdmagw (build/bin/rdmagw).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (RDMAGW, ROOT, admin_json, cpu_seconds, emit, free_port, markdown_table, p99,  # noqa: E402
                      stop_all, wait_log)

SETTLE_S = 0.35  # a change is in use within this (the file is checked every 100 ms)


def services_file(n_services: int, n_endpoints: int, reachable: bool = True) -> dict:
    """Services in the namespaces of a large cluster: each with a ClusterIP
    and one port, its endpoints on 100 nodes, one in ten with rdmagw."""
    services = []
    for s in range(n_services):
        endpoints = []
        for e in range(n_endpoints):
            i = s * n_endpoints + e
            endpoints.append({"address": f"10.{64 + i // 65536}.{i // 256 % 256}.{i % 256 or 1}", "port": 8080,
                              "state": "ready", "node": f"node-{i % 100:03d}",
                              "pod": f"svc-{s:05d}-{e:02d}-7d9f8c6b5-x{i % 997:03d}", "rdmagw": i % 10 == 0})
        services.append({"namespace": f"team-{s % 50:02d}", "name": f"svc-{s:05d}",
                         "cluster_ips": [f"10.96.{s // 250}.{s % 250 + 1}"],
                         "ports": [{"name": "http", "port": 80, "endpoints": endpoints}]})
    return {"format": "rdmagw-services/1", "api": {"reachable": reachable, "since": "2026-11-29T00:00:00Z"},
            "services": services}


def build_agent(work: str) -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    out = os.path.join(work, "rdmagw-k8s")
    subprocess.run([go, "build", "-o", out, "."], cwd=os.path.join(ROOT, "tools", "rdmagw-k8s"), check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    return out


def write_renamed(path: str, data: bytes) -> None:
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


class Writer:
    """Writes the content as the file the sidecars read: the JSON itself,
    or the table rdmagw-k8s makes of it."""

    def __init__(self, agent: str, work: str, path: str, table: bool):
        self.agent, self.work, self.path, self.table = agent, work, path, table

    def make(self, content: dict) -> bytes:
        data = json.dumps(content).encode()
        if self.table:
            source, made = os.path.join(self.work, "source.json"), os.path.join(self.work, ".made.table")
            with open(source, "wb") as f:
                f.write(data)
            subprocess.run([self.agent, "--table-from", source, "--table", made], check=True)
            with open(made, "rb") as f:
                data = f.read()
        return data

    def write(self, data: bytes) -> None:
        write_renamed(self.path, data)


def memory(pid: int, path: str) -> dict:
    """RSS and PSS of the process, and the PSS of its mappings of `path`
    (a replaced table is mapped as "path (deleted)" until it is let go), KiB."""
    out = {"rss": 0, "pss": 0, "table_pss": 0, "table_rss": 0}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                out["rss"] = int(line.split()[1])
            elif line.startswith("Pss:"):
                out["pss"] = int(line.split()[1])
    mapping = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5:
                mapping = line.split(maxsplit=5)[5].strip() if len(fields) >= 6 else ""
            elif mapping and mapping.startswith(path) and fields[0] in ("Pss:", "Rss:"):
                out["table_pss" if fields[0] == "Pss:" else "table_rss"] += int(fields[1])
    return out


def start_sidecars(n: int, work: str, services_path: str, tag: str) -> list:
    sidecars = []
    for i in range(n):
        name = f"{tag}{i:02d}"
        admin = free_port()
        config = os.path.join(work, f"{name}.yaml")
        with open(config, "w") as f:
            f.write(f"""node: {name}
admin: "127.0.0.1:{admin}"
workers: 2
log_level: info
tunnel: {{address: 127.0.0.1, tcp_port: {free_port()}, transport: tcp}}
services: {{file: {services_path}}}
""")
        log = open(os.path.join(work, f"{name}.log"), "w")
        p = subprocess.Popen([RDMAGW, "--config", config], stderr=log, stdout=log)
        sidecars.append({"name": name, "proc": p, "admin": admin, "log": log.name})
    for s in sidecars:
        wait_log(s["log"], "event=ready", 30)
    return sidecars


def status(s: dict) -> dict:
    return admin_json(s["admin"], "/stats")["services"]


def wait_loads(sidecars: list, loads: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for s in sidecars:
        while status(s)["loads"] < loads:
            if time.monotonic() > deadline:
                raise SystemExit(f"{s['name']}: load #{loads} not done in {timeout} s:\n{status(s)}")
            time.sleep(0.05)


def changed_files(writer: Writer, content: dict, changes: int) -> list:
    """The bytes of each change, made before any is measured: one endpoint
    of one Service flips between ready and not-ready each time."""
    endpoints = content["services"][len(content["services"]) // 2]["ports"][0]["endpoints"]
    out = []
    for k in range(changes):
        e = endpoints[k % len(endpoints)]
        e["state"] = "not-ready" if e["state"] == "ready" else "ready"
        out.append(writer.make(content))
    return out


def load_cpu_us(s: dict, skip: int) -> list:
    """cpu_us of each services_loaded line of the sidecar's log after the
    first `skip` of them."""
    values = []
    with open(s["log"]) as f:
        for line in f:
            if "event=services_loaded" in line:
                values.append(int(line.rsplit("cpu_us=", 1)[1].split()[0]))
    return values[skip:]


def phase(sidecars: list, writer: Writer, files: list, change: bool) -> dict:
    """A round per file: (the file written by rename,) SETTLE_S, every
    sidecar's status read once; the same rounds with and without changes,
    so that what the sidecars spend anyway (their timers, the admin reads)
    is the same in both. CPU per sidecar over the phase, delays per change."""
    cpu0 = [cpu_seconds(s["proc"].pid) for s in sidecars]
    loads0 = [status(s)["loads"] for s in sidecars]
    delays = []  # per change: the slowest sidecar's, and every sidecar's
    per_sidecar = [[] for _ in sidecars]
    for k, data in enumerate(files):
        if change:
            writer.write(data)
            renamed = time.time()
        time.sleep(SETTLE_S)
        slowest = 0.0
        for i, s in enumerate(sidecars):
            st = status(s)
            if change:
                # A parse of a large JSON file (the baseline) may take longer.
                deadline = time.monotonic() + 120
                while st["loads"] < loads0[i] + k + 1 and not st["error"] and time.monotonic() < deadline:
                    time.sleep(0.05)
                    st = status(s)
                if st["loads"] != loads0[i] + k + 1:
                    raise SystemExit(f"{s['name']}: after change {k + 1}, {st['loads'] - loads0[i]} loads "
                                     f"(error: {st['error']!r})")
                d = st["loaded_unix"] - renamed
                per_sidecar[i].append(d)
                slowest = max(slowest, d)
        if change:
            delays.append(slowest)
    cpu = [cpu_seconds(s["proc"].pid) - c for s, c in zip(sidecars, cpu0)]
    return {"cpu": cpu, "delays": delays, "per_sidecar": per_sidecar}


def run_mode(args, agent: str, work: str, table: bool, changes: int) -> dict:
    tag = "t" if table else "j"
    path = os.path.join(work, "services.table" if table else "services.json")
    writer = Writer(agent, work, path, table)
    content = services_file(args.services, args.endpoints)
    writer.write(writer.make(content))
    size = os.path.getsize(path)
    files = changed_files(writer, content, changes)
    sidecars = start_sidecars(args.sidecars, work, path, tag)
    try:
        wait_loads(sidecars, 1, 120)
        control = phase(sidecars, writer, files, change=False)
        measured = phase(sidecars, writer, files, change=True)
        mem = [memory(s["proc"].pid, path) for s in sidecars]
    finally:
        stop_all([s["proc"] for s in sidecars])
    cpu_per_change = [(m - c) / changes for m, c in zip(measured["cpu"], control["cpu"])]
    loads = [load_cpu_us(s, 1) for s in sidecars]  # the first: the load at start
    return {"table": table, "size": size, "changes": changes, "mem": mem, "cpu": cpu_per_change,
            "loads": loads, "delays": measured["delays"], "per_sidecar": measured["per_sidecar"]}


def report(r: dict, args) -> str:
    what = "services table (mapped)" if r["table"] else "services file (JSON, parsed)"
    rows = []
    for i, (m, c, lo, d) in enumerate(zip(r["mem"], r["cpu"], r["loads"], r["per_sidecar"])):
        rows.append([i, m["rss"], m["pss"], m["table_pss"] if r["table"] else "–", f"{c * 1e3:.2f}",
                     f"{statistics.median(lo) / 1e3:.2f}", f"{max(lo) / 1e3:.2f}",
                     f"{statistics.median(d) * 1e3:.0f}", f"{p99(d) * 1e3:.0f}"])
    out = [f"### {what}: {r['size'] / 1e6:.1f} MB, {r['changes']} changes, {len(r['mem'])} sidecars", "",
           markdown_table(["sidecar", "RSS KiB", "PSS KiB", "table PSS KiB", "CPU ms/change", "load p50 ms",
                           "load max ms", "delay p50 ms", "delay p99 ms"], rows), ""]
    pss_table = [m["table_pss"] for m in r["mem"]]
    out.append(f"- PSS of the table per sidecar: max {max(pss_table)} KiB" if r["table"] else
               f"- PSS per sidecar: max {max(m['pss'] for m in r['mem'])} KiB")
    out.append(f"- CPU per change per sidecar (the process, tick-sampled, less the control phase): median "
               f"{statistics.median(r['cpu']) * 1e3:.2f} ms, max {max(r['cpu']) * 1e3:.2f} ms")
    every = sorted(v for lo in r["loads"] for v in lo)
    out.append(f"- the load's own CPU (every sidecar, every change): median {statistics.median(every) / 1e3:.2f} ms, "
               f"p99 {p99(every) / 1e3:.2f} ms, max {every[-1] / 1e3:.2f} ms")
    out.append(f"- every sidecar using a change (the slowest of them, per change): median "
               f"{statistics.median(r['delays']) * 1e3:.0f} ms, p99 {p99(r['delays']) * 1e3:.0f} ms, "
               f"max {max(r['delays']) * 1e3:.0f} ms")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--services", type=int, default=10000)
    ap.add_argument("--endpoints", type=int, default=10)
    ap.add_argument("--sidecars", type=int, default=20)
    ap.add_argument("--changes", type=int, default=100)
    ap.add_argument("--baseline-changes", type=int, default=3,
                    help="changes with the JSON file (0: no baseline); each costs every sidecar a parse")
    ap.add_argument("--quick", action="store_true", help="1000 x 10, 4 sidecars, 10 changes, 2 baseline")
    ap.add_argument("--out", help="also write the report to this file")
    args = ap.parse_args()
    if args.quick:
        args.services, args.sidecars, args.changes, args.baseline_changes = 1000, 4, 10, 2
    if not os.path.exists(RDMAGW):
        raise SystemExit(f"no rdmagw at {RDMAGW}: build it first (tools/dev/build)")
    work = tempfile.mkdtemp(prefix="rdmagw-table-bench.", dir="/tmp")
    os.chmod(work, 0o755)  # the services file's directory must be trusted
    started = time.monotonic()
    try:
        agent = build_agent(work)
        results = [run_mode(args, agent, work, True, args.changes)]
        print(f"[table: done after {time.monotonic() - started:.0f} s]", file=sys.stderr)
        if args.baseline_changes:
            results.append(run_mode(args, agent, work, False, args.baseline_changes))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    head = (f"`perf/services_table_bench.py --services {args.services} --endpoints {args.endpoints} --sidecars "
            f"{args.sidecars} --changes {args.changes} --baseline-changes {args.baseline_changes}`; commit {commit}; "
            f"{os.cpu_count()} cores, kernel {platform.release()}; {datetime.date.today()}; "
            f"{time.monotonic() - started:.0f} s\n\n")
    emit(head + "\n".join(report(r, args) for r in results), args.out)


if __name__ == "__main__":
    main()
