#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Redis's own test suite through a pair, against the same suite run directly.

    tests/apps/redis_suite.py [--short] [--paths direct,rdmagw,rdmagw-redirect] [--units U,...]

The suite (the `tests/` of the redis source release that matches the
installed redis-server, from Debian's archive, checked by SHA-256 and kept
in ~/.cache/rdmagw) runs in its external-server mode (`--host --port`) one
unit at a time, each against a fresh redis-server on the same port:

  direct           the suite's client to redis-server
  rdmagw           client -> rdmagw host-a -> tunnel -> rdmagw host-b -> redis-server
  rdmagw-redirect  the same with both sidecars' local legs past TCP
                   (local_legs.redirect), the servers, clients and sidecars
                   in a cgroup v2 of the script's own

A path passes when every test that passed directly passes through it, and
no unit ends in an exception there that did not directly. Five tests that
order commands across two connections without waiting for a reply are
skipped in every path (ORDERED_ACROSS_CONNECTIONS: no proxy keeps that
order, HAProxy neither; one of them then blocks for ever). The table says
per path how many tests passed, failed and were skipped, and how long the
units took. rdmagw-redirect where the mode is unavailable: skipped with
rdmagw's reason, except under CI on a kernel that has it (6.13 or later),
where it fails. `--short` runs a handful of units (CI: tools/test); the
default is every unit the external mode runs (4.5 to 6 minutes per path on
2 cores: perf/results/2026-11-29-redis-suite.md).

Environment: RDMAGW_CACHE (where the suite is kept, default ~/.cache/rdmagw),
REDIS_SUITE_UNIT_TIMEOUT (seconds a unit may take, default 600),
REDIS_SUITE_KEEP (a directory that keeps each unit's output, per path).

Exit status: 0 when every path passes, 1 otherwise, 2 on a setup error.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "perf"))
import benchlib  # noqa: E402

# The release the installed server comes from (Debian 12: 7.0.15), and the
# digest of Debian's copy of it.
REDIS_VERSION = "7.0.15"
SOURCE_URL = f"http://deb.debian.org/debian/pool/main/r/redis/redis_{REDIS_VERSION}.orig.tar.gz"
SOURCE_SHA256 = "4b1dc4ee6d622a09fff9c6777191209750fb5e5a725ef78ea012d6eef4c22982"

SHORT_UNITS = ["unit/type/incr", "unit/type/string", "unit/type/hash", "unit/type/list", "unit/keyspace",
               "unit/protocol", "unit/pubsub", "unit/multi", "unit/scripting"]
PATHS = ["direct", "rdmagw", "rdmagw-redirect"]
# Tests that send a command on one connection and, without waiting for its
# reply, one on another that must be served after it. Nothing orders two
# TCP connections: directly, the first nearly always reaches the server
# first; through any proxy (HAProxy too: 2 of 8 runs of unit/pubsub failed
# one of them) it may not, and then the test fails, or blocks for ever on
# a BRPOPLPUSH with no timeout. Skipped in every path, direct included.
ORDERED_ACROSS_CONNECTIONS = [
    "PUBLISH/SUBSCRIBE after UNSUBSCRIBE without arguments",  # UNSUBSCRIBE, then PUBLISH elsewhere
    "PUBLISH/PSUBSCRIBE after PUNSUBSCRIBE without arguments",
    "SPUBLISH/SSUBSCRIBE after UNSUBSCRIBE without arguments",
    "BRPOPLPUSH does not affect WATCH while still blocked",  # EXEC, then LPUSH elsewhere
    "BRPOPLPUSH with multiple blocked clients",  # two BRPOPLPUSH, then LPUSH elsewhere: may block for ever
]
KEEP = os.environ.get("REDIS_SUITE_KEEP")  # a directory: each unit's output is kept there
UNIT_TIMEOUT_S = int(os.environ.get("REDIS_SUITE_UNIT_TIMEOUT", "600"))
RESULT = re.compile(r"^\[(ok|err|exception|skip|ignore)\]: (.*?)(?: \(\d+ ms\))?$")


def log(*args) -> None:
    print(*args, flush=True)


def suite_dir() -> str:
    """The source release's tests, fetched once and kept."""
    cache = os.environ.get("RDMAGW_CACHE", os.path.expanduser("~/.cache/rdmagw"))
    root = os.path.join(cache, f"redis-{REDIS_VERSION}")
    if os.path.exists(os.path.join(root, "tests", "test_helper.tcl")):
        return root
    os.makedirs(cache, exist_ok=True)
    log(f"fetching {SOURCE_URL}")
    with urllib.request.urlopen(SOURCE_URL, timeout=120) as r:
        data = r.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SOURCE_SHA256:
        raise SystemExit(f"redis_suite: {SOURCE_URL} has SHA-256 {digest}, expected {SOURCE_SHA256}")
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        archive = os.path.join(tmp, "redis.tar.gz")
        with open(archive, "wb") as f:
            f.write(data)
        with tarfile.open(archive) as t:
            # The digest is pinned; the data filter, where this Python has it, besides.
            t.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        os.replace(os.path.join(tmp, f"redis-{REDIS_VERSION}"), root)
    return root


