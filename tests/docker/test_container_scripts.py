"""The image's init step (docker/init.sh) and entrypoint (docker/entrypoint.sh),
run the way the container runs them, without a container engine:

- init.sh as root with only CAP_NET_ADMIN and CAP_NET_RAW (the init
  container's capabilities), inside a fresh network namespace standing in for
  the pod's;
- entrypoint.sh as uid/gid 1337 with no supplementary groups (the image's
  USER), exec-ing rdmagw, which must then be the process that gets SIGTERM;
- the Dockerfile, read statically.
"""

from __future__ import annotations

import os
import re
import resource
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from container_support import (
    DOCKER, ENTRYPOINT, INIT, REPO, SIDECAR_UID, TIMEOUT, TOOL, require_root, run, unavailable)

# Root with exactly the init container's capabilities (cap_drop ALL, cap_add
# NET_ADMIN NET_RAW): the bounding set limits what root gets at exec, and an
# empty inheritable set adds nothing back.
INIT_CAPS = ("setpriv", "--bounding-set=-all,+net_admin,+net_raw", "--inh-caps=-all")
NO_CAPS = ("setpriv", "--bounding-set=-all", "--inh-caps=-all")
CAP_NET_ADMIN, CAP_NET_RAW = 12, 13


def init_env(**settings) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDMAGW_")}
    env["RDMAGW_IPTABLES_TOOL"] = str(TOOL)
    env.update(settings)
    return env


def env_args(env: dict) -> list[str]:
    """`env -i K=V ...`: the exact environment through ip netns exec and setpriv."""
    return ["env", "-i", *(f"{k}={v}" for k, v in env.items())]


# ---------------------------------------------------------------------------
# init.sh in a network namespace


def test_init_runs_with_only_net_admin_and_net_raw(netns):
    """The capability set the namespace tests below run init.sh with is really
    the init container's: NET_ADMIN and NET_RAW, nothing else."""
    proc = netns.run([*INIT_CAPS, "grep", "^CapEff:", "/proc/self/status"])
    effective = int(proc.stdout.split()[1], 16)
    assert effective == (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW), proc.stdout


def test_init_installs_the_redirect_and_cleanup_restores_the_table(netns):
    before = netns.nat()
    env = init_env(RDMAGW_CAPTURE="10.77.0.0/16", RDMAGW_UID=str(SIDECAR_UID))

    proc = netns.run([*INIT_CAPS, *env_args(env), INIT])
    # It shows what it installs (the dry run) before installing it.
    assert "rdmagw-init: redirecting outbound TCP to: 10.77.0.0/16" in proc.stdout
    assert "REDIRECT --to-ports 15001" in proc.stdout, proc.stdout
    assert proc.stdout.rstrip().endswith("rdmagw-init: done: IPv4 rules installed"), proc.stdout

    nat = netns.nat()
    assert ":RDMAGW_OUTPUT -" in nat.splitlines(), nat
    lines = nat.splitlines()
    jumps = [l for l in lines if l.startswith("-A OUTPUT ") and l.endswith("-j RDMAGW_OUTPUT")]
    assert len(jumps) == 1 and "-p tcp" in jumps[0], nat
    chain = [l for l in lines if l.startswith("-A RDMAGW_OUTPUT ")]
    # rdmagw's own uid first (no loop), then loopback, then the capture.
    assert re.search(r"-m owner --uid-owner 1337 .*-j RETURN$", chain[0]), chain
    assert "-d 127.0.0.0/8" in chain[1] and chain[1].endswith("-j RETURN"), chain
    assert re.search(r"^-A RDMAGW_OUTPUT -d 10\.77\.0\.0/16 -p tcp .*-j REDIRECT --to-ports 15001$", chain[-1]), chain

    # A restarted init container runs it again: same rules, one jump.
    netns.run([*INIT_CAPS, *env_args(env), INIT])
    assert netns.nat() == nat

    proc = netns.run([*INIT_CAPS, *env_args(init_env()), INIT, "cleanup"])
    assert "rdmagw-init: done" in proc.stdout
    assert netns.nat() == before, "cleanup left rules behind"


