# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the rdmagw integration tests.

The suite drives real rdmagw processes on loopback (127.0.0.1) only.  Every
process a test starts is stopped in fixture teardown (SIGTERM, then SIGKILL
after 5 s); every test runs under a SIGALRM deadline (default 120 s, the
`deadline(seconds)` marker overrides it) so a hang fails instead of blocking CI.

Binary: $RDMAGW_BIN, else $RDMAGW_BUILD_DIR/bin/rdmagw (the variable
tools/dev/build reads: RDMAGW_BUILD_DIR=build-asan runs the suite on the
sanitizer build), else <repo>/build/bin/rdmagw.  When it is missing the tests
are skipped, except under CI (CI set in the environment), where they fail.

Sanitizer build (tools/dev/build-asan): a report from AddressSanitizer,
LeakSanitizer or UndefinedBehaviorSanitizer in a process's output, or its
exit code 23 (tests/sanitizers/defaults.cc), fails the test that started it,
at teardown, with the report.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from backends import EchoServer
from clients import free_port  # noqa: F401  (re-exported for the tests)

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("RDMAGW_BUILD_DIR") or REPO / "build").resolve()
RDMAGW_BIN = os.environ.get("RDMAGW_BIN") or str(BUILD_DIR / "bin" / "rdmagw")
# The client: built with rdmagw, except in build-tsan/, which holds only what
# has threads to race (tools/dev/build-tsan); tools/test then names build/'s.
RDMAGWCTL_BIN = os.environ.get("RDMAGWCTL_BIN") or str(Path(RDMAGW_BIN).parent / "rdmagwctl")

# The same tests run on the RDMA transport inside the lab VM (tests/lab/):
#   RDMAGW_TEST_TRANSPORT  tcp (default) | rdma | auto
#   RDMAGW_LAB_ADDR        the VM-local address of the rxe device (tunnel address)
#   RDMAGW_TEST_RDMA       the tunnel.rdma mapping to use, e.g. "{recv_depth: 16}"
#   RDMAGW_TEST_SCALE      multiplies sizes and stream counts (the VM is slow)
TEST_TRANSPORT = os.environ.get("RDMAGW_TEST_TRANSPORT", "tcp")
TUNNEL_ADDR = os.environ.get("RDMAGW_LAB_ADDR", "127.0.0.1") if TEST_TRANSPORT != "tcp" else "127.0.0.1"
TEST_RDMA = os.environ.get("RDMAGW_TEST_RDMA", "{slab_size: 64MiB, recv_depth: 32}")
SCALE = float(os.environ.get("RDMAGW_TEST_SCALE", "1"))


def scaled(n: int, minimum: int = 1) -> int:
    """n times RDMAGW_TEST_SCALE, at least `minimum`."""
    return max(minimum, int(n * SCALE))


tcp_only = pytest.mark.skipif(TEST_TRANSPORT != "tcp",
                              reason="speaks the TCP transport's wire directly")
DEFAULT_TEST_TIMEOUT_S = 120
READY_TIMEOUT_S = 10.0
STOP_GRACE_S = 5.0


# ---------------------------------------------------------------------------
# Sanitizer reports

# The exit code of a process a sanitizer stopped (tests/sanitizers/defaults.cc).
SANITIZER_EXIT_CODE = 23
_SANITIZER_REPORT = re.compile(
    r"ERROR: (?:AddressSanitizer|LeakSanitizer)|: runtime error: |WARNING: ThreadSanitizer: |"
    r"^SUMMARY: (?:AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|ThreadSanitizer)|"
    r"(?:AddressSanitizer|LeakSanitizer|ThreadSanitizer) has encountered a fatal error",
    re.M)


def sanitizer_report(text: str, max_lines: int = 60) -> str | None:
    """The first sanitizer report in a process's output (up to `max_lines`
    lines from its first line, without ASan's shadow memory dump), or None."""
    m = _SANITIZER_REPORT.search(text)
    if m is None:
        return None
    start = text.rfind("\n", 0, m.start()) + 1
    report = text[start:].split("Shadow bytes around the buggy address:")[0]
    return "\n".join(report.splitlines()[:max_lines])


