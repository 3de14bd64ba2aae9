# SPDX-License-Identifier: Apache-2.0
"""The image's init step (docker/init.sh) and entrypoint (docker/entrypoint.sh),
run the way the container runs them, without a container engine:

- init.sh as root with only CAP_NET_ADMIN and CAP_NET_RAW (the init
  container's capabilities), inside a fresh network namespace standing in for
  the pod's;
- entrypoint.sh as uid/gid 1337 with no supplementary groups (the image's
  USER), exec-ing rdmagw, which must then be the process that gets SIGTERM;
- the Dockerfile, read statically, and its build-time checks run against the
  built binaries.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from container_support import (
    DEFAULT_ADMIN, DOCKER, ENTRYPOINT, IMAGE_RDMAGWCTL, INIT, REPO, SIDECAR_UID, TIMEOUT, TOOL, copy_parts,
    dockerfile_instructions, free_port, healthcheck, rdmagwctl_timeout, read_until, require_ready_command,
    require_root, run, runtime_env, seconds, sidecar_config, stages, unavailable)

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


def test_init_passes_rdmagw_gid_as_a_second_exemption(recording_tool):
    proc = run_init(recording_tool, RDMAGW_CAPTURE="10.1.0.0/16", RDMAGW_UID="1337", RDMAGW_GID="1337")
    assert proc.returncode == 0, proc.stderr
    args = "--uid 1337 --redirect-port 15001 --gid 1337 --capture 10.1.0.0/16"
    assert recording_tool.calls() == [f"install --dry-run {args}", f"install {args}"]
    assert "nor for gid 1337" in proc.stdout


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
    assert f"{tmp_path}/absent.yaml:0:0: (file): cannot open: No such file" in proc.stderr, proc.stderr
    assert "rdmagw-entrypoint: error: no configuration at" in proc.stderr


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
    admin = f"127.0.0.1:{free_port()}"  # not the default 9901, which another rdmagw may hold
    config = write_config(image_dir, sidecar_config(admin))
    env = entrypoint_env(rdmagw, config)
    env["RDMAGW_ADMIN"] = admin
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


# A sidecar with a transparent listener: the one the loop warning is about.
TRANSPARENT_SIDECAR = """node: sidecar
tunnel: {transport: tcp}
peers: [{name: b, address: 127.0.0.2, tcp_port: 7471}]
listeners:
  - {name: out, listen: "transparent:127.0.0.1:15001", routes: [{match: 10.0.0.0/8, peer: b}]}
