# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the container tests (docker/).

No container engine is used: the init step and the entrypoint run the way the
container runs them (root with NET_ADMIN/NET_RAW only inside a fresh network
namespace; uid 1337 for the sidecar), and the Dockerfile, compose file and
pod are checked statically.

Skips: tests that need root are skipped when not root.  As root, a missing
`ip`, iptables or setpriv, or a namespace that cannot be created, skips the
test locally and fails it under CI (CI set).  The rdmagw binary ($RDMAGW_BIN,
else build/bin/rdmagw) missing: skipped locally, a failure under CI.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from container_support import RDMAGW_BIN, RDMAGWCTL_BIN, Netns, require_root, run, unavailable


@pytest.fixture
def rdmagw_bin() -> Path:
    if not os.access(RDMAGW_BIN, os.X_OK):
        unavailable(f"{RDMAGW_BIN} not built (tools/dev/build)")
    return RDMAGW_BIN


@pytest.fixture
def rdmagwctl_bin() -> Path:
    if not os.access(RDMAGWCTL_BIN, os.X_OK):
        unavailable(f"{RDMAGWCTL_BIN} not built (tools/dev/build; or set RDMAGWCTL_BIN)")
    return RDMAGWCTL_BIN


@pytest.fixture
def netns():
    """A fresh network namespace (lo up) standing in for the pod's; always deleted."""
    require_root("ip", "iptables", "iptables-save", "iptables-restore", "setpriv")
    name = f"rdmagw-ct-{secrets.token_hex(4)}"
    add = run(["ip", "netns", "add", name])
    if add.returncode != 0:
        unavailable(f"`ip netns add {name}` failed: {add.stderr.strip()}")
    try:
        ns = Netns(name)
        ns.run(["ip", "link", "set", "lo", "up"])
        yield ns
    finally:
        run(["ip", "netns", "delete", name])