def sanitizer_failure(what: str, output: str, returncodes=()) -> str | None:
    """Why `what` (a process, its output and exit codes) fails the test under a
    sanitizer, or None."""
    report = sanitizer_report(output)
    if report is not None:
        return f"{what}: sanitizer report:\n{report}"
    if SANITIZER_EXIT_CODE in returncodes:
        return f"{what}: exit code {SANITIZER_EXIT_CODE} (a sanitizer's; no report in its output)"
    return None


def sanitized(binary: str) -> bool:
    """Whether `binary` runs under ASan or TSan, whose shadow memory inflates
    RSS and reserves terabytes of address space: memory figures mean little."""
    with open(binary, "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"__tsan_init" in data


def check_sanitizers(what: str, output: str, returncode: int | None = None) -> None:
    """Fails the test if a sanitizer reported in `output` or set the exit code.
    For processes the test ran itself; the `procs` fixture checks its own."""
    why = sanitizer_failure(what, output, () if returncode is None else (returncode,))
    if why is not None:
        pytest.fail(why, pytrace=False)


# ---------------------------------------------------------------------------
# Process-wide setup


def _raise_nofile_limit(want: int = 16384) -> None:
    """1,000 concurrent streams need ~2,000 fds here and in each rdmagw (which
    inherit this limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


_raise_nofile_limit()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "deadline(seconds): per-test SIGALRM timeout (default 120 s)")


# ---------------------------------------------------------------------------
# Ports


# ---------------------------------------------------------------------------
# Config files


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


_key_dir: str | None = None


def key_file(name: str = "fleet", content: str | None = None, mode: int = 0o400, uid: int | None = None) -> str:
    """A pre-shared key file for tunnel.auth (one per name and test run,
    rewritten when `content` is given): 32 random bytes, base64, as
    docs/security.md makes them. `uid`: its owner (an rdmagw that runs as
    another user reads its key as that user)."""
    global _key_dir
    if _key_dir is None:
        _key_dir = tempfile.mkdtemp(prefix="rdmagw-test-keys-")
        os.chmod(_key_dir, 0o711)  # the files are private; the directory is only traversed
        # Gone with the test run: each run used to leave one behind in /tmp.
        atexit.register(shutil.rmtree, _key_dir, True)
    path = os.path.join(_key_dir, name)
    if content is None and os.path.exists(path):
        return path
    if content is None:
        import base64
        content = base64.b64encode(os.urandom(32)).decode() + "\n"
    if os.path.exists(path):
        os.chmod(path, 0o600)
    with open(path, "w") as f:
        f.write(content)
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def auth_yaml(auth) -> list[str]:
    """tunnel.auth lines: "psk" (the run's fleet key), "psk+encrypt" (the same,
    encrypting), a list of key file paths, "none", None (no auth section:
    only a loopback tunnel may), or the section's YAML itself (a string that
    starts with "  auth:", e.g. certs.cert_auth())."""
    if auth is None:
        return []
    if isinstance(auth, str) and auth.startswith("  auth:"):
        return auth.rstrip("\n").split("\n")
    if auth == "none":
        return ["  auth: {mode: none}"]
    files = [key_file()] if auth in ("psk", "psk+encrypt") else list(auth)
    lines = ["  auth:", "    mode: psk", f"    key_files: [{', '.join(files)}]"]
    return lines + ["    encrypt: true"] if auth == "psk+encrypt" else lines


def render_config(node: str, tunnel_port: int, admin_port: int, peers=(), listeners=(),
                  targets=(), workers: int = 2, shutdown_timeout_ms: int = 3000,
                  tunnel_extra: dict | None = None, extra_lines=(), rdma_port: int | None = None,
                  transport: str | None = None, address: str = TUNNEL_ADDR,
                  peer_address: str = TUNNEL_ADDR, auth="psk", peer_connect: str = "always") -> str:
    """Renders one sidecar's YAML.  peers: [(name, tcp_port[, rdma_port])] at
    `peer_address`; listeners: dicts with name, listen, peer, target (endpoint
    strings); targets: endpoint strings; `address`: its own tunnel address;
    `auth`: see auth_yaml (every test pair authenticates unless it says not).
    `peer_connect`: the peers' `connect:`. Tests written around a session
    that exists before the first stream (faults injected into it, its
    transport asserted at start) keep `always`; rdmagw's default,
    `on_demand`, is what test_fleet.py and test_on_demand.py exercise."""
    transport = transport or TEST_TRANSPORT
    out = [
        f"node: {node}",
        f"workers: {workers}",
        f"admin: {_q(f'127.0.0.1:{admin_port}')}",
        "tunnel:",
        f"  address: {address}",
        f"  tcp_port: {tunnel_port}",
        f"  transport: {transport}",
    ]
    if transport != "tcp":
        out += [f"  rdma_port: {rdma_port or free_port()}", f"  rdma: {TEST_RDMA}"]
    for k, v in (tunnel_extra or {}).items():
        out.append(f"  {k}: {v}")
    out += auth_yaml(auth)
    if peers:
        out.append("peers:")
        for name, port, *rest in peers:
            out += [f"  - name: {name}", f"    address: {peer_address}", f"    tcp_port: {port}",
                    f"    connect: {peer_connect}"]
            if rest:
                out.append(f"    rdma_port: {rest[0]}")
    else:
        out.append("peers: []")
    if listeners:
        out.append("listeners:")
        for lst in listeners:
            out += [f"  - name: {lst['name']}",
                    f"    listen: {_q(lst['listen'])}",
                    f"    peer: {lst['peer']}",
                    f"    target: {_q(lst['target'])}"]
            if "socket_mode" in lst:
                out.append(f"    socket_mode: {_q(lst['socket_mode'])}")
            for limit in ("max_connections", "accepts_per_second", "idle_timeout_ms"):
                if limit in lst:
                    out.append(f"    {limit}: {int(lst[limit])}")
    else:
        out.append("listeners: []")
    if targets:
        out.append("targets:")
        # An endpoint, or an entry's keys as a mapping ({target, peers, proxy_protocol}).
        out += [f"  - {_q(t)}" if isinstance(t, str) else "  - " + json.dumps(t) for t in targets]
    else:
        out.append("targets: []")
    out.append(f"shutdown_timeout_ms: {shutdown_timeout_ms}")
    out += list(extra_lines)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# Processes


class ManagedProcess:
    """A child process whose stdout+stderr go to a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path):
        self.name = name
        self.argv = argv
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None
        self._logf = None
        self.start_offset = 0  # log size when the current incarnation started
        self.past_returncodes: list[int | None] = []  # of earlier incarnations

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        assert not self.running(), f"{self.name} already running"
        self._close_log()
        if self.proc is not None:
            self.past_returncodes.append(self.proc.poll())
        self.start_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def send_signal(self, sig: int) -> None:
        if self.running():
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM, grace: float = STOP_GRACE_S) -> int | None:
        """SIGTERM (or `sig`), then SIGKILL after `grace` seconds. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=grace)
            except ProcessLookupError:
                pass
        self._close_log()
        return self.proc.returncode

    def returncodes(self) -> list[int | None]:
        """Exit codes of every incarnation so far (None: still running)."""
        current = [] if self.proc is None else [self.proc.poll()]
        return self.past_returncodes + current

    def kill9(self) -> None:
        if self.running():
            self.proc.kill()
            self.proc.wait(timeout=STOP_GRACE_S)
        self._close_log()

    def _close_log(self):
        if self._logf is not None:
            try:
                self._logf.close()
            except OSError:
                pass
            self._logf = None

    # -- log access --------------------------------------------------------
    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_text(self, since: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def tail(self, n: int = 60) -> str:
        lines = self.log_text().splitlines()
        return "\n".join(lines[-n:])

    def wait_log(self, predicate, timeout: float, since: int | None = None) -> str | None:
        """Polls the log until a line satisfies `predicate` (a callable on the line,
        or a regex string).  Returns the line, or None on timeout."""
        if isinstance(predicate, str):
            rx = re.compile(predicate)
            predicate = lambda line: rx.search(line) is not None  # noqa: E731
        since = self.start_offset if since is None else since
        deadline = time.monotonic() + timeout
        for _ in range(100000):
            for line in self.log_text(since).splitlines():
                if predicate(line):
                    return line
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return None


class Sidecar(ManagedProcess):
    """One rdmagw process: `rdmagw --config FILE`, in network namespace
    `netns` if given (`ip netns exec` execs it: the pid is rdmagw's)."""

    def __init__(self, name: str, config_path: Path, log_path: Path, binary: str = RDMAGW_BIN,
                 netns: str | None = None):
        prefix = ["ip", "netns", "exec", netns] if netns else []
        super().__init__(name, prefix + [binary, "--config", str(config_path)], log_path)
        self.config_path = Path(config_path)
        self.binary = binary
        self.tunnel_port: int | None = None
        self.admin_port: int | None = None  # its admin endpoint on 127.0.0.1

    def start(self, wait: bool = True, timeout: float = READY_TIMEOUT_S):
        super().start()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        for _ in range(100000):
            if "event=ready" in self.log_text(self.start_offset):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"rdmagw {self.name} exited with {self.proc.returncode} before "
                    f"event=ready; log tail:\n{self.tail()}")
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"rdmagw {self.name} not ready after {timeout}s; log tail:\n{self.tail()}")
            time.sleep(0.05)

    def restart(self, wait: bool = True):
        """Starts again on the same config (after stop() or kill9())."""
        assert not self.running()
        return self.start(wait=wait)

    def rss_kib(self) -> int:
        """VmRSS of the process, KiB."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS line")

    def open_fds(self) -> int:
        """How many file descriptors the process has open now."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))


