# SPDX-License-Identifier: Apache-2.0
"""Bad input: exit 2, a message naming the option, the value and why, and
iptables never run."""

from __future__ import annotations

import pytest

from ipt_helpers import run_tool

GOOD = ["--uid", "997", "--capture", "10.0.0.0/8"]

# (extra arguments, what stderr must contain)
BAD = {
    "cidr-garbage": (["--uid", "997", "--capture", "10.0.0.0/abc"], ["--capture", "'10.0.0.0/abc'"]),
    "cidr-octet": (["--uid", "997", "--capture", "300.1.2.0/24"], ["--capture", "'300.1.2.0/24'", "IPv4"]),
    "cidr-prefix": (["--uid", "997", "--capture", "10.0.0.0/33"], ["--capture", "'10.0.0.0/33'"]),
    "cidr-host-bits": (["--uid", "997", "--capture", "10.0.0.1/8"], ["--capture", "host bits", "10.0.0.0/8"]),
    "capture-empty": (["--uid", "997", "--capture", ""], ["--capture", "empty network"]),
    "port-zero": (["--uid", "997", "--capture", "10.0.0.0/8:0"], ["--capture", "port 0 is out of range 1-65535"]),
    "port-big": (["--uid", "997", "--capture", "10.0.0.0/8:65536"], ["--capture", "65536", "out of range"]),
    "port-text": (["--uid", "997", "--capture", "10.0.0.0/8:http"], ["--capture", "'http' is not a number"]),
    "port-empty": (["--uid", "997", "--capture", "10.0.0.0/8:"], ["--capture", "empty port"]),
    "range-reversed": (["--uid", "997", "--capture", "10.0.0.0/8:9000-8000"],
                       ["--capture", "'10.0.0.0/8:9000-8000'", "9000-8000", "LO > HI"]),
    "range-open": (["--uid", "997", "--capture", "10.0.0.0/8:9000-"], ["--capture", "not a number"]),
    "zone-index": (["--ipv6", "--uid", "997", "--capture", "fe80::1%eth0"], ["--capture", "zone"]),
    "v6-without-flag": (["--uid", "997", "--capture", "fd00::/64"], ["--capture", "'fd00::/64'", "--ipv6"]),
    "v4-with-ipv6": (["--ipv6", "--uid", "997", "--capture", "10.0.0.0/8"],
                     ["--capture", "'10.0.0.0/8'", "IPv4", "--ipv6"]),
    "v4-exclude-with-ipv6": (["--ipv6", "--uid", "997", "--capture", "fd00::/64", "--exclude-cidr", "10.0.0.0/8"],
                             ["--exclude-cidr", "'10.0.0.0/8'", "--ipv6"]),
    "exclude-port-bad": ([*GOOD, "--exclude-port", "70000"], ["--exclude-port", "'70000'", "out of range"]),
    "exclude-port-negative": ([*GOOD, "--exclude-port=-1"], ["--exclude-port", "'-1'"]),
    "exclude-cidr-bad": ([*GOOD, "--exclude-cidr", "10.0.0/8x"], ["--exclude-cidr", "'10.0.0/8x'"]),
    "redirect-port-bad": ([*GOOD, "--redirect-port", "0"], ["--redirect-port", "'0'", "out of range"]),
    "redirect-port-text": ([*GOOD, "--redirect-port", "x15001"], ["--redirect-port", "not a number"]),
    "uid-missing": (["--capture", "10.0.0.0/8"], ["--uid is required"]),
    "uid-unknown": (["--uid", "no-such-user-rdmagw", "--capture", "10.0.0.0/8"],
                    ["--uid", "'no-such-user-rdmagw'", "no such user"]),
    "uid-too-big": (["--uid", "4294967295", "--capture", "10.0.0.0/8"], ["--uid", "out of range"]),
    "capture-missing": (["--uid", "997"], ["--capture is required"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_naming_the_option(fake_iptables, case):
    args, wanted = BAD[case]
    for mode in ([], ["--dry-run"]):
        proc = fake_iptables.run(["install", *mode, *args], check_rc=2)
        for text in wanted:
            assert text in proc.stderr, f"{case}: {text!r} not in:\n{proc.stderr}"
        assert proc.stdout == ""
    assert fake_iptables.restore_calls() == []


def test_iptables_cmd_with_spaces():
    proc = run_tool(["install", "--dry-run", *GOOD, "--iptables-cmd", "sudo iptables"], check_rc=2)
    assert "--iptables-cmd 'sudo iptables'" in proc.stderr
    assert proc.stdout == ""


def test_every_error_is_reported_at_once(fake_iptables):
    proc = fake_iptables.run(
        ["install", "--uid", "997", "--capture", "10.0.0.0/33", "--exclude-port", "0", "--redirect-port", "99999"],
        check_rc=2,
    )
    for option in ("--capture", "--exclude-port", "--redirect-port"):
        assert option in proc.stderr


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["install", "--bogus"], ["cleanup", "extra"]])
def test_bad_command_line_exits_2(fake_iptables, args):
    proc = fake_iptables.run(args, check_rc=2)
    assert "rdmagw-iptables" in proc.stderr
