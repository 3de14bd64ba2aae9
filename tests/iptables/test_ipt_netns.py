# SPDX-License-Identifier: Apache-2.0
"""tools/rdmagw-iptables for real, as root, inside a throwaway network namespace
(see conftest.py: the host's own rules are never touched)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from ipt_helpers import NETPROBE

# Someone else's rules, present before and after: cleanup must leave them.
FOREIGN = {
    "iptables": """*nat
:FOREIGN - [0:0]
-A OUTPUT -p udp -m udp --dport 53 -m comment --comment "not rdmagw" -j ACCEPT
-A OUTPUT -p tcp -j FOREIGN
-A FOREIGN -d 192.0.2.0/24 -j RETURN
COMMIT
""",
    "ip6tables": """*nat
:FOREIGN - [0:0]
-A OUTPUT -p udp -m udp --dport 53 -m comment --comment "not rdmagw" -j ACCEPT
-A OUTPUT -p tcp -j FOREIGN
-A FOREIGN -d 2001:db8::/32 -j RETURN
COMMIT
""",
}

BACKENDS = {
    # name: (command prefix, extra tool arguments, install arguments)
    "nft": ("iptables", [], ["--capture", "10.99.0.0/24:8000-8100", "--capture", "192.168.7.7",
                             "--exclude-port", "8081", "--exclude-cidr", "10.99.0.128/25"]),
    "nft-ipv6": ("ip6tables", ["--ipv6"], ["--capture", "fd00:99::/64:8000-8100", "--capture", "[fd00:98::7]:443",
                                          "--exclude-port", "8081", "--exclude-cidr", "fd00:99::ff/128"]),
    "legacy": ("iptables-legacy", ["--iptables-cmd", "iptables-legacy"],
               ["--capture", "10.99.0.0/24:8000-8100", "--exclude-port", "8081"]),
}


def jump_count(saved: str) -> int:
    return sum(1 for line in saved.splitlines()
               if line.startswith("-A OUTPUT ") and re.search(r"-j RDMAGW_OUTPUT$", line))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_install_twice_then_cleanup_restores_the_table(netns, backend):
    cmd, tool_args, install_args = BACKENDS[backend]
    family = "ip6tables" if "ipv6" in backend else "iptables"
    if backend == "legacy":
        if shutil.which("iptables-legacy-restore") is None:
            pytest.skip("iptables-legacy not installed (the Debian iptables package ships it)")
        probe = netns.run([f"{cmd}-restore", "--noflush"], input=FOREIGN[family], check=False)
        if probe.returncode != 0:
            pytest.skip(f"this kernel has no legacy x_tables nat: {probe.stderr.strip()}")
    else:
        netns.run([f"{cmd}-restore", "--noflush"], input=FOREIGN[family])
    before = netns.save(cmd)
    assert "RDMAGW" not in before

    install = ["install", *tool_args, "--uid", "65534", *install_args]
    first = netns.tool(install).stdout
    assert "jump from OUTPUT added" in first
    once = netns.save(cmd)
    second = netns.tool(install).stdout
    assert "jump from OUTPUT kept" in second
    twice = netns.save(cmd)

    assert twice == once, "a second install changed the table"
    assert jump_count(twice) == 1, twice
    ours = [l for l in twice.splitlines() if l.startswith("-A ") and "RDMAGW_OUTPUT" in l]
    assert all('--comment "rdmagw:' in l for l in ours), ours
    chain = [l for l in ours if l.startswith("-A RDMAGW_OUTPUT ")]
    assert "--uid-owner 65534" in chain[0]
    assert ("::1/128" if family == "ip6tables" else "127.0.0.0/8") in chain[1]
    assert sum("REDIRECT --to-ports 15001" in l for l in chain) == install_args.count("--capture")
    # Foreign rules are still there, in place.
    for line in before.splitlines():
        assert line in twice

    # The dry run on an installed table removes what is there and changes nothing.
    dry = netns.tool(["cleanup", "--dry-run", *tool_args]).stdout
    assert "-X RDMAGW_OUTPUT" in dry
    assert netns.save(cmd) == twice

    removed = netns.tool(["cleanup", *tool_args]).stdout
    assert "removed 1 jump" in removed
    assert netns.save(cmd) == before

    again = netns.tool(["cleanup", *tool_args]).stdout
    assert "nothing to remove" in again
    assert netns.save(cmd) == before


def test_cleanup_removes_every_copy_of_the_jump(netns):
    before = netns.save()
    netns.tool(["install", "--uid", "65534", "--capture", "10.99.0.0/24"])
    # A second copy, as an older or hand-made install might leave.
    netns.run(["iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-m", "comment",
               "--comment", "rdmagw:jump", "-j", "RDMAGW_OUTPUT"])
    assert jump_count(netns.save()) == 2
    # install keeps what is there (it never adds a third)...
    netns.tool(["install", "--uid", "65534", "--capture", "10.99.0.0/24"])
    assert jump_count(netns.save()) == 2
    # ...and cleanup removes both.
    out = netns.tool(["cleanup"]).stdout
    assert "2 jumps" in out
    assert netns.save() == before


def test_install_replaces_the_rules(netns):
    netns.tool(["install", "--uid", "65534", "--capture", "10.99.0.0/24:8080", "--redirect-port", "15001"])
    netns.tool(["install", "--uid", "1000", "--capture", "10.98.0.0/16", "--redirect-port", "15002"])
    saved = netns.save()
    assert "10.99.0.0/24" not in saved and "--uid-owner 65534" not in saved
    assert "10.98.0.0/16" in saved and "--to-ports 15002" in saved and "--uid-owner 1000" in saved
    assert jump_count(saved) == 1
    netns.tool(["cleanup"])


def test_connections_are_really_redirected(netns):
    """A TCP connection to a captured address reaches the redirect port, with its
    original destination readable via SO_ORIGINAL_DST; the excluded uid, port,
    CIDR, loopback and uncaptured ports go straight through."""
    # 10.99.0.0/24 on lo: the whole prefix is local, so every address answers.
    netns.run(["ip", "addr", "add", "10.99.0.1/24", "dev", "lo"])
    netns.tool(["install", "--uid", "65534", "--capture", "10.99.0.0/24:8000-8100",
                "--exclude-port", "8081", "--exclude-cidr", "10.99.0.128/25"])
    cases = {
        "captured": ("10.99.0.2", 8080, None),
        "proxy_uid": ("10.99.0.2", 8080, 65534),
        "excluded_port": ("10.99.0.2", 8081, None),
        "excluded_cidr": ("10.99.0.200", 8080, None),
        "loopback": ("127.0.0.1", 8080, None),
        "outside_range": ("10.99.0.2", 9000, None),
    }
    argv = ["/usr/bin/python3", str(NETPROBE), "--listen", "15001,8080,8081,9000"]
    for name, (host, port, uid) in cases.items():
        argv += ["--case", f"{name}:{host}:{port}" + (f":{uid}" if uid is not None else "")]
    got = json.loads(netns.run(argv).stdout)
    want = {
        "captured": {"port": 15001, "orig": "10.99.0.2:8080"},
        "proxy_uid": {"port": 8080, "orig": "10.99.0.2:8080"},
        "excluded_port": {"port": 8081, "orig": "10.99.0.2:8081"},
        "excluded_cidr": {"port": 8080, "orig": "10.99.0.200:8080"},
        "loopback": {"port": 8080, "orig": "127.0.0.1:8080"},
        "outside_range": {"port": 9000, "orig": "10.99.0.2:9000"},
    }
    assert got == want

    netns.tool(["cleanup"])
    got = json.loads(netns.run([*argv[:4], "--case", "captured:10.99.0.2:8080"]).stdout)
    assert got["captured"]["port"] == 8080, got  # (no conntrack entry left to report orig)


def test_gid_exempts_a_root_sidecar_and_nothing_else_of_root(netns):
    """--gid: rdmagw running as root with its own group (the local legs in a
    pod) is exempt by group, while root processes of the other groups are
    still redirected."""
    netns.run(["ip", "addr", "add", "10.99.0.1/24", "dev", "lo"])
    netns.tool(["install", "--uid", "65534", "--gid", "4242", "--capture", "10.99.0.0/24:8080"])
    saved = netns.save()
    assert "--gid-owner 4242" in saved and "rdmagw:proxy-gid" in saved, saved
    argv = ["/usr/bin/python3", str(NETPROBE), "--listen", "15001,8080",
            "--case", "root_sidecar:10.99.0.2:8080:0:4242", "--case", "root_app:10.99.0.2:8080:0:0"]
    got = json.loads(netns.run(argv).stdout)
    assert got == {"root_sidecar": {"port": 8080, "orig": "10.99.0.2:8080"},
                   "root_app": {"port": 15001, "orig": "10.99.0.2:8080"}}, got
    netns.tool(["cleanup"])


def test_without_cap_net_admin_the_message_says_so(netns):
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    before = netns.save()
    # Root without CAP_NET_ADMIN: dropped from the bounding set, so neither the
    # tool nor the iptables it runs has it.
    for args in (["install", "--uid", "65534", "--capture", "10.99.0.0/24"], ["cleanup"]):
        proc = netns.tool(args, check_rc=1, prefix=("setpriv", "--bounding-set", "-net_admin", "--"))
        assert "needs CAP_NET_ADMIN (run as root or in an init container with NET_ADMIN)" in proc.stderr
    # With nothing but CAP_NET_ADMIN, the nft backend (Debian's default) works.
    only = ("setpriv", "--bounding-set", "-all,+net_admin", "--")
    netns.tool(["install", "--uid", "65534", "--capture", "10.99.0.0/24"], prefix=only)
    assert jump_count(netns.save()) == 1
    netns.tool(["cleanup"], prefix=only)
    assert netns.save() == before
    # A dry run needs no capability.
    proc = netns.tool(["install", "--dry-run", "--uid", "65534", "--capture", "10.99.0.0/24"],
                      prefix=("setpriv", "--bounding-set", "-net_admin", "--"))
    assert "-A OUTPUT -p tcp" in proc.stdout
    assert netns.save() == before
