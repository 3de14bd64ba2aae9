#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What one run of the local legs' sk_msg program costs (nanoseconds per
message), measured by the kernel itself while a perf/compare.py round of
redis through the redirected pair runs.

The kernel counts each BPF program's runs and the time spent in them when
kernel.bpf_stats_enabled is 1 (a few ns of clock reads per run: the figure
includes them, and the same for every build compared). This turns it on,
runs `perf/compare.py --paths rdmagw-redirect`, reads `bpftool -j prog show`
twice a second (the programs go when the pair stops), restores the sysctl,
and prints each program's runs and ns per run. Compare builds by running it
several times on each, in turns, on the same machine: on a shared 2-core
machine single runs differ by up to 60 ns (253-310 ns for one build).

  perf/local_legs_prog_cost.py                      # one round of redis-set
  perf/local_legs_prog_cost.py --rounds 3 --tests redis-set,redis-get

Needs root, bpftool, and what perf/compare.py's rdmagw-redirect path needs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
PROGRAM = "local_redirect_msg"


def sample(programs: dict[int, dict]) -> None:
    """The latest counters of every sk_msg program of the local legs, by id."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, timeout=10)
    if out.returncode != 0:
        return
    for prog in json.loads(out.stdout or "[]"):
        if prog.get("name") == PROGRAM and "run_cnt" in prog:
            programs[prog["id"]] = {"run_cnt": prog["run_cnt"], "run_time_ns": prog["run_time_ns"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="perf/compare.py rounds (default 1)")
    parser.add_argument("--tests", default="redis-set", help="perf/compare.py tests (default redis-set)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (kernel.bpf_stats_enabled, bpftool)", file=sys.stderr)
        return 2
    before = SYSCTL.read_text().strip()
    programs: dict[int, dict] = {}
    done = threading.Event()

    def poll() -> None:
        deadline = time.monotonic() + 3600  # bounded, whatever compare.py does
        while not done.is_set() and time.monotonic() < deadline:
            sample(programs)
            done.wait(0.5)

    SYSCTL.write_text("1")
    poller = threading.Thread(target=poll, daemon=True)
    try:
        poller.start()
        bench = subprocess.run([sys.executable, str(HERE / "compare.py"), "--paths", "rdmagw-redirect", "--tests",
                                args.tests, "--rounds", str(args.rounds)], capture_output=True, text=True,
                               timeout=3600)
    finally:
        done.set()
        poller.join(timeout=15)
        SYSCTL.write_text(before)
    if bench.returncode != 0:
        print(bench.stdout[-2000:] + bench.stderr[-2000:], file=sys.stderr)
        return 1
    if not programs:
        print(f"no {PROGRAM} program was seen running", file=sys.stderr)
        return 1
    print(f"{PROGRAM}, perf/compare.py --paths rdmagw-redirect --tests {args.tests} --rounds {args.rounds}")
    print("| program id | runs | ns per run |")
    print("|---:|---:|---:|")
    runs = spent = 0
    for prog_id, c in sorted(programs.items()):
        runs += c["run_cnt"]
        spent += c["run_time_ns"]
        print(f"| {prog_id} | {c['run_cnt']} | {c['run_time_ns'] / max(1, c['run_cnt']):.0f} |")
    print(f"| all | {runs} | {spent / max(1, runs):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