# ---------------------------------------------------------------------------
# Fixtures


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and rep.when in ("setup", "call"):
        for proc in getattr(item, "_rdmagw_procs", []):
            rep.sections.append((f"{proc.name} log tail ({proc.log_path})", proc.tail(60)))


class DeadlineExceeded(BaseException):
    """Raised by SIGALRM; a BaseException so no `except Exception` swallows it."""


@pytest.fixture(autouse=True)
def _test_deadline(request):
    marker = request.node.get_closest_marker("deadline")
    seconds = int(marker.args[0]) if marker else DEFAULT_TEST_TIMEOUT_S

    def on_alarm(signum, frame):
        raise DeadlineExceeded(f"test exceeded its {seconds}s deadline")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="session")
def rdmagw_bin() -> str:
    if not (os.path.isfile(RDMAGW_BIN) and os.access(RDMAGW_BIN, os.X_OK)):
        msg = f"rdmagw binary not found at {RDMAGW_BIN} (build it, or set RDMAGW_BIN)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return RDMAGW_BIN


@pytest.fixture
def procs(request):
    """Registry of every child process of the test; all are stopped at teardown
    (SIGTERM to all, then SIGKILL to whatever is left after 5 s).  Then a
    sanitizer report in any one's log, or a sanitizer's exit code from any of
    its incarnations, fails the test."""
    registry: list[ManagedProcess] = []
    request.node._rdmagw_procs = registry
    yield registry
    for p in registry:
        if p.running():
            try:
                p.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_GRACE_S
    for p in registry:
        if p.proc is None:
            continue
        try:
            p.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.proc.kill()
            try:
                p.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        p._close_log()
    failures = [why for p in registry
                if (why := sanitizer_failure(f"{p.name} ({p.log_path})", p.log_text(),
                                             p.returncodes())) is not None]
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)


