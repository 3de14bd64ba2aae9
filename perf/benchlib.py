# SPDX-License-Identifier: Apache-2.0
"""What the benchmark scripts share: ports, processes, CPU time, and parsing
the output of the load generators (redis-benchmark, iperf3, sockperf, wrk).

Parsers take the tool's text and return numbers; they raise ValueError with
the tail of the text when it holds no result, so that a benchmark never
records a figure it did not see. tests/perf/ checks them against recorded
output.
"""
import contextlib
import json
import os
import re
import socket
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RDMAGW = os.environ.get("RDMAGW_BIN", os.path.join(ROOT, "build", "bin", "rdmagw"))


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout}s")


def wait_path(path: str, timeout: float = 10.0) -> None:
    """Until something accepts connections on the Unix socket at `path`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(0.5)
            s.connect(path)
            return
        except OSError:
            time.sleep(0.05)
        finally:
            s.close()
    raise RuntimeError(f"nothing listens on unix:{path} after {timeout}s")


def wait_log(path: str, needle: str, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            if needle in f.read():
                return
        time.sleep(0.05)
    raise RuntimeError(f"{path}: no '{needle}' after {timeout}s")


def stop_all(procs) -> None:
    """SIGTERM, in reverse order of start; SIGKILL what has not gone in 15 s."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()


# --- a cgroup v2 of the benchmark's own (rdmagw's local_legs.cgroup) -------------


def cgroup2_mount() -> str:
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return fields[1]
    raise RuntimeError("no cgroup v2 is mounted (the local legs' redirect attaches to one)")


def make_cgroup(name: str) -> tuple[str, str]:
    """A new cgroup v2 directory, and the one this process is in now."""
    mount = cgroup2_mount()
    with open("/proc/self/cgroup") as f:
        own = next(line[3:].strip() for line in f if line.startswith("0::"))
    path = os.path.join(mount, name)
    os.makedirs(path, exist_ok=True)
    return path, mount + own


def join_cgroup(path: str) -> None:
    """Moves the calling process into `path` (a preexec_fn for Popen, too)."""
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


@contextlib.contextmanager
def in_cgroup(path: str, home: str):
    """This process in `path` for the block, back in `home` after."""
    join_cgroup(path)
    try:
        yield
    finally:
        join_cgroup(home)


@contextlib.contextmanager
def nothing():
    yield


def remove_cgroup(path: str, timeout: float = 10.0) -> None:
    """Removes a cgroup once its processes (stopped by the caller) are gone."""
    deadline = time.monotonic() + timeout
    for _ in range(10000):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


# --- what a process costs ------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def parse_proc_stat_cpu(text: str) -> float:
    """utime + stime, in seconds, from the text of /proc/PID/stat (all its
    threads, the ended ones included)."""
    # The command name (field 2) is in parentheses and may hold spaces.
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(rest[11]) + int(rest[12])) / _TICK


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        return parse_proc_stat_cpu(f.read())


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) if m else 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def admin_json(port: int, path: str, timeout: float = 10.0):
    """An rdmagw admin endpoint's JSON answer (GET http://127.0.0.1:PORT/PATH)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return json.loads(r.read())


# --- load generators' output ---------------------------------------------------


def _no_result(tool: str, what: str, text: str):
    return ValueError(f"{tool} printed no {what}:\n{text[-1500:]}")


def parse_redis_benchmark(text: str) -> dict:
    """{"SET": requests per second, ...} from `redis-benchmark -q` output
    (its progress lines end in \\r, the results in \\n)."""
    text = text.replace("\r", "\n")
    found = {m.group(1): float(m.group(2))
             for m in re.finditer(r"^([A-Z]+): ([0-9.]+) requests per second", text, re.M)}
    if not found:
        raise _no_result("redis-benchmark", "result", text)
    return found


def parse_redis_csv(text: str) -> dict:
    """{"GET": {"rps": rate, "p99_ms": latency}, ...} from `redis-benchmark --csv`."""
    found = {}
    for m in re.finditer(r'^"([A-Z_]+)","([0-9.]+)","[0-9.]+","[0-9.]+","[0-9.]+","[0-9.]+","([0-9.]+)"', text, re.M):
        found[m.group(1)] = {"rps": float(m.group(2)), "p99_ms": float(m.group(3))}
    if not found:
        raise _no_result("redis-benchmark --csv", "result", text)
    return found


def parse_iperf3_json(text: str) -> dict:
    """{"bytes": received, "seconds": duration, "gbps": rate} of an
    `iperf3 -J` client run."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise _no_result("iperf3", f"JSON ({e})", text) from e
    if "error" in data:
        raise ValueError("iperf3: " + data["error"])
    received = data["end"]["sum_received"]
    return {"bytes": int(received["bytes"]), "seconds": float(received["seconds"]),
            "gbps": received["bits_per_second"] / 1e9}


def parse_sockperf(text: str) -> dict:
    """{"p50": µs, "p99": µs, "observations": n, "round_trips": n} from
    `sockperf ping-pong` (with --full-rtt the figures are round trips).
    Observations are the measured part of the run; round_trips are all of
    its replies, warm-up included: what the processes on the way handled."""
    out = {}
    for name, key in (("50.000", "p50"), ("99.000", "p99")):
        m = re.search(rf"percentile {re.escape(name)} =\s+([0-9.]+)", text)
        if not m:
            raise _no_result("sockperf", f"percentile {name}", text)
        out[key] = float(m.group(1))
    m = re.search(r"(\d+) observations", text)
    out["observations"] = int(m.group(1)) if m else 0
    m = re.search(r"\[Total Run\].*ReceivedMessages=(\d+)", text)
    out["round_trips"] = int(m.group(1)) if m else 0
    return out


def parse_wrk(text: str) -> dict:
    """{"requests": n, "rps": rate, "errors": socket errors and non-2xx/3xx,
    and "p99_us" with --latency} from wrk's summary."""
    m = re.search(r"^\s*(\d+) requests in ([0-9.]+)(\w+)", text, re.M)
    r = re.search(r"^Requests/sec:\s+([0-9.]+)", text, re.M)
    if not m or not r:
        raise _no_result("wrk", "summary", text)
    errors = 0
    e = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if e:
        errors += sum(int(x) for x in e.groups())
    n = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if n:
        errors += int(n.group(1))
    out = {"requests": int(m.group(1)), "rps": float(r.group(1)), "errors": errors}
    # With --latency: the distribution's 99% line, in µs.
    p = re.search(r"^\s*99%\s+([0-9.]+)(us|ms|s)\s*$", text, re.M)
    if p:
        out["p99_us"] = float(p.group(1)) * {"us": 1, "ms": 1000, "s": 1e6}[p.group(2)]
    return out


# --- results -------------------------------------------------------------------


def emit(table: str, out) -> None:
    """Prints the table, and writes it to `out` when given."""
    print(table)
    if out:
        with open(out, "w") as f:
            f.write(table + "\n")


def p99(values: list) -> float:
    """The 99th percentile of `values` (the nearest rank)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]


def markdown_table(header: list, rows: list) -> str:
    """A markdown table; the first column left-aligned, the others right."""
    lines = ["| " + " | ".join(header) + " |",
             "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