"""


def test_entrypoint_warns_when_a_transparent_sidecar_runs_as_another_uid(rdmagw_bin, tmp_path):
    config = write_config(tmp_path, TRANSPARENT_SIDECAR)
    env = entrypoint_env(rdmagw_bin, config)
    env["RDMAGW_UID"] = str(os.getuid() + 1)
    proc = run([ENTRYPOINT, "--check"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"but the iptables redirect exempts uid {os.getuid() + 1} (RDMAGW_UID)" in proc.stderr, proc.stderr


def test_entrypoint_takes_rdmagw_gid_for_a_sidecar_running_as_root_with_its_group(rdmagw_bin, tmp_path):
    config = write_config(tmp_path, TRANSPARENT_SIDECAR)
    env = entrypoint_env(rdmagw_bin, config)
    env["RDMAGW_UID"] = str(os.getuid() + 1)
    env["RDMAGW_GID"] = str(os.getgid())
    proc = run([ENTRYPOINT, "--check"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    env["RDMAGW_GID"] = str(os.getgid() + 1)
    proc = run([ENTRYPOINT, "--check"], env=env)
    assert f"and gid {os.getgid() + 1} (RDMAGW_GID)" in proc.stderr, proc.stderr


def test_entrypoint_runs_another_command_given_instead_of_options(tmp_path):
    proc = run([ENTRYPOINT, "sh", "-c", "echo $0-ran", "other"], env=entrypoint_env("/nonexistent", tmp_path / "x"))
    assert proc.returncode == 0 and proc.stdout == "other-ran\n", proc.stderr


@pytest.mark.parametrize("admin, rdmagw_admin, warned", [
    (None, None, False),                      # both defaults
    ("127.0.0.1:9901", None, False),
    ('"127.0.0.1:9902"   # moved', None, True),
    ("127.0.0.1:9902", "127.0.0.1:9902", False),
    (None, "127.0.0.1:9902", True),            # the endpoint stays on the default
    ("0.0.0.0:9901", None, False),             # the wildcard includes loopback
    ("0.0.0.0:9902", None, True),
    ("'[::1]:9901'", None, True),
    ("'[::1]:9901'", "[::1]:9901", False),
])
def test_entrypoint_warns_when_rdmagwctl_would_ask_another_admin_address(rdmagw_bin, tmp_path, admin, rdmagw_admin,
                                                                         warned):
    """The HEALTHCHECK and the probes find the endpoint through RDMAGW_ADMIN:
    an `admin:` elsewhere would leave the container unhealthy for good."""
    text = "node: sidecar\ntunnel: {transport: tcp}\n" + (f"admin: {admin}\n" if admin else "")
    if admin and admin.startswith("0.0.0.0"):
        # An admin address other hosts reach needs a token (docs/admin.md).
        token = tmp_path / "admin-token"
        token.write_text("t" * 40 + "\n")
        token.chmod(0o400)
        text += f"admin_token_file: {token}\n"
    config = write_config(tmp_path, text)
    env = entrypoint_env(rdmagw_bin, config)
    if rdmagw_admin:
        env["RDMAGW_ADMIN"] = rdmagw_admin
    proc = run([ENTRYPOINT, "--check"], env=env)
    assert proc.returncode == 0, proc.stderr
    if warned:
        endpoint = (admin or DEFAULT_ADMIN).split("#")[0].strip().strip("\"'")
        assert (f"rdmagw-entrypoint: warning: the admin endpoint is {endpoint} (admin: in {config}) but rdmagwctl,"
                f" the HEALTHCHECK and the probes ask RDMAGW_ADMIN={rdmagw_admin or DEFAULT_ADMIN}:"
                f" set RDMAGW_ADMIN={endpoint}") in proc.stderr, proc.stderr
    else:
        assert "admin" not in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------
# The Dockerfile, statically


def test_dockerfile_builds_in_debian_12_and_runs_on_slim_as_uid_1337():
    build, runtime = stages()
    assert build[0] == ("FROM", "debian:12 AS build")
    # One compile for the image and the package: packaging/build-deb's, the
    # binaries first (--compile-only), before docs/ is copied in, so that a
    # docs edit reuses the compiled layer.
    runs = [(n, a) for n, (i, a) in enumerate(build) if i == "RUN"]
    compile_at = next(n for n, a in runs if "packaging/build-deb --compile-only" in a)
    package_at = next(n for n, a in runs if a.startswith("packaging/build-deb &&"))
    docs_at = next(n for n, (i, a) in enumerate(build) if i == "COPY" and copy_parts(a)[1] == ["docs/"])
    assert compile_at < docs_at < package_at, (compile_at, docs_at, package_at)
    assert "cp build-deb/rdmagw_*.deb /deb/" in dict(runs)[package_at], "tests/docker/e2e takes the .deb from /deb/"
    assert runtime[0] == ("FROM", "debian:12-slim")
    users = [(n, a) for n, (i, a) in enumerate(runtime) if i == "USER"]
    assert users and users[-1][1].split(":")[0] == str(SIDECAR_UID), users
    # ... at the end: after everything that installs or changes files.
    last_change = max(n for n, (i, _) in enumerate(runtime) if i in ("RUN", "COPY", "ADD"))
    assert users[-1][0] > last_change, "USER 1337 must come after the last RUN/COPY"
    assert any(i == "RUN" and f"useradd --uid {SIDECAR_UID}" in a for i, a in runtime)
    assert ("ENTRYPOINT", '["/usr/local/bin/entrypoint.sh"]') in runtime
    assert not [a for i, a in runtime if i == "EXPOSE"], "nothing is exposed by default"


def installed_files() -> dict[str, tuple[str, list[str]]]:
    """What the runtime stage COPYs: {target path: (source, flags)}."""
    installed = {}
    for ins, args in stages()[-1]:
        if ins == "COPY":
            flags, sources, dest = copy_parts(args)
            for src in sources:
                target = dest + Path(src).name if dest.endswith("/") else dest
                installed[target] = (src, flags)
    return installed


def test_dockerfile_installs_both_binaries_the_iptables_tool_and_both_scripts():
    installed = installed_files()
    build_runs = " && ".join(a for i, a in stages()[0] if i == "RUN")
    for name in ("rdmagw", "rdmagwctl"):
        assert installed[f"/usr/local/bin/{name}"] == (f"/{name}", ["--from=build"]), installed
        # Built by packaging/build-deb (the package's binaries) and stripped the same way.
        assert f"strip --strip-debug -o /{name} build-deb/bin/{name}" in build_runs, build_runs
    build_copies = [copy_parts(a)[1] for i, a in stages()[0] if i == "COPY"]
    assert ["tools/rdmagwctl/"] in build_copies, "rdmagwctl's sources must reach the build stage"
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
    assert len(copied) >= 9, copied
    for src in copied:
        path = src.rstrip("/")
        assert (REPO / path).exists(), f"COPY {src}: no such path in the repository"
        assert any(path == a or path.startswith(a + "/") for a in allowed), \
            f"COPY {src}: excluded from the build context by docker/Dockerfile.dockerignore"
    # Every directory the top-level CMakeLists.txt adds (BUILD_TESTING=OFF:
    # not tests/) is copied, or the image build fails at configure time.
    subdirs = re.findall(r"^add_subdirectory\((\S+)\)", (REPO / "CMakeLists.txt").read_text(), re.M)
    assert subdirs, "no add_subdirectory() in CMakeLists.txt"
    for subdir in subdirs:
        if subdir != "tests":
            assert subdir in [c.rstrip("/") for c in copied], f"CMakeLists.txt builds {subdir}/, which is not COPYed"


def test_dockerfile_healthcheck_asks_rdmagwctl_ready_within_its_timeout():
    flags, command = healthcheck()
    assert command[0] == IMAGE_RDMAGWCTL and command[0] in installed_files(), command
    assert command[-1] == "ready", command
    assert "--admin" not in command, "the address comes from RDMAGW_ADMIN, which rdmagwctl reads itself"
    # rdmagwctl's --timeout bounds the connect and again the answer: both
    # must fit in Docker's timeout, or a slow answer is cut as a hang.
    assert 2 * rdmagwctl_timeout(command) < seconds(flags["--timeout"]), (flags, command)
    assert seconds(flags["--timeout"]) <= seconds(flags["--interval"])
    assert int(flags["--retries"]) >= 2, "one slow answer (a reload holds the endpoint) must not mark it unhealthy"
    # RDMAGW_ADMIN is set in the image, to where rdmagw listens by default.
    assert runtime_env()["RDMAGW_ADMIN"] == DEFAULT_ADMIN


def runtime_apt_packages() -> set[str]:
    apt = " ".join(a for i, a in stages()[-1] if i == "RUN" and "apt-get install" in a)
    return set(apt.split("--no-install-recommends", 1)[1].split("&&")[0].split())


BASE_IMAGE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}  # in debian:12-slim


def require_library_tools():
    if any(shutil.which(t) is None for t in ("dpkg", "dpkg-query", "ldd", "readelf")):
        unavailable("dpkg, ldd or readelf missing: cannot map libraries to Debian packages")


def package_of(path: str) -> str:
    real = os.path.realpath(path)
    candidates = [real, real.replace("/usr/lib/", "/lib/", 1), path]
    owner = next((p.stdout for p in (run(["dpkg", "-S", c]) for c in candidates) if p.returncode == 0), "")
    assert owner, f"no Debian package owns {path}"
    return owner.split(":")[0]


def linked_libraries(binary) -> dict[str, str]:
    """Every shared library binary loads (ldd: direct and indirect) -> its package."""
    needed = {}
    for line in run(["ldd", binary]).stdout.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m:
            needed[m.group(1)] = package_of(m.group(2))
    assert needed, f"ldd listed no libraries for {binary}"
    return needed


def direct_libraries(binary) -> set[str]:
    """The sonames binary itself names (DT_NEEDED)."""
    out = run(["readelf", "-d", binary]).stdout
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))


@pytest.fixture(params=["rdmagw", "rdmagwctl"])
def image_binary(request, rdmagw_bin, rdmagwctl_bin):
    return {"rdmagw": rdmagw_bin, "rdmagwctl": rdmagwctl_bin}[request.param]


def test_the_runtime_stage_installs_every_library_the_binaries_link(image_binary):
    """Each shared library rdmagw / rdmagwctl needs comes from a package the
    runtime stage installs or from debian:12-slim itself (read through dpkg on
    this Debian 12 build machine; the image build's `rdmagw --version` and
    `rdmagwctl --help` check it again).  Libraries the binary names itself
    must be installed by name; the ones they pull in may come as dependencies."""
    require_library_tools()
    packages = runtime_apt_packages()
    needed = linked_libraries(image_binary)
    missing = {lib: pkg for lib, pkg in needed.items()
               if pkg not in packages | BASE_IMAGE_PACKAGES and not is_dependency(pkg, packages)}
    assert not missing, f"libraries whose package the runtime stage does not install: {missing}"
    unnamed = {lib: needed[lib] for lib in direct_libraries(image_binary)
               if needed[lib] not in packages | BASE_IMAGE_PACKAGES}
    assert not unnamed, f"{image_binary.name} links these itself; install their packages by name: {unnamed}"


def test_every_library_package_of_the_runtime_stage_is_linked(rdmagw_bin, rdmagwctl_bin):
    """The other way round: a lib* package the runtime stage installs is one
    rdmagw or rdmagwctl names (DT_NEEDED), so the list does not rot.  Not
    lib*: ibverbs-providers (loaded by libibverbs at run time), iptables and
    python3 (rdmagw-iptables)."""
    require_library_tools()
    linked = set()
    for binary in (rdmagw_bin, rdmagwctl_bin):
        needed = linked_libraries(binary)
        linked |= {needed[lib] for lib in direct_libraries(binary)}
    unused = {p for p in runtime_apt_packages() if p.startswith("lib")} - linked
    assert not unused, f"the runtime stage installs library packages neither binary links: {sorted(unused)}"
    # The admin endpoint's libevent, by name.
    assert {"libevent-2.1-7", "libevent-pthreads-2.1-7"} <= linked & runtime_apt_packages()


def is_dependency(package: str, installed: set[str]) -> bool:
    """Whether one of the installed packages depends on package directly
    (libnl-3-200 arrives with libibverbs1, for instance)."""
    for pkg in installed:
        depends = run(["dpkg-query", "-W", "-f=${Depends}", pkg]).stdout
        if re.search(rf"(^|[ ,]){re.escape(package)}([ :(,]|$)", depends):
            return True
    return False


def test_the_build_time_checks_pass_against_the_built_binaries(rdmagw_bin, rdmagwctl_bin, tmp_path):
    """The runtime stage's RUN that tries every program, run as written with
    the built binaries on PATH: a library missing on this machine, or an
    rdmagwctl whose `ready` is not the HEALTHCHECK's exit-1-when-unreachable
    command, fails here before it fails an image build."""
    require_ready_command(rdmagwctl_bin)
    (checks,) = [a for i, a in stages()[-1] if i == "RUN" and "--version" in a]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in (("rdmagw", rdmagw_bin), ("rdmagwctl", rdmagwctl_bin), ("rdmagw-iptables", TOOL)):
        (bin_dir / name).symlink_to(target)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDMAGW_")}
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    proc = run(["sh", "-c", checks], env=env)
    assert proc.returncode == 0, f"{checks}\nexit {proc.returncode}\n{proc.stdout}{proc.stderr}"
