# SPDX-License-Identifier: Apache-2.0
"""iptables missing, no CAP_NET_ADMIN, or rules refused: exit 1 with a clear
message (the real no-capability case runs in test_ipt_netns.py)."""

from __future__ import annotations

import pytest

from ipt_helpers import run_tool

INSTALL = ["install", "--uid", "997", "--capture", "10.0.0.0/8"]
NFT_DENIED = "iptables-restore v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)"
LEGACY_DENIED = "iptables-restore v1.8.9 (legacy): iptables-restore: unable to initialize table 'nat': Operation not permitted"


@pytest.mark.parametrize("args", [INSTALL, ["cleanup"], ["install", "--ipv6", "--uid", "1", "--capture", "fd00::/8"]])
def test_missing_iptables_binary(args):
    proc = run_tool([*args, "--iptables-cmd", "/nonexistent/iptables"], check_rc=1)
    assert "iptables not found: apt-get install iptables" in proc.stderr
    assert "/nonexistent/iptables-" in proc.stderr
    assert proc.stdout == ""


def test_missing_restore_only(fake_iptables):
    # iptables-save present, iptables-restore not: still the clear message.
    (fake_iptables.dir / "iptables-restore").unlink()
    proc = fake_iptables.run(INSTALL, check_rc=1)
    assert "iptables not found: apt-get install iptables" in proc.stderr


def test_missing_on_path_names_the_command(tmp_path):
    env = {"PATH": str(tmp_path)}
    proc = run_tool([*INSTALL, "--iptables-cmd", "rdmagw-no-such-iptables"], env=env, check_rc=1)
    assert "iptables not found: apt-get install iptables" in proc.stderr
    assert "rdmagw-no-such-iptables-" in proc.stderr


@pytest.mark.parametrize("message", [NFT_DENIED, LEGACY_DENIED])
def test_permission_denied_on_save(fake_iptables, message):
    env = dict(fake_iptables.env, FAKE_SAVE_ERR=message)
    for args in (INSTALL, ["cleanup"]):
        proc = fake_iptables.run(args, env=env, check_rc=1)
        assert "needs CAP_NET_ADMIN (run as root or in an init container with NET_ADMIN)" in proc.stderr
        assert message in proc.stderr  # iptables' own words follow
        assert ("CAP_NET_RAW" in proc.stderr) == ("(legacy)" in message)
    assert fake_iptables.restore_calls() == []


@pytest.mark.parametrize("message", [NFT_DENIED, LEGACY_DENIED])
def test_permission_denied_on_restore(fake_iptables, message):
    env = dict(fake_iptables.env, FAKE_RESTORE_ERR=message)
    proc = fake_iptables.run(INSTALL, env=env, check_rc=1)
    assert "needs CAP_NET_ADMIN (run as root or in an init container with NET_ADMIN)" in proc.stderr


def test_dry_run_needs_no_capability(fake_iptables):
    env = dict(fake_iptables.env, FAKE_SAVE_ERR=NFT_DENIED)
    proc = fake_iptables.run([*INSTALL, "--dry-run"], env=env, check_rc=0)
    assert "-A OUTPUT -p tcp" in proc.stdout
    assert "assuming nothing of rdmagw's is installed" in proc.stderr


def test_restore_refusal_shows_the_numbered_input(fake_iptables):
    err = "iptables-restore v1.8.9 (nf_tables): Couldn't load match `owner':No such file or directory\n\nError occurred at line: 7"
    env = dict(fake_iptables.env, FAKE_RESTORE_ERR=err)
    proc = fake_iptables.run(INSTALL, env=env, check_rc=1)
    assert "iptables-restore --noflush --wait 30 failed (exit 1)" in proc.stderr
    assert "Couldn't load match `owner'" in proc.stderr
    assert "   7  -A RDMAGW_OUTPUT -m owner --uid-owner 997" in proc.stderr
    assert "CAP_NET_ADMIN" not in proc.stderr