def test_init_without_net_admin_fails_and_says_why(netns):
    before = netns.nat()
    proc = netns.run([*NO_CAPS, *env_args(init_env(RDMAGW_CAPTURE="10.77.0.0/16")), INIT], check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "needs CAP_NET_ADMIN" in proc.stderr, proc.stderr
    assert "rdmagw-init: error: installing the IPv4 rules failed" in proc.stderr, proc.stderr
    assert netns.nat() == before


# ---------------------------------------------------------------------------
# init.sh settings, against a stand-in for rdmagw-iptables (no root needed)


class RecordingTool:
    """A stand-in rdmagw-iptables that records each call's arguments."""

    def __init__(self, directory: Path):
        self.path = directory / "rdmagw-iptables"
        self.log = directory / "calls"
        self.path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{self.log}"\n')
        self.path.chmod(self.path.stat().st_mode | stat.S_IXUSR)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def recording_tool(tmp_path):
    return RecordingTool(tmp_path)


def run_init(tool, *args, **settings):
    env = init_env(**settings)
    env["RDMAGW_IPTABLES_TOOL"] = str(getattr(tool, "path", tool))
    return run([INIT, *args], env=env)


@pytest.mark.parametrize("capture", [None, "", "   "])
def test_init_without_capture_fails_before_touching_iptables(recording_tool, capture):
    settings = {} if capture is None else {"RDMAGW_CAPTURE": capture}
    proc = run_init(recording_tool, **settings)
    assert proc.returncode == 2
    assert "rdmagw-init: error: RDMAGW_CAPTURE is not set" in proc.stderr, proc.stderr
    assert "CIDR[:PORT|:LO-HI]" in proc.stderr
    assert recording_tool.calls() == []


def test_init_passes_every_setting_and_dry_runs_first(recording_tool):
    proc = run_init(recording_tool, RDMAGW_CAPTURE="10.1.0.0/16:6379  10.2.0.0/24:7000-7999",
                    RDMAGW_UID="2000", RDMAGW_EXCLUDE_PORTS="22,8080-8090", RDMAGW_EXCLUDE_CIDRS="10.1.9.0/24",
                    RDMAGW_REDIRECT_PORT="15006")
    assert proc.returncode == 0, proc.stderr
    args = ("--uid 2000 --redirect-port 15006 --capture 10.1.0.0/16:6379 --capture 10.2.0.0/24:7000-7999"
            " --exclude-port 22 --exclude-port 8080-8090 --exclude-cidr 10.1.9.0/24")
    assert recording_tool.calls() == [f"install --dry-run {args}", f"install {args}"]


def test_init_splits_ipv4_and_ipv6_entries_with_rdmagw_ipv6(recording_tool):
    proc = run_init(recording_tool, RDMAGW_IPV6="1", RDMAGW_CAPTURE="10.1.0.0/16 fd00:1::/64:6379 [fd00:2::5]:80",
                    RDMAGW_EXCLUDE_CIDRS="fd00:1::9/128 10.1.9.0/24", RDMAGW_IPTABLES_CMD="/usr/sbin/iptables-legacy")
    assert proc.returncode == 0, proc.stderr
    v4 = ("--uid 1337 --redirect-port 15001 --capture 10.1.0.0/16 --exclude-cidr 10.1.9.0/24"
          " --iptables-cmd /usr/sbin/iptables-legacy")
    v6 = ("--uid 1337 --redirect-port 15001 --capture fd00:1::/64:6379 --capture [fd00:2::5]:80"
          " --exclude-cidr fd00:1::9/128 --ipv6 --iptables-cmd /usr/sbin/ip6tables-legacy")
    # Both families are checked (dry run) before either is installed.
    assert recording_tool.calls() == [f"install --dry-run {v4}", f"install --dry-run {v6}",
                                      f"install {v4}", f"install {v6}"]

    run_init(recording_tool, "cleanup", RDMAGW_IPV6="1")
    assert recording_tool.calls()[-2:] == ["cleanup", "cleanup --ipv6"]


def test_init_refuses_ipv6_entries_unless_rdmagw_ipv6_is_1(recording_tool):
    proc = run_init(recording_tool, RDMAGW_CAPTURE="10.1.0.0/16 fd00:1::/64")
    assert proc.returncode == 2
    assert "'fd00:1::/64' is IPv6 but RDMAGW_IPV6 is not 1" in proc.stderr, proc.stderr
    assert recording_tool.calls() == []


def test_init_stops_when_the_tool_refuses_the_settings():
    """A refused dry run (bad CIDR) ends init with the tool's exit status and
    its message; nothing is installed."""
    proc = run_init(TOOL, RDMAGW_CAPTURE="10.1.0.1/16")
    assert proc.returncode == 2
    assert "has host bits set (did you mean 10.1.0.0/16?)" in proc.stderr, proc.stderr
    assert "rdmagw-init: error: rdmagw-iptables refused these settings" in proc.stderr
    assert "nothing was installed" in proc.stderr


# ---------------------------------------------------------------------------
# entrypoint.sh


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def image_dir():
    """/usr/local/bin and /etc/rdmagw of the image, in a world-readable temp
    dir: readable by uid 1337 wherever the repository was cloned."""
    root = Path(tempfile.mkdtemp(prefix="rdmagw-ct-"))
    try:
        os.chmod(root, 0o755)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_config(directory: Path, text: str) -> Path:
    path = directory / "rdmagw.yaml"
    path.write_text(text)
    path.chmod(0o644)
    return path


def entrypoint_env(rdmagw_bin, config) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDMAGW_")}
    env.update(RDMAGW_BIN=str(rdmagw_bin), RDMAGW_CONFIG=str(config))
    return env


def test_entrypoint_refuses_an_invalid_config_with_its_position(rdmagw_bin, tmp_path):
    config = write_config(tmp_path, "node: host-a\ntunnel:\n  tcp_port: seventy\n")
    proc = run([ENTRYPOINT], env=entrypoint_env(rdmagw_bin, config))
    assert proc.returncode == 2
    assert f"{config}:3:13: tunnel.tcp_port: must be an integer, got 'seventy'" in proc.stderr, proc.stderr
    assert f"rdmagw-entrypoint: error: {config} is invalid" in proc.stderr
    assert "event=ready" not in proc.stderr


def test_entrypoint_without_a_config_says_where_to_mount_it(rdmagw_bin, tmp_path):
    proc = run([ENTRYPOINT], env=entrypoint_env(rdmagw_bin, tmp_path / "absent.yaml"))
    assert proc.returncode == 2
    assert f"{tmp_path}/absent.yaml:0:0: (file): cannot read" in proc.stderr, proc.stderr
    assert "rdmagw-entrypoint: error: no configuration at" in proc.stderr


def read_until(proc, text: str, timeout: float) -> str:
    """proc's stderr up to the line containing text, waiting at most timeout."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    seen = ""
    deadline = time.monotonic() + timeout
    try:
        while text not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise AssertionError(f"no {text!r} within {timeout} s; stderr so far:\n{seen}")
            chunk = os.read(proc.stderr.fileno(), 65536).decode(errors="replace")
            if not chunk:
                raise AssertionError(f"stderr closed (exit {proc.wait(5)}) before {text!r}:\n{seen}")
            seen += chunk
    finally:
        sel.close()
    return seen


def proc_ids(pid: int) -> dict:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = value.split()
    return fields


def test_entrypoint_execs_rdmagw_as_uid_1337_and_sigterm_drains_it(rdmagw_bin, image_dir):
    require_root("setpriv")
    bin_dir = image_dir / "bin"
    bin_dir.mkdir(mode=0o755)
    rdmagw = bin_dir / "rdmagw"
    entrypoint = bin_dir / "entrypoint.sh"
    shutil.copy2(rdmagw_bin, rdmagw)
    shutil.copy2(ENTRYPOINT, entrypoint)
    for path in (rdmagw, entrypoint):
        path.chmod(0o755)
    config = write_config(image_dir, f"""node: sidecar
workers: 1
tunnel: {{address: 127.0.0.1, tcp_port: {free_port()}, transport: tcp}}
peers:
  - {{name: peer, address: 127.0.0.1, tcp_port: {free_port()}}}
listeners:
  - {{name: app, listen: "tcp:127.0.0.1:{free_port()}", peer: peer, target: "tcp:127.0.0.1:6379"}}
""")
    env = entrypoint_env(rdmagw, config)
    proc = subprocess.Popen(
        ["setpriv", f"--reuid={SIDECAR_UID}", f"--regid={SIDECAR_UID}", "--clear-groups",
         *env_args(env), str(entrypoint)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        log = read_until(proc, "event=ready", timeout=15)
        assert f"{config}: ok (1 listeners, 1 peers, 0 targets)" in log, log
        # exec all the way down: the process started is now rdmagw itself.
        assert Path(f"/proc/{proc.pid}/exe").resolve() == rdmagw.resolve()
        assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == "rdmagw"
        ids = proc_ids(proc.pid)
        assert ids["Uid"] == [str(SIDECAR_UID)] * 4 and ids["Gid"] == [str(SIDECAR_UID)] * 4, ids
        assert ids["Groups"] == [], ids

        proc.send_signal(signal.SIGTERM)
        rest = read_until(proc, "event=stopped", timeout=15)
        assert proc.wait(timeout=15) == 0, log + rest
        assert "event=shutdown_requested signal=Terminated" in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=TIMEOUT)
        proc.stderr.close()


def low_memlock():
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, 64 * 1024))


@pytest.mark.parametrize("transport", ["auto", "rdma"])
def test_entrypoint_warns_when_memlock_is_below_what_rdma_pins(rdmagw_bin, tmp_path, transport):
    config = write_config(tmp_path, f"""node: sidecar   # transport: tcp in a comment does not count
workers: 2
tunnel: {{address: 127.0.0.1, transport: {transport}, rdma: {{slab_size: 64MiB}}}}
""")
    # --check goes on to rdmagw: it validates and exits, so nothing starts.
    proc = subprocess.run([str(ENTRYPOINT), "--check"], env=entrypoint_env(rdmagw_bin, config),
                          capture_output=True, text=True, timeout=TIMEOUT, preexec_fn=low_memlock)
    assert proc.returncode == 0, proc.stderr
    assert ("rdmagw-entrypoint: warning: memlock limit (ulimit -l) is 64 KiB, below the 131072 KiB RDMA pins"
            " (workers x tunnel.rdma.slab_size = 2 x 64 MiB)") in proc.stderr, proc.stderr
    assert "docs/rdma.md" in proc.stderr
    consequence = "refuse to start" if transport == "rdma" else "will use TCP"
    assert consequence in proc.stderr


def test_entrypoint_does_not_warn_about_memlock_for_tcp(rdmagw_bin, tmp_path):
    config = write_config(tmp_path, "node: sidecar\ntunnel:\n  transport: tcp   # never RDMA\n")
    proc = subprocess.run([str(ENTRYPOINT), "--check"], env=entrypoint_env(rdmagw_bin, config),
                          capture_output=True, text=True, timeout=TIMEOUT, preexec_fn=low_memlock)
    assert proc.returncode == 0, proc.stderr
    assert "memlock" not in proc.stderr


def test_entrypoint_warns_when_a_transparent_sidecar_runs_as_another_uid(rdmagw_bin, tmp_path):
    config = write_config(tmp_path, """node: sidecar
tunnel: {transport: tcp}
peers: [{name: b, address: 127.0.0.2, tcp_port: 7471}]
listeners:
  - {name: out, listen: "transparent:127.0.0.1:15001", routes: [{match: 10.0.0.0/8, peer: b}]}
""")
    env = entrypoint_env(rdmagw_bin, config)
    env["RDMAGW_UID"] = str(os.getuid() + 1)
    proc = run([ENTRYPOINT, "--check"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"but the iptables redirect exempts uid {os.getuid() + 1} (RDMAGW_UID)" in proc.stderr, proc.stderr


def test_entrypoint_runs_another_command_given_instead_of_options(tmp_path):
    proc = run([ENTRYPOINT, "sh", "-c", "echo $0-ran", "other"], env=entrypoint_env("/nonexistent", tmp_path / "x"))
    assert proc.returncode == 0 and proc.stdout == "other-ran\n", proc.stderr


# ---------------------------------------------------------------------------
# The Dockerfile, statically


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for line in (DOCKER / "Dockerfile").read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        pending += " " + stripped
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), " ".join(rest.split())))
        pending = ""
    return out


def stages() -> list[list[tuple[str, str]]]:
    result = []
    for ins in dockerfile_instructions():
        if ins[0] == "FROM":
            result.append([])
        result[-1].append(ins)
    return result


def copy_parts(args: str) -> tuple[list[str], list[str], str]:
    """COPY [--flag ...] SRC... DEST -> (flags, sources, dest)."""
    words = args.split()
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    return flags, paths[:-1], paths[-1]


def test_dockerfile_builds_in_debian_12_and_runs_on_slim_as_uid_1337():
    build, runtime = stages()
    assert build[0] == ("FROM", "debian:12 AS build")
    assert any(i == "RUN" and "tools/dev/build" in a for i, a in build), "the build stage must use tools/dev/build"
    assert runtime[0] == ("FROM", "debian:12-slim")
    users = [(n, a) for n, (i, a) in enumerate(runtime) if i == "USER"]
    assert users and users[-1][1].split(":")[0] == str(SIDECAR_UID), users
    # ... at the end: after everything that installs or changes files.
    last_change = max(n for n, (i, _) in enumerate(runtime) if i in ("RUN", "COPY", "ADD"))
    assert users[-1][0] > last_change, "USER 1337 must come after the last RUN/COPY"
    assert any(i == "RUN" and f"useradd --uid {SIDECAR_UID}" in a for i, a in runtime)
    assert ("ENTRYPOINT", '["/usr/local/bin/entrypoint.sh"]') in runtime
    assert not [a for i, a in runtime if i == "EXPOSE"], "nothing is exposed by default"


def test_dockerfile_installs_the_binary_the_iptables_tool_and_both_scripts():
    runtime = stages()[-1]
    installed = {}
    for ins, args in runtime:
        if ins == "COPY":
            flags, sources, dest = copy_parts(args)
            for src in sources:
                target = dest + Path(src).name if dest.endswith("/") else dest
                installed[target] = (src, flags)
    assert installed["/usr/local/bin/rdmagw"] == ("/rdmagw", ["--from=build"])
    for target, src in (("/usr/local/bin/rdmagw-iptables", "tools/rdmagw-iptables"),
                        ("/usr/local/bin/init.sh", "docker/init.sh"),
                        ("/usr/local/bin/entrypoint.sh", "docker/entrypoint.sh")):
        assert installed[target][0] == src, installed
        assert "--chmod=0755" in installed[target][1], installed[target]


def test_every_path_the_dockerfile_copies_exists_and_is_in_the_build_context():
    allowed = [line[1:].rstrip("/") for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
               if line.startswith("!")]
    copied = []
    for ins, args in dockerfile_instructions():
        if ins == "COPY":
            flags, sources, _ = copy_parts(args)
            if not any(f.startswith("--from=") for f in flags):
                copied += sources
    assert len(copied) >= 8, copied
    for src in copied:
        path = src.rstrip("/")
        assert (REPO / path).exists(), f"COPY {src}: no such path in the repository"
        assert any(path == a or path.startswith(a + "/") for a in allowed), \
            f"COPY {src}: excluded from the build context by docker/Dockerfile.dockerignore"


def test_the_runtime_stage_installs_every_library_rdmagw_links(rdmagw_bin):
    """Each shared library rdmagw needs comes from a package the runtime stage
    installs or from debian:12-slim itself (read through dpkg on this Debian 12
    build machine; the image build's `rdmagw --version` checks it again)."""
    if shutil.which("dpkg") is None or shutil.which("ldd") is None:
        unavailable("dpkg or ldd missing: cannot map libraries to Debian packages")
    base_image = {"libc6", "libgcc-s1", "libstdc++6"}
    runtime = stages()[-1]
    apt = " ".join(a for i, a in runtime if i == "RUN" and "apt-get install" in a)
    packages = set(apt.split("--no-install-recommends", 1)[1].split("&&")[0].split())
    needed = {}
    for line in run(["ldd", rdmagw_bin]).stdout.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if not m:
            continue
        real = os.path.realpath(m.group(2))
        candidates = [real, real.replace("/usr/lib/", "/lib/", 1), m.group(2)]
        owner = next((p.stdout for p in (run(["dpkg", "-S", c]) for c in candidates) if p.returncode == 0), "")
        assert owner, f"no Debian package owns {m.group(2)}"
        needed[m.group(1)] = owner.split(":")[0]
    assert needed, "ldd listed no libraries"
    missing = {lib: pkg for lib, pkg in needed.items()
               if pkg not in packages | base_image and not is_dependency(pkg, packages)}
    assert not missing, f"libraries whose package the runtime stage does not install: {missing}"


def is_dependency(package: str, installed: set[str]) -> bool:
    """Whether one of the installed packages depends on package directly
    (libnl-3-200 arrives with libibverbs1, for instance)."""
    for pkg in installed:
        depends = run(["dpkg-query", "-W", "-f=${Depends}", pkg]).stdout
        if re.search(rf"(^|[ ,]){re.escape(package)}([ :(,]|$)", depends):
            return True
    return False
