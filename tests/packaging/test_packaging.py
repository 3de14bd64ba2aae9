# SPDX-License-Identifier: Apache-2.0
"""The Debian package's own files (packaging/), checked on this machine
without building or installing the package (tests/docker/e2e/test_deb.py
installs it): the unit as systemd-analyze reads it, the settings the
package promises, the default configuration as rdmagw reads it, and the
maintainer scripts as sh parses them.

Run: /usr/bin/python3 -m pytest tests/packaging -q -p no:cacheprovider
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from unit_file import unit_values as parse_unit

REPO = Path(__file__).resolve().parents[2]
PACKAGING = REPO / "packaging"
UNIT = PACKAGING / "rdmagw.service"
BUILD_DIR = Path(os.environ.get("RDMAGW_BUILD_DIR") or REPO / "build")
RDMAGW = Path(os.environ.get("RDMAGW_BIN") or BUILD_DIR / "bin" / "rdmagw")
IO_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")

needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed (Debian: systemd)")


def unit_values(path: Path = UNIT) -> dict[str, list[str]]:
    return parse_unit(path.read_text())


def verify(path: Path) -> list[str]:
    """What `systemd-analyze verify` says of a unit file, less its complaints
    about commands this machine does not have (the package installs them)."""
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    complaints = []
    for line in (r.stdout + r.stderr).splitlines():
        m = re.search(r"Command (\S+) is not executable", line)
        if m and not Path(m.group(1)).exists():
            continue
        complaints.append(line)
    return complaints


@needs_systemd_analyze
def test_systemd_analyze_verify_finds_nothing_to_say(tmp_path):
    assert verify(UNIT) == []
    # And it would say something: the same unit with a misspelt key.
    broken = tmp_path / "rdmagw.service"
    broken.write_text(UNIT.read_text().replace("ProtectHome=", "ProtectHomes="))
    assert any("ProtectHomes" in line for line in verify(broken))


def test_the_unit_is_type_notify_reloads_with_sighup_and_runs_as_rdmagw():
    u = unit_values()
    assert u["Type"] == ["notify"]
    assert u["ExecStart"] == ["/usr/bin/rdmagw --config /etc/rdmagw/rdmagw.yaml"]
    assert u["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert u["User"] == ["rdmagw"] and u["Group"] == ["rdmagw"]
    assert u["KillSignal"] == ["SIGTERM"] and u["Restart"] == ["on-failure"]
    assert u["AmbientCapabilities"] == ["CAP_IPC_LOCK"] and u["CapabilityBoundingSet"] == ["CAP_IPC_LOCK"]
    assert u["LimitMEMLOCK"] == ["infinity"] and u["LimitNOFILE"] == ["1048576"]
    assert u["WantedBy"] == ["multi-user.target"]


def test_the_stop_timeout_outlasts_the_default_drain():
    # config/config.h's default shutdown_timeout_ms, plus a margin for the
    # exit itself: systemd must not SIGKILL a drain that runs its course.
    header = (REPO / "config" / "config.h").read_text()
    drain_ms = int(re.search(r"shutdown_timeout_ms = (\d+);", header).group(1))
    stop_s = int(unit_values()["TimeoutStopSec"][0])
    assert stop_s * 1000 >= drain_ms + 5000, (stop_s, drain_ms)
    config = yaml.safe_load((PACKAGING / "rdmagw.yaml").read_text())
    assert stop_s * 1000 >= config["shutdown_timeout_ms"] + 5000


def test_the_hardening_is_all_there():
    u = unit_values()
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "ProtectKernelTunables", "ProtectKernelModules",
                "ProtectKernelLogs", "ProtectControlGroups", "RestrictNamespaces", "LockPersonality",
                "RestrictRealtime", "RestrictSUIDSGID", "MemoryDenyWriteExecute"):
        assert u.get(key) == ["yes"], f"{key}: {u.get(key)}"
    assert u["ProtectSystem"] == ["strict"]
    assert u["RestrictAddressFamilies"][0].split() == ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"]
    assert u["DeviceAllow"] == ["char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw"]
    # PrivateDevices= would hide /dev/infiniband from rdmagw.
    assert "PrivateDevices" not in u
    assert u["SystemCallFilter"][0].split() == ["@system-service", *IO_URING]


@needs_systemd_analyze
def test_the_syscall_filter_lets_io_uring_through():
    """Every call of the unit's SystemCallFilter= as this systemd expands it
    (groups within groups) holds the three io_uring calls rdmagw cannot run
    without; and @system-service alone has them here too (systemd 252: @aio),
    which the unit does not rely on."""
    text = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True,
                          check=True).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@"):
            current = line.split()[0]
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())

    def expand(names) -> set[str]:
        out: set[str] = set()
        for name in names:
            out |= expand(groups[name]) if name.startswith("@") else {name}
        return out

    allowed = expand(unit_values()["SystemCallFilter"][0].split())
    assert set(IO_URING) <= allowed
    print("@system-service has io_uring:", set(IO_URING) <= expand(["@system-service"]))


def test_the_default_configuration_is_valid_loopback_only_and_carries_nothing():
    config = yaml.safe_load((PACKAGING / "rdmagw.yaml").read_text())
    assert config["tunnel"]["address"] == "127.0.0.1" and config["admin"].startswith("127.0.0.1:")
    assert config["peers"] == [] and config["listeners"] == [] and config["targets"] == []
    assert "auth" not in config["tunnel"]  # a loopback tunnel needs none
    if not RDMAGW.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{RDMAGW} not built")
        pytest.skip(f"{RDMAGW} not built")
    r = subprocess.run([RDMAGW, "--check", "--config", PACKAGING / "rdmagw.yaml"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_conffile_is_the_configuration_the_unit_reads():
    assert (PACKAGING / "conffiles").read_text().split() == ["/etc/rdmagw/rdmagw.yaml"]
    assert "--config /etc/rdmagw/rdmagw.yaml" in unit_values()["ExecStart"][0]
    rules = (REPO / "cmake" / "packaging.cmake").read_text()
    assert "install(FILES packaging/rdmagw.yaml DESTINATION /etc/rdmagw)" in rules


@pytest.mark.parametrize("script", ["postinst", "prerm", "postrm"])
def test_maintainer_scripts_parse_and_are_executable(script):
    path = PACKAGING / script
    assert os.access(path, os.X_OK), f"{path} is not executable"
    assert path.read_text().startswith("#!/bin/sh\n")
    r = subprocess.run(["sh", "-n", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if shutil.which("dash"):
        r = subprocess.run(["dash", "-n", path], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_the_takeover_drop_in_backgrounds_the_new_process_and_hands_it_notify_access():
    u = unit_values(PACKAGING / "takeover-reload.conf")
    # The empty ExecReload= drops the unit's SIGHUP before adding this one.
    assert u["ExecReload"] == ["", "/bin/sh -c '/usr/bin/rdmagw --takeover --config /etc/rdmagw/rdmagw.yaml &'"]
    assert u["NotifyAccess"] == ["exec"]
