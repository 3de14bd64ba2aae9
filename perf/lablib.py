# SPDX-License-Identifier: Apache-2.0
"""What the benchmarks on the RDMA lab's wire share (perf/peers,
perf/wire_faults): on this machine, building perf/peer_apps and booting the lab
with the script inside it, keeping the report it prints; inside the lab, on
host a, servers on host b and the counters that say whether bytes crossed
the link over RDMA."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOECHO = os.path.join(ROOT, "build", "perf", "goecho")
FORKECHO = os.path.join(ROOT, "build", "perf", "forkecho")
REPORT_BEGIN, REPORT_END = "=== report begin", "=== report end"


# -- on this machine ---------------------------------------------------------

def build_apps() -> None:
    """perf/peer_apps' programs into build/perf/: goecho static
    (CGO_ENABLED=0), forkecho with the C++ compiler."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "golang-go"], check=True)
        go = shutil.which("go")
    os.makedirs(os.path.dirname(GOECHO), exist_ok=True)
    subprocess.run([go, "build", "-o", GOECHO, "."], cwd=os.path.join(ROOT, "perf", "peer_apps", "goecho"),
                   env=dict(os.environ, CGO_ENABLED="0"), check=True)
    out = subprocess.run(["file", GOECHO], stdout=subprocess.PIPE, text=True).stdout
    if "statically linked" not in out:
        raise SystemExit(f"{GOECHO} is not static: {out.strip()}")
    subprocess.run(["c++", "-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", "-o", FORKECHO,
                    os.path.join(ROOT, "perf", "peer_apps", "forkecho.cc")], check=True)


def run_in_lab(script: str, argv: list[str], timeout: int, out: str | None) -> int:
    """Checks the build and packages, builds perf/peer_apps, then runs `script
    --inside ARGV` on host a of `tools/rdma-lab run --wire`, passing its
    output through; what it prints between the report markers goes to `out`."""
    name = os.path.basename(script)
    if not os.path.exists(os.path.join(ROOT, "build", "bin", "rdmagw")):
        print(f"{name}: build/bin/rdmagw is missing: run tools/dev/build first", file=sys.stderr)
        return 2
    subprocess.run([os.path.join(ROOT, "tools", "dev", "install-deps")], check=True)
    build_apps()
    cmd = [os.path.join(ROOT, "tools", "rdma-lab"), "run", "--wire", "--timeout", str(timeout), "--",
           os.path.realpath(script), "--inside", *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    report, in_report = [], False
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.startswith(REPORT_BEGIN):
            in_report = True
        elif line.startswith(REPORT_END):
            in_report = False
        elif in_report:
            report.append(line)
    rc = proc.wait()
    if out and report:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                                text=True).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               stdout=subprocess.PIPE, text=True).stdout.strip()
        with open(out, "w") as f:
            f.write(f"# {name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n"
                    f"Command: `perf/{name} {' '.join(argv)}` at {commit}{' (with local changes)' if dirty else ''}, "
                    f"on {os.cpu_count()} cores: the RDMA lab's wire, two VMs under TCG, one vCPU each; "
                    f"exit status {rc}.\n\n")
            f.write("".join(report))
        print(f"{name}: report written to {out}")
    return rc


def print_report(text: str) -> None:
    print(REPORT_BEGIN, flush=True)
    print(text, end="", flush=True)
    print(REPORT_END, flush=True)


# -- inside the lab, on host a -------------------------------------------------

PEER = os.environ.get("RDMAGW_LAB_PEER_ADDR", "")
DEVICE = os.environ.get("RDMAGW_LAB_DEVICE", "rxe0")
NETDEV = os.environ.get("RDMAGW_LAB_NETDEV", "wire0")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def on_b(cmd: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["lab-on", "b", "sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def link(*args: str) -> None:
    subprocess.run(["lab-link", *args], check=True, timeout=60)


def counters() -> dict[str, int]:
    """Packets host a's rxe device sent and received, and packets the link's
    interface carried (rxe's own travel over it too, as UDP)."""
    def read(path):
        with open(path) as f:
            return int(f.read())
    hw = f"/sys/class/infiniband/{DEVICE}/ports/1/hw_counters"
    st = f"/sys/class/net/{NETDEV}/statistics"
    return {"rdma": read(f"{hw}/sent_pkts") + read(f"{hw}/rcvd_pkts"),
            "link": read(f"{st}/tx_packets") + read(f"{st}/rx_packets")}


def signal_name(rc: int) -> str:
    n = rc - 128 if rc > 128 else -rc
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


class Server:
    """A server on host b, through lab-on, its output in a file."""

    def __init__(self, name: str, argv: list[str], workdir: str, env: list[str] | None = None):
        self.out_path = os.path.join(workdir, f"{name}-server.out")
        prefix = ["env", *env] if env else []
        self.proc = subprocess.Popen(["lab-on", "b", *prefix, *argv], stdin=subprocess.DEVNULL,
                                     stdout=open(self.out_path, "w"), stderr=subprocess.STDOUT)

    def output(self) -> str:
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def wait_listening(self, port: int, timeout: float = 30) -> str | None:
        """None once port `port` listens on host b (a TCP listener, or an RDMA
        CM one for rsocket), else why not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return self.ended() + " at start"
            r = on_b(f"ss -ltnH 'sport = :{port}'; rdma resource show cm_id 2>/dev/null | grep LISTEN || true")
            if re.search(rf":{port}\s", r.stdout) or re.search(rf"src-addr \S+:{port}\b", r.stdout):
                return None
            time.sleep(0.5)
        return f"the server did not listen on port {port} within {timeout:.0f} s"

    def ended(self) -> str:
        rc = self.proc.returncode
        return f"server crashed ({signal_name(rc)})" if rc > 128 or rc < 0 else f"server exited {rc}"

    def stop(self) -> str | None:
        """Stops it; says how it had ended if it was gone already."""
        was = None if self.proc.poll() is None else self.ended()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return was

    def tail(self, lines: int = 4) -> str:
        """Its last lines, or, if it said why it failed, those lines."""
        return telling_lines(self.output(), lines)


def telling_lines(text: str, lines: int = 4) -> str:
    """The lines of a program's output that say what went wrong (an error, a
    crash report's first lines, the library it crashed in), else its last."""
    found = []
    for line in text.splitlines():
        line = " ".join(line.split())
        if re.search(r"(?i)\berror\b|failed|crashed|segmentation|librspreload|not supported|refused", line) \
                and line not in found:
            found.append(line)
    chosen = found[:lines] or [" ".join(l.split()) for l in text.strip().splitlines()[-lines:]]
    return " / ".join(chosen)[:400]
