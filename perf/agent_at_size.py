#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: the node agent rdmagw-k8s against a real API server holding a
large cluster's Services (docs/kubernetes.md, "Load on the API server").

It starts etcd and kube-apiserver on loopback (tools/dev/kube-apiserver,
binaries from its cache, else built: minutes), creates --services Services
in --namespaces namespaces with one EndpointSlice of --endpoints endpoints
each, through the API (kubectl create), then starts rdmagw-k8s writing the
services file and table, and prints:

  sync     from the agent's start to its first file with every Service
  memory   the agent's RSS and peak RSS after the sync and after the changes
  changes  --changes times one endpoint's ready condition flipped (a JSON
           patch of its EndpointSlice): from kubectl's return to the table
           replaced (its inode changes), median, p99 and max; the agent's
           CPU per change (less a control phase of as many idle rounds)
  watches  the API server's long-running WATCH requests the agent added
           (apiserver_longrunning_requests, with it less before it), by
           resource

Usage: perf/agent_at_size.py [--services 10000] [--endpoints 10]
           [--namespaces 50] [--changes 20] [--out FILE]
       perf/agent_at_size.py --quick    # 500 Services, 5 changes
Needs root (the API server's cache), go, and etcd/kube-apiserver from the
cache or the Go module proxy.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, cpu_seconds, emit, markdown_table, p99  # noqa: E402

KUBE_TOOL = os.path.join(ROOT, "tools", "dev", "kube-apiserver")
ROUND_S = 1.0  # a change, then time for it to reach the table


class Api:
    def __init__(self, state: str):
        self.state = state
        proc = subprocess.run([KUBE_TOOL, "start", "--dir", state], stdout=subprocess.PIPE, text=True, timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"tools/dev/kube-apiserver start failed ({proc.returncode})")
        values = dict(shlex.split(line)[0].split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        self.kubeconfig, self.kubectl = values["KUBECONFIG"], values["KUBECTL"]

    def run(self, *args: str, input: str | None = None) -> str:
        p = subprocess.run([self.kubectl, *args], input=input, capture_output=True, text=True, timeout=1800,
                           env=dict(os.environ, KUBECONFIG=self.kubeconfig))
        if p.returncode != 0:
            raise SystemExit(f"kubectl {shlex.join(args)}: {p.stderr}")
        return p.stdout

    def stop(self) -> None:
        subprocess.run([KUBE_TOOL, "stop", "--dir", self.state], timeout=120)

    def watches(self) -> dict:
        """WATCH requests in flight, by resource."""
        out = {}
        for line in self.run("get", "--raw", "/metrics").splitlines():
            if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line:
                labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")].split(","))
                resource = labels.get("resource", "?").strip('"')
                out[resource] = out.get(resource, 0) + int(float(line.rsplit(" ", 1)[1]))
        return {k: v for k, v in out.items() if v}


def objects(ns: str, first: int, count: int, endpoints: int) -> str:
    items = []
    for s in range(first, first + count):
        name = f"svc-{s:05d}"
        items.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                      "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}})
        eps = []
        for e in range(endpoints):
            i = s * endpoints + e
            eps.append({"addresses": [f"10.{64 + i // 65536}.{i // 256 % 256}.{i % 256 or 1}"],
                        "nodeName": f"node-{i % 100:03d}", "conditions": {"ready": True},
                        "targetRef": {"kind": "Pod", "name": f"{name}-{e}", "namespace": ns}})
        items.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                      "metadata": {"name": name + "-a", "namespace": ns,
                                   "labels": {"kubernetes.io/service-name": name}},
                      "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                      "endpoints": eps})
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def memory(pid: int) -> tuple[int, int]:
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--services", type=int, default=10000)
    ap.add_argument("--endpoints", type=int, default=10)
    ap.add_argument("--namespaces", type=int, default=50)
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="500 Services in 5 namespaces, 5 changes")
    ap.add_argument("--out", help="also write the report to this file")
    args = ap.parse_args()
    if args.quick:
        args.services, args.namespaces, args.changes = 500, 5, 5
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="rdmagw-agent-size.", dir="/tmp")
    os.chmod(work, 0o755)
    api = agent = None
    lines = []
    try:
        go = shutil.which("go") or "/usr/local/go/bin/go"
        agent_bin = os.path.join(work, "rdmagw-k8s")
        subprocess.run([go, "build", "-o", agent_bin, "."], cwd=os.path.join(ROOT, "tools", "rdmagw-k8s"),
                       check=True, env=dict(os.environ, CGO_ENABLED="0"))
        api = Api(os.path.join(work, "kube"))
        per_ns = -(-args.services // args.namespaces)
        t0 = time.monotonic()
        made = 0
        for n in range(args.namespaces):
            ns = f"team-{n:02d}"
            count = min(per_ns, args.services - made)
            if count <= 0:
                break
            api.run("create", "namespace", ns)
            api.run("create", "-f", "-", "-o", "name", input=objects(ns, made, count, args.endpoints))
            made += count
            print(f"[{made} Services created, {time.monotonic() - t0:.0f} s]", file=sys.stderr)
        create_s = time.monotonic() - t0

        watches_before = api.watches()  # the API server's own (its informers)
        output, table = os.path.join(work, "services.json"), os.path.join(work, "services.table")
        log = open(os.path.join(work, "agent.log"), "w")
        t0 = time.monotonic()
        agent = subprocess.Popen([agent_bin, "--kubeconfig", api.kubeconfig, "--output", output, "--table", table],
                                 stdout=subprocess.DEVNULL, stderr=log)
        while True:
            if agent.poll() is not None:
                raise SystemExit(f"the agent exited: {open(log.name).read()}")
            try:
                if os.path.exists(table) and len(json.load(open(output))["services"]) >= made:
                    break
            except (OSError, ValueError, KeyError):
                pass  # not there yet (the table is written first), or replaced while read
            if time.monotonic() - t0 > 600:
                raise SystemExit("the agent did not write every Service within 600 s")
            time.sleep(0.05)
        sync_s = time.monotonic() - t0
        time.sleep(2)
        rss_sync, hwm_sync = memory(agent.pid)
        watches = {k: v - watches_before.get(k, 0) for k, v in api.watches().items()}
        watches = {k: v for k, v in watches.items() if v}

        # Control: idle rounds; then changes, one endpoint of one Service.
        cpu0 = cpu_seconds(agent.pid)
        time.sleep(ROUND_S * args.changes)
        idle_cpu = cpu_seconds(agent.pid) - cpu0
        ns, name = "team-00", "svc-00000"
        delays = []
        cpu0 = cpu_seconds(agent.pid)
        for k in range(args.changes):
            before = os.stat(table).st_ino
            ready = "false" if k % 2 == 0 else "true"
            round_start = time.monotonic()
            api.run("patch", "endpointslice", name + "-a", "-n", ns, "--type", "json", "-p",
                    json.dumps([{"op": "replace", "path": "/endpoints/0/conditions/ready", "value": ready == "true"}]))
            patched = time.monotonic()
            while os.stat(table).st_ino == before:
                if time.monotonic() - patched > 30:
                    raise SystemExit(f"change {k + 1}: the table was not replaced within 30 s")
                time.sleep(0.002)
            delays.append(time.monotonic() - patched)
            time.sleep(max(0.0, ROUND_S - (time.monotonic() - round_start)))
        change_cpu = (cpu_seconds(agent.pid) - cpu0 - idle_cpu) / args.changes
        rss_end, hwm_end = memory(agent.pid)
        size_json, size_table = os.path.getsize(output), os.path.getsize(table)
    finally:
        if agent and agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=30)
        if api:
            api.stop()
        shutil.rmtree(work, ignore_errors=True)

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines.append(f"`perf/agent_at_size.py --services {args.services} --endpoints {args.endpoints} --namespaces "
                 f"{args.namespaces} --changes {args.changes}`; commit {commit}; {os.cpu_count()} cores, kernel "
                 f"{platform.release()}; {datetime.date.today()}; {time.monotonic() - started:.0f} s\n")
    lines.append(markdown_table(["figure", "value"], [
        ["Services, EndpointSlices created through the API", f"{made}, {made} ({made * args.endpoints} endpoints) "
                                                             f"in {create_s:.0f} s"],
        ["the agent's first file with every Service (list, build, write)", f"{sync_s:.1f} s"],
        ["services file, table", f"{size_json / 1e6:.1f} MB, {size_table / 1e6:.1f} MB"],
        ["the agent's RSS after the sync (peak)", f"{rss_sync / 1024:.0f} MiB ({hwm_sync / 1024:.0f} MiB)"],
        ["the agent's RSS after the changes (peak)", f"{rss_end / 1024:.0f} MiB ({hwm_end / 1024:.0f} MiB)"],
        ["from a patch to the table replaced: median, p99, max",
         f"{statistics.median(delays) * 1e3:.0f} ms, {p99(delays) * 1e3:.0f} ms, {max(delays) * 1e3:.0f} ms"],
        ["the agent's CPU per change (less idle)", f"{change_cpu * 1e3:.0f} ms"],
        ["WATCH requests the agent adds to the API server", ", ".join(f"{k}: {v}" for k, v in sorted(watches.items()))
         or "none seen"],
    ]))
    emit("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