def link_binaries(root: str) -> None:
    """The suite runs the binaries in src/ (redis-cli, redis-benchmark ...):
    the installed ones."""
    os.makedirs(os.path.join(root, "src"), exist_ok=True)
    for tool in ("redis-server", "redis-cli", "redis-benchmark", "redis-check-aof", "redis-check-rdb"):
        found = shutil.which(tool)
        link = os.path.join(root, "src", tool)
        if found and not os.path.lexists(link):
            os.symlink(found, link)


def check_server_version() -> None:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"v=(\d+\.\d+)\.", out)
    if not m or m.group(1) != REDIS_VERSION.rsplit(".", 1)[0]:
        raise SystemExit(f"redis_suite: the suite is redis {REDIS_VERSION}'s; the installed server says {out.strip()!r}")


def all_units(root: str) -> list[str]:
    out = subprocess.run(["tclsh", "tests/test_helper.tcl", "--list-tests"], cwd=root, capture_output=True,
                         text=True, timeout=60).stdout
    return [u for u in out.split() if u.startswith("unit/")]


class Path:
    """One way from the suite's client to the server: its processes, the port
    the client uses, the cgroup everything runs in (rdmagw-redirect)."""

    def __init__(self, name: str, work: str, server_port: int):
        self.name, self.work, self.server_port = name, work, server_port
        self.procs: list[subprocess.Popen] = []
        self.server: subprocess.Popen | None = None
        self.cgroup: tuple[str, str] | None = None
        self.port = server_port
        self.skipped = ""

    def join(self):
        return (lambda: benchlib.join_cgroup(self.cgroup[0])) if self.cgroup else None

    def restart_server(self) -> None:
        """A fresh server for each unit: external mode shares one server, and
        a unit may leave settings behind or end it (DEBUG, SHUTDOWN)."""
        if self.server and self.server.poll() is None:
            self.server.terminate()
            self.server.wait(timeout=15)
        data = os.path.join(self.work, f"{self.name}-data")
        shutil.rmtree(data, ignore_errors=True)
        os.makedirs(data)
        self.server = subprocess.Popen(
            ["redis-server", "--port", str(self.server_port), "--bind", "127.0.0.1", "--dir", data, "--save", "",
             "--appendonly", "no", "--enable-debug-command", "yes", "--enable-module-command", "yes",
             "--enable-protected-configs", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=self.join())
        benchlib.wait_port(self.server_port)

    def start(self) -> None:
        if self.name == "rdmagw-redirect":
            self.cgroup = benchlib.make_cgroup(f"rdmagw-redis-suite-{os.getpid()}")
        self.restart_server()
        if self.name == "direct":
            return
        self.port = benchlib.free_port()
        admin = {"a": benchlib.free_port(), "b": benchlib.free_port()}
        tunnel = {"a": benchlib.free_port(), "b": benchlib.free_port()}
        legs = f"local_legs: {{redirect: true, cgroup: {self.cgroup[0]}}}\n" if self.cgroup else ""
        target = f"tcp:127.0.0.1:{self.server_port}"
        configs = {
            "b": f"""node: host-b
admin: "127.0.0.1:{admin['b']}"
tunnel: {{address: 127.0.0.1, tcp_port: {tunnel['b']}}}
targets: ["{target}"]
{legs}""",
            "a": f"""node: host-a
admin: "127.0.0.1:{admin['a']}"
tunnel: {{address: 127.0.0.1, tcp_port: {tunnel['a']}}}
peers:
  - {{name: host-b, address: 127.0.0.1, tcp_port: {tunnel['b']}}}
listeners:
  - {{name: redis, listen: "tcp:127.0.0.1:{self.port}", peer: host-b, target: "{target}"}}
{legs}""",
        }
        for side in ("b", "a"):
            base = os.path.join(self.work, f"{self.name}-{side}")
            with open(f"{base}.yaml", "w") as f:
                f.write(configs[side])
            self.procs.append(subprocess.Popen([benchlib.RDMAGW, "--config", f"{base}.yaml"],
                                               stdout=subprocess.DEVNULL, stderr=open(f"{base}.log", "w"),
                                               preexec_fn=self.join()))
            benchlib.wait_log(f"{base}.log", "event=ready")
        benchlib.wait_port(self.port)
        if self.cgroup:
            for side in ("b", "a"):
                state = benchlib.admin_json(admin[side], "/stats")["local_legs"]
                if state["state"] != "redirected":
                    self.skipped = f"local legs {state['state']}: {state['reason']}"

    def stop(self) -> None:
        benchlib.stop_all(self.procs + ([self.server] if self.server else []))
        if self.cgroup:
            benchlib.remove_cgroup(self.cgroup[0])


def run_unit(root: str, path: Path, unit: str) -> dict[str, str]:
    """Test name -> ok | err | exception | skip, for one unit through `path`."""
    path.restart_server()
    cmd = ["tclsh", "tests/test_helper.tcl", "--host", "127.0.0.1", "--port", str(path.port), "--clients", "1",
           "--durable", "--timeout", str(UNIT_TIMEOUT_S), "--single", unit]
    for name in ORDERED_ACROSS_CONNECTIONS:
        cmd += ["--skiptest", name]
    env = dict(os.environ, TERM="dumb")  # no colours in the output parsed here
    try:
        out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=UNIT_TIMEOUT_S + 60, env=env,
                             preexec_fn=path.join()).stdout
    except subprocess.TimeoutExpired as e:
        tail = (e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or "").splitlines()
        log(f"    {unit} did not finish in {UNIT_TIMEOUT_S + 60} s; its last lines:")
        log("\n".join(f"    | {text}" for text in tail[-15:]))
        return {f"{unit} (the unit)": "exception"}
    if KEEP:
        os.makedirs(KEEP, exist_ok=True)
        with open(os.path.join(KEEP, f"{path.name}-{unit.replace('/', '-')}.out"), "a") as f:
            f.write(out)
    results: dict[str, str] = {}
    lines = out.splitlines()
    for i, line in enumerate(lines):
        m = RESULT.match(line)
        if not m:
            continue
        kind, name = m.group(1), re.sub(r" in tests/\S+\.tcl$", "", m.group(2))
        if kind in ("err", "exception"):
            log("\n".join(f"    | {text}" for text in lines[i:i + 8]))
        kind = "skip" if kind == "ignore" else kind
        if kind == "exception":
            name = f"{unit} (the unit)"
        results.setdefault(name, kind)
        if kind in ("err", "exception"):
            results[name] = kind  # a test named twice counts as failed if either failed
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--short", action="store_true", help="a handful of units (" + ", ".join(SHORT_UNITS) + ")")
    ap.add_argument("--units", help="these units (comma-separated, e.g. unit/type/list)")
    ap.add_argument("--paths", default=",".join(PATHS), help="default: " + ",".join(PATHS))
    args = ap.parse_args(argv)
    paths = args.paths.split(",")
    if paths[0] != "direct" or any(p not in PATHS for p in paths):
        ap.error(f"--paths: direct first, then any of {PATHS[1:]}")
    for tool in ("redis-server", "tclsh"):
        if not shutil.which(tool):
            print(f"redis_suite: {tool} is not installed (tools/dev/install-deps installs it)", file=sys.stderr)
            return 2
    check_server_version()
    root = suite_dir()
    link_binaries(root)
    units = args.units.split(",") if args.units else SHORT_UNITS if args.short else all_units(root)
    log(f"redis {REDIS_VERSION}'s suite, {len(units)} units, paths {', '.join(paths)}")
    results: dict[str, dict[str, str]] = {}
    seconds: dict[str, float] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rdmagw-redis-suite-") as work:
        for name in paths:
            path = Path(name, work, benchlib.free_port())
            started = time.monotonic()
            try:
                path.start()
                if path.skipped:
                    skipped[name] = path.skipped
                    continue
                results[name] = {}
                for i, unit in enumerate(units, 1):
                    got = run_unit(root, path, unit)
                    results[name].update(got)
                    bad = sum(1 for k in got.values() if k in ("err", "exception"))
                    log(f"  {name} [{i}/{len(units)}] {unit}: {sum(1 for k in got.values() if k == 'ok')} ok"
                        + (f", {bad} failed" if bad else ""))
            finally:
                path.stop()
            seconds[name] = time.monotonic() - started
    direct = results["direct"]
    passed_directly = {t for t, k in direct.items() if k == "ok"}
    failed = False
    log("\n| path | passed | failed | skipped | seconds | as directly |\n|---|---:|---:|---:|---:|---|")
    for name in paths:
        if name in skipped:
            log(f"| {name} | | | | | skipped: {skipped[name]} |")
            continue
        got = results[name]
        counts = {k: sum(1 for v in got.values() if v == k) for k in ("ok", "err", "exception", "skip")}
        lost = sorted(t for t in passed_directly if got.get(t) != "ok")
        extra_exceptions = sorted(t for t, k in got.items() if k == "exception" and direct.get(t) != "exception")
        same = not lost and not extra_exceptions
        failed |= not same
        log(f"| {name} | {counts['ok']} | {counts['err'] + counts['exception']} | {counts['skip']} | "
            f"{seconds[name]:.0f} | {'yes' if same else 'NO'} |")
        for t in lost[:50]:
            log(f"    passed directly, not through {name}: {t} ({got.get(t, 'not run')})")
        for t in extra_exceptions[:20]:
            log(f"    ended in an exception through {name} only: {t}")
    for t, k in sorted(direct.items()):
        if k in ("err", "exception"):
            log(f"    (failed directly too, not counted: {t})")
    log(f"    (skipped in every path: {len(ORDERED_ACROSS_CONNECTIONS)} tests that order commands across two "
        "connections without waiting for a reply, ORDERED_ACROSS_CONNECTIONS)")
    kernel = re.match(r"(\d+)\.(\d+)", platform.release())
    if ("rdmagw-redirect" in skipped and os.environ.get("CI") and kernel
            and (int(kernel.group(1)), int(kernel.group(2))) >= (6, 13)):
        log(f"rdmagw-redirect must run on kernel {platform.release()} under CI: {skipped['rdmagw-redirect']}")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
