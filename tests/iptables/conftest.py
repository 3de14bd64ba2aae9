# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the tools/rdmagw-iptables tests.

Two kinds of test:
- Without privileges: the tool runs against a fake iptables (two shell scripts,
  PREFIX-save printing a given nat table and PREFIX-restore recording its
  input), so dry-run output, validation and error handling are checked
  byte-for-byte anywhere.
- As root: the tool runs for real inside a network namespace the test creates
  (`ip netns add rdmagw-ipt-<random>`) and always deletes.  iptables/nftables
  state is per network namespace, so the host's own rules are never read or
  touched.  Not root, or no `ip netns`: skipped, except under CI (CI set),
  where that fails.  Root without iptables always fails.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess

import pytest

from ipt_helpers import IN_CI, TIMEOUT, FakeIptables, Netns


@pytest.fixture
def fake_iptables(tmp_path):
    d = tmp_path / "v4"
    d.mkdir()
    return FakeIptables(d, "iptables")


@pytest.fixture
def fake_ip6tables(tmp_path):
    d = tmp_path / "v6"
    d.mkdir()
    return FakeIptables(d, "ip6tables")


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"{reason}; CI must run the namespace tests (as root, with iproute2)")
    pytest.skip(reason)


@pytest.fixture
def netns():
    """A fresh network namespace with lo up; deleted in teardown, whatever happens."""
    if os.geteuid() != 0:
        _unavailable("not root: the namespace tests need root to create a network namespace")
    if shutil.which("ip") is None:
        _unavailable("`ip` (iproute2) not installed: cannot create a network namespace")
    for cmd in ("iptables", "iptables-save", "iptables-restore", "ip6tables-save", "ip6tables-restore"):
        if shutil.which(cmd) is None:
            pytest.fail(f"running as root but {cmd} is missing: apt-get install iptables (tools/dev/install-deps)")
    name = f"rdmagw-ipt-{secrets.token_hex(4)}"
    add = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=TIMEOUT)
    if add.returncode != 0:
        _unavailable(f"`ip netns add {name}` failed: {add.stderr.strip()}")
    try:
        ns = Netns(name)
        ns.run(["ip", "link", "set", "lo", "up"])
        yield ns
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=TIMEOUT)
