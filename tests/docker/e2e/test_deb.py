# SPDX-License-Identifier: Apache-2.0
"""The Debian package (packaging/, docs/deploy.md, "Hosts without containers:
the .deb") installed with apt on the locally made minimal Debian 12, in two
ways:

1. Without systemd (a plain container): the files, the user, the default
   configuration; then the unit's own command lines, read from the installed
   unit file so that this test and the unit cannot drift apart: ExecStart as
   the unit's User with NOTIFY_SOCKET at a datagram socket of the test's,
   the reload as ExecReload sends it, the stop as KillSignal; then apt-get
   remove and purge.
2. With systemd as PID 1 (podman --systemd=always): the real unit, started,
   reloaded, taken over through packaging/takeover-reload.conf and stopped
   by systemd, its sandbox checked on the running process; then enable and
   purge.

The package is the one docker/Dockerfile's build stage made with
packaging/build-deb, in the compile that made the image's binaries:
tests/docker/e2e/run copies it out of that stage and exports its path as
RDMAGW_E2E_DEB.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from e2e_support import BASE_IMAGE, DOCKER, REPO, podman, run, wait_for

sys.path.insert(0, str(REPO / "tests" / "packaging"))
from unit_file import unit_values  # noqa: E402  (one parser for the unit, shared with tests/packaging)

DEB = os.environ.get("RDMAGW_E2E_DEB", "")
HERE = Path(__file__).resolve().parent
SYSTEMD_IMAGE = "localhost/rdmagw-e2e-systemd:12"
UNIT = "/lib/systemd/system/rdmagw.service"
CONFIG = "/etc/rdmagw/rdmagw.yaml"
WORK = "/run/rdmagw-e2e"  # the test's own files inside the container
# The package's largest part is rdmagw itself; 0.85 MB measured (Release at -O2,
# stripped). The bound catches unstripped binaries or a build tree in it.
MAX_DEB_BYTES = 3 * 1000 * 1000

# Runs a command the way the unit would, without systemd: binds the
# datagram socket NOTIFY_SOCKET names (as systemd's is), writes every
# datagram it gets as a JSON string per line, starts the command with
# NOTIFY_SOCKET set, and records its pid and, once it exits, its status.
RUNNER = r"""
import json, os, socket, subprocess, sys, threading, time
work, argv = sys.argv[1], json.loads(sys.argv[2])
path = os.path.join(work, "notify")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
os.chmod(path, 0o777)  # the unit's user sends to it: a send needs write permission

def receive():
    with open(os.path.join(work, "notify.log"), "a") as out:
        while True:
            out.write(json.dumps(sock.recv(65536).decode()) + "\n")
            out.flush()

threading.Thread(target=receive, daemon=True).start()
env = dict(os.environ, NOTIFY_SOCKET=path)
with open(os.path.join(work, "rdmagw.log"), "wb") as log:
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(work, "pid"), "w") as f:
        f.write(str(proc.pid))
    code = proc.wait()
time.sleep(0.5)  # what was sent before the exit is written first
with open(os.path.join(work, "rc"), "w") as f:
    f.write(str(code))