@pytest.fixture
def sock_dir():
    """A short directory under /tmp for Unix socket paths (sun_path is 108 bytes)."""
    d = tempfile.mkdtemp(prefix="rdmagw-it-", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def backend():
    """backend(server) starts a backends.* server and stops it at teardown."""
    started = []

    def start(server):
        server.start()
        started.append(server)
        return server

    yield start
    for s in reversed(started):
        s.stop()


@pytest.fixture
def sidecar(rdmagw_bin, procs, tmp_path):
    """sidecar(node, config_text_or_None, netns=None, **render_kwargs) -> Sidecar
    (not started)."""

    def make(node: str, config_text: str | None = None, netns: str | None = None, **kw) -> Sidecar:
        if config_text is None:
            config_text = render_config(node, **kw)
        cfg = tmp_path / f"{node}.yaml"
        cfg.write_text(config_text)
        sc = Sidecar(node, cfg, tmp_path / f"{node}.log", rdmagw_bin, netns=netns)
        sc.tunnel_port = kw.get("tunnel_port")
        sc.admin_port = kw.get("admin_port")
        procs.append(sc)
        return sc

    return make


class Pair:
    """host-a (client side, has the listeners) and host-b (far side, allowlist)."""

    def __init__(self, a: Sidecar, b: Sidecar, listeners: dict[str, dict]):
        self.a = a
        self.b = b
        self.listeners = listeners

    def address(self, name: str):
        listen = self.listeners[name]["listen"]
        if listen.startswith("unix:"):
            return listen[len("unix:"):]
        host, port = listen[len("tcp:"):].rsplit(":", 1)
        return (host, int(port))


@pytest.fixture
def pair(sidecar, sock_dir):
    """pair(listeners, targets, ...) starts host-b then host-a and waits for both
    to be ready.  listeners: dicts {name, target, listen: "tcp" | "unix"}.
    hosts=(ns_a, ip_a, ns_b, ip_b) runs each in its network namespace with its
    tunnel on that address (netns_hosts.two_hosts makes them); listeners and
    targets must then be Unix sockets, which both namespaces reach.
    a_auth/b_auth: tunnel.auth of each (conftest.auth_yaml; default: the run's
    fleet key on both). peer_connect: host-a's `connect:` for host-b (see
    render_config). a_lines/b_lines: top-level YAML lines added to each."""

    def build(listeners, targets, *, a_tunnel: dict | None = None,
              b_tunnel: dict | None = None, shutdown_timeout_ms: int = 3000,
              workers: int = 2, start: bool = True, a_transport: str | None = None,
              b_transport: str | None = None, hosts: tuple | None = None,
              a_auth="psk", b_auth="psk", peer_connect: str = "always", a_lines=(), b_lines=()) -> Pair:
        ns_a, ip_a, ns_b, ip_b = hosts or (None, TUNNEL_ADDR, None, TUNNEL_ADDR)
        a_port, b_port = free_port(), free_port()
        a_rdma, b_rdma = free_port(), free_port()
        resolved = {}
        for spec in listeners:
            kind = spec.get("listen", "tcp")
            if kind == "tcp":
                listen = f"tcp:127.0.0.1:{free_port()}"
            elif kind == "unix":
                listen = f"unix:{sock_dir / (spec['name'] + '.sock')}"
            else:
                listen = kind  # a full endpoint string
            resolved[spec["name"]] = {"name": spec["name"], "listen": listen, "peer": "host-b",
                                      "target": spec["target"]}
            for limit in ("max_connections", "accepts_per_second", "idle_timeout_ms"):
                if limit in spec:
                    resolved[spec["name"]][limit] = spec[limit]
        b = sidecar("host-b", tunnel_port=b_port, admin_port=free_port(), targets=list(targets),
                    workers=workers, shutdown_timeout_ms=shutdown_timeout_ms,
                    tunnel_extra=b_tunnel, rdma_port=b_rdma, transport=b_transport,
                    netns=ns_b, address=ip_b, auth=b_auth, extra_lines=b_lines)
        a = sidecar("host-a", tunnel_port=a_port, admin_port=free_port(),
                    peers=[("host-b", b_port, b_rdma)], listeners=list(resolved.values()),
                    workers=workers, shutdown_timeout_ms=shutdown_timeout_ms,
                    tunnel_extra=a_tunnel, rdma_port=a_rdma, transport=a_transport,
                    netns=ns_a, address=ip_a, peer_address=ip_b, auth=a_auth, peer_connect=peer_connect,
                    extra_lines=a_lines)
        if start:
            b.start()
            a.start()
            if TEST_TRANSPORT != "tcp":
                # "ready" means listeners are bound; RDMA CM sessions come up
                # after (seconds under the lab's emulation). Tests time what
                # happens to streams, not session setup: wait for every worker's.
                want = workers
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and a.log_text().count("event=session_open") < want:
                    time.sleep(0.1)
        return Pair(a, b, resolved)

    return build


def echo_pair(pair, backend, name: str = "echo", **kw):
    """The common setup: an EchoServer (through the `backend` fixture) behind a
    pair (the `pair` fixture) whose one listener `name` leads to it; kw go to
    pair(). Returns (pair, echo server)."""
    echo = backend(EchoServer())
    p = pair([{"name": name, "target": echo.endpoint}], [echo.endpoint], **kw)
    return p, echo