"""


@pytest.fixture(scope="module")
def deb() -> Path:
    if not DEB or not Path(DEB).is_file():
        pytest.fail("RDMAGW_E2E_DEB is not set to a built .deb: run through tests/docker/e2e/run, "
                    "which takes it from the image's build stage")
    return Path(DEB)


def sh(container: str, script: str, **kw):
    # -i: podman exec passes stdin on only when asked to.
    return podman("exec", *(["-i"] if "input" in kw else []), container, "sh", "-c", script, **kw)


def install(container: str, deb: Path) -> None:
    podman("cp", str(deb), f"{container}:/tmp/{deb.name}")
    sh(container, "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                  f"--no-install-recommends /tmp/{deb.name} >/tmp/apt.log 2>&1 || {{ cat /tmp/apt.log; exit 1; }}",
       timeout=600)


def container(name: str, image: str, options=(), command=()) -> str:
    """Started detached under the sidecar's seccomp profile (the runtime
    default plus io_uring), root inside."""
    podman("rm", "-f", "-t", "0", name, check=False)
    podman("run", "-d", "--name", name, "--security-opt", f"seccomp={DOCKER / 'seccomp.json'}", *options, image,
           *command)
    return name


@pytest.fixture
def plain():
    """A minimal Debian 12 without systemd, root inside."""
    name = container("rdmagw-e2e-deb", BASE_IMAGE, command=("sleep", "infinity"))
    yield name
    podman("rm", "-f", "-t", "0", name, check=False)


def test_the_package_is_small_and_holds_what_the_host_needs(deb):
    size = deb.stat().st_size
    print(f"{deb.name}: {size} bytes")
    assert size <= MAX_DEB_BYTES, f"{deb} is {size} bytes"
    listing = run(["dpkg-deb", "-c", deb]).stdout
    for path in ("./usr/bin/rdmagw", "./usr/bin/rdmagwctl", "./usr/sbin/rdmagw-iptables", "." + UNIT,
                 "." + CONFIG, "./usr/share/rdmagw/takeover-reload.conf", "./usr/share/doc/rdmagw/copyright",
                 "./usr/share/doc/rdmagw/README.md", "./usr/share/doc/rdmagw/docs/deploy.md",
                 "./usr/share/man/man8/rdmagw.8.gz", "./usr/share/man/man8/rdmagwctl.8.gz",
                 "./usr/share/man/man5/rdmagw.yaml.5.gz"):
        assert f" {path}\n" in listing + "\n", f"{path} is not in the package:\n{listing}"
    depends = run(["dpkg-deb", "-f", deb, "Depends"]).stdout
    # dpkg-shlibdeps found the libraries; the rest is named by hand.
    for package in ("liburing2", "libibverbs1", "librdmacm1", "libyaml-cpp0.7", "python3", "iptables",
                    "adduser", "procps"):
        assert package in depends, f"{package} missing from Depends: {depends}"
    conffiles = run(["sh", "-c", f"dpkg-deb --ctrl-tarfile {shlex.quote(str(deb))} | tar -xOf - ./conffiles"]).stdout
    assert conffiles.split() == [CONFIG]


def test_installed_without_systemd_the_units_command_lines_start_reload_and_stop(deb, plain):
    install(plain, deb)
    for path in ("/usr/bin/rdmagw", "/usr/bin/rdmagwctl", "/usr/sbin/rdmagw-iptables", "/bin/kill"):
        sh(plain, f"test -x {path}")
    for path in (UNIT, CONFIG, "/usr/share/doc/rdmagw/copyright"):
        sh(plain, f"test -f {path}")
    assert CONFIG in sh(plain, "dpkg-query -W -f='${Conffiles}' rdmagw").stdout
    # The system user, and the directory for key files it may read.
    _, _, uid, _, _, home, shell = sh(plain, "getent passwd rdmagw").stdout.strip().split(":")
    assert 100 <= int(uid) < 1000 and home == "/nonexistent" and shell.endswith("nologin"), (uid, home, shell)
    assert sh(plain, "stat -c '%U:%G %a' /etc/rdmagw/keys").stdout.strip() == "root:rdmagw 750"
    assert "ok (0 listeners, 0 peers, 0 targets)" in sh(plain, f"rdmagw --check --config {CONFIG}").stdout
    # The redirect exempts the user by name, whatever uid this host gave it.
    dry = sh(plain, "rdmagw-iptables install --dry-run --uid rdmagw --capture 10.0.0.0/8:6379").stdout
    assert f"--uid-owner {uid} " in dry, dry

    unit = unit_values(sh(plain, f"cat {UNIT}").stdout)
    assert unit["Type"] == ["notify"] and unit["KillSignal"] == ["SIGTERM"], unit
    user, group = unit["User"][0], unit["Group"][0]
    as_user = ["setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups", "--"]
    start = as_user + shlex.split(unit["ExecStart"][0])
    sh(plain, f"mkdir -p {WORK} && cat > {WORK}/runner.py", input=RUNNER)
    podman("exec", "-d", plain, "python3", f"{WORK}/runner.py", WORK, json.dumps(start))

    def notes() -> list[dict[str, str]]:
        text = sh(plain, f"cat {WORK}/notify.log 2>/dev/null || true").stdout
        return [dict(line.split("=", 1) for line in json.loads(raw).splitlines()) for raw in text.splitlines()]

    def log() -> str:
        return sh(plain, f"cat {WORK}/rdmagw.log 2>/dev/null || true").stdout

    wait_for("READY=1", lambda: any(n.get("READY") == "1" for n in notes()) or None, timeout=30)
    pid = sh(plain, f"cat {WORK}/pid").stdout.strip()
    assert f"Uid:\t{uid}\t" in sh(plain, f"grep ^Uid: /proc/{pid}/status").stdout
    assert "event=ready" in log()
    # rdmagwctl from the package reaches the default admin endpoint.
    sh(plain, "rdmagwctl --timeout 2 ready")
    stats = "python3 -c 'import json, urllib.request; " \
            "print(json.load(urllib.request.urlopen(\"http://127.0.0.1:9901/stats\"))[\"config\"][\"reloads\"])'"
    before = int(sh(plain, stats).stdout)

    # The reload as systemd would run ExecReload: as the unit's user, with
    # $MAINPID the pid it started.
    reload = as_user + [pid if word == "$MAINPID" else word for word in shlex.split(unit["ExecReload"][0])]
    podman("exec", plain, *reload)
    wait_for("READY=1 after the reload", lambda: len(notes()) >= 3 or None, timeout=30)
    first, reloading, ready = notes()[:3]
    assert first.get("READY") == "1" and first["STATUS"].startswith("Ready:"), first
    assert reloading.get("RELOADING") == "1" and int(reloading["MONOTONIC_USEC"]) > 0, reloading
    assert ready.get("READY") == "1" and "generation 2" in ready["STATUS"], ready
    assert int(sh(plain, stats).stdout) == before + 1

    # Stopping as systemd does: KillSignal to the main process.
    sh(plain, f"kill -{unit['KillSignal'][0].removeprefix('SIG')} {pid}")
    wait_for("rdmagw to exit", lambda: sh(plain, f"cat {WORK}/rc 2>/dev/null || true").stdout.strip() or None,
             timeout=30)
    assert sh(plain, f"cat {WORK}/rc").stdout.strip() == "0", log()
    assert notes()[-1].get("STOPPING") == "1", notes()
    assert "event=stopped" in log()

    # remove: the programs and the unit go, the edited-or-not conffile stays;
    # purge: the configuration goes too. The user stays (docs/deploy.md).
    sh(plain, "DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq rdmagw >/dev/null 2>&1")
    sh(plain, f"test ! -e {UNIT} && test ! -e /usr/bin/rdmagw && test -f {CONFIG}")
    assert sh(plain, "dpkg-query -W -f='${db:Status-Abbrev}' rdmagw").stdout.strip() == "rc"
    sh(plain, "DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq rdmagw >/dev/null 2>&1")
    sh(plain, f"test ! -e {UNIT} && test ! -e /etc/rdmagw")
    assert sh(plain, "dpkg-query -W rdmagw", check=False).returncode != 0
    sh(plain, "getent passwd rdmagw")


# ---------------------------------------------------------------------------
# systemd as PID 1


@pytest.fixture
def booted():
    """Debian 12 with systemd running as PID 1. CAP_SYS_ADMIN lets systemd
    build the unit's mount namespace (ProtectSystem=, PrivateTmp=, ...); podman
    leaves it out by default, and systemd then skips that part of the sandbox
    without a word. CAP_IPC_LOCK: the unit's AmbientCapabilities must be in
    the bounding set."""
    podman("build", "-q", "-f", HERE / "systemd.Containerfile", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
           "-t", SYSTEMD_IMAGE, HERE, timeout=600)
    name = container("rdmagw-e2e-deb-systemd", SYSTEMD_IMAGE,
                     options=("--systemd=always", "--cap-add", "SYS_ADMIN", "--cap-add", "IPC_LOCK"))
    wait_for("systemd to boot", lambda: sh(name, "systemctl is-system-running", check=False).stdout.strip()
             in ("running", "degraded") or None, timeout=60)
    yield name
    podman("rm", "-f", "-t", "0", name, check=False)


def show(container: str, *props: str) -> dict[str, str]:
    out = sh(container, f"systemctl show rdmagw.service -p {','.join(props)}").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_systemd_runs_the_unit_sandboxed_reloads_takes_over_and_stops_it(deb, booted):
    install(booted, deb)
    # Installed, neither enabled nor started (postinst says why).
    verify = sh(booted, "systemd-analyze verify rdmagw.service 2>&1", check=False)
    assert verify.returncode == 0 and verify.stdout.strip() == "", verify.stdout
    assert sh(booted, "systemctl is-enabled rdmagw", check=False).stdout.strip() == "disabled"
    assert sh(booted, "systemctl is-active rdmagw", check=False).stdout.strip() == "inactive"

    # Type=notify: `systemctl start` returns once READY=1 came.
    sh(booted, "systemctl start rdmagw", timeout=60)
    state = show(booted, "ActiveState", "SubState", "StatusText", "MainPID")
    assert (state["ActiveState"], state["SubState"]) == ("active", "running"), state
    assert state["StatusText"].startswith("Ready: 0 listeners"), state
    pid = state["MainPID"]
    sh(booted, "rdmagwctl --timeout 2 ready")

    # The sandbox, on the running process.
    uid = sh(booted, "id -u rdmagw").stdout.strip()
    status = sh(booted, f"cat /proc/{pid}/status").stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Uid"].split()[0] == uid, fields["Uid"]
    assert int(fields["CapEff"], 16) == 1 << 14 and int(fields["CapAmb"], 16) == 1 << 14, status  # CAP_IPC_LOCK only
    assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2", status
    mounts = sh(booted, f"cat /proc/{pid}/mountinfo").stdout.splitlines()
    root = next(m.split() for m in mounts if m.split()[4] == "/")
    assert "ro" in root[5].split(","), f"ProtectSystem=strict did not make / read-only: {root}"
    assert any(m.split()[4] == "/home" for m in mounts), "ProtectHome= did not hide /home"
    # LimitNOFILE=1048576 and LimitMEMLOCK=infinity: systemd gives the closest
    # values the container allows (this machine grants no CAP_SYS_RESOURCE,
    # so no process in it goes past PID 1's hard limits).
    limits = sh(booted, f"cat /proc/{pid}/limits; echo; cat /proc/1/limits").stdout

    def hard(block: str, name: str) -> str:
        return next(line.split()[-2] for line in block.splitlines() if line.startswith(name))

    mine, init = limits.split("\n\n", 1)
    assert hard(mine, "Max open files") in ("1048576", hard(init, "Max open files")), limits
    assert hard(mine, "Max locked memory") in ("unlimited", hard(init, "Max locked memory")), limits

    # systemctl reload: SIGHUP, RELOADING=1, READY=1 saying what happened.
    sh(booted, "systemctl reload rdmagw", timeout=60)
    assert "configuration generation 2" in show(booted, "StatusText")["StatusText"]
    sh(booted, f"cp {CONFIG} /tmp/good.yaml && echo 'workers: [' >> {CONFIG}")
    sh(booted, "systemctl reload rdmagw", timeout=60)
    state = show(booted, "ActiveState", "StatusText", "MainPID")
    assert state["ActiveState"] == "active" and "reload failed" in state["StatusText"], state
    assert state["MainPID"] == pid
    sh(booted, f"cp /tmp/good.yaml {CONFIG}")

    # The takeover drop-in: reload starts a new process in the unit, which
    # becomes its main process; the old one exits 0; nothing fails.
    sh(booted, "mkdir -p /etc/systemd/system/rdmagw.service.d && "
               "cp /usr/share/rdmagw/takeover-reload.conf /etc/systemd/system/rdmagw.service.d/ && "
               "systemctl daemon-reload")
    sh(booted, "systemctl reload rdmagw", timeout=60)
    wait_for("a new main process", lambda: show(booted, "MainPID")["MainPID"] not in (pid, "0") or None, timeout=30)
    new = show(booted, "MainPID", "ActiveState", "SubState")
    assert (new["ActiveState"], new["SubState"]) == ("active", "running"), new
    wait_for("the old process to exit", lambda: sh(booted, f"test -e /proc/{pid}", check=False).returncode != 0
             or None, timeout=30)
    journal = sh(booted, "journalctl -u rdmagw --no-pager -o cat").stdout
    assert "event=taken_over" in journal and "event=takeover_done" in journal, journal[-3000:]
    sh(booted, "rdmagwctl --timeout 2 ready")
    assert sh(booted, f"cat /proc/{new['MainPID']}/status | grep ^Uid:").stdout.split()[1] == uid
    # The new process was given NOTIFY_SOCKET (NotifyAccess=exec): its
    # reloads are reported too (SIGHUP here, the drop-in removed).
    sh(booted, "rm -r /etc/systemd/system/rdmagw.service.d && systemctl daemon-reload")
    sh(booted, "systemctl reload rdmagw", timeout=60)
    wait_for("the new process's reload status",
             lambda: "configuration generation 2" in show(booted, "StatusText")["StatusText"] or None, timeout=30)

    # systemctl stop: SIGTERM, the drain, exit 0 well within TimeoutStopSec.
    sh(booted, "systemctl stop rdmagw", timeout=60)
    stopped = show(booted, "ActiveState", "Result", "ExecMainStatus")
    assert stopped == {"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}, stopped
    journal = sh(booted, "journalctl -u rdmagw --no-pager -o cat").stdout
    assert "event=stopped" in journal and "SIGKILL" not in journal

    # Enabled and running, then purged: prerm stops it (the SIGTERM drain),
    # and no unit, link or configuration is left.
    sh(booted, "systemctl enable --now rdmagw >/dev/null 2>&1")
    sh(booted, "test -L /etc/systemd/system/multi-user.target.wants/rdmagw.service")
    running = show(booted, "MainPID")["MainPID"]
    assert running != "0"
    sh(booted, "DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq rdmagw >/dev/null 2>&1", timeout=120)
    sh(booted, f"test ! -e /proc/{running}")
    journal = sh(booted, "journalctl -u rdmagw --no-pager -o cat").stdout
    # SIGTERM twice: `systemctl stop` above, and prerm's now.
    assert journal.count("event=shutdown_requested") == 2, journal[-3000:]
    sh(booted, f"test ! -e {UNIT} && test ! -e /etc/rdmagw && "
               "test ! -e /etc/systemd/system/multi-user.target.wants/rdmagw.service")
    assert sh(booted, "systemctl cat rdmagw.service", check=False).returncode != 0
