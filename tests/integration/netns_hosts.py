# SPDX-License-Identifier: Apache-2.0
"""Two hosts as network namespaces joined by a veth pair, made for one test
and deleted after it. Addresses exist only inside these namespaces, so
nothing a test sends through them leaves the machine."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from dataclasses import dataclass


def run(*args, check=True, timeout=30):
    """Runs a command (`args`, each one word), output captured as text;
    raises CalledProcessError on a failure unless check=False."""
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=check)


@dataclass
class Hosts:
    a: str       # namespace names
    b: str
    veth_a: str  # each one's end of the veth pair
    veth_b: str

    def exec_in(self, ns: str, *argv, check=True, timeout=30):
        return run("ip", "netns", "exec", ns, *argv, check=check, timeout=timeout)


@contextlib.contextmanager
def two_hosts(a_ip: str, b_ip: str, prefix: int):
    """Namespaces A (a_ip) and B (b_ip) on one veth link, lo up in both."""
    tag = secrets.token_hex(3)
    h = Hosts(f"rgwa{tag}", f"rgwb{tag}", f"va{tag}", f"vb{tag}")
    run("ip", "netns", "add", h.a)
    run("ip", "netns", "add", h.b)
    try:
        run("ip", "link", "add", h.veth_a, "type", "veth", "peer", "name", h.veth_b)
        run("ip", "link", "set", h.veth_a, "netns", h.a)
        run("ip", "link", "set", h.veth_b, "netns", h.b)
        # nodad: usable at once, without IPv6 duplicate address detection.
        nodad = ["nodad"] if ":" in a_ip else []
        run("ip", "-n", h.a, "addr", "add", f"{a_ip}/{prefix}", "dev", h.veth_a, *nodad)
        run("ip", "-n", h.b, "addr", "add", f"{b_ip}/{prefix}", "dev", h.veth_b, *nodad)
        for ns, dev in ((h.a, h.veth_a), (h.b, h.veth_b)):
            run("ip", "-n", ns, "link", "set", dev, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
        yield h
    finally:
        run("ip", "netns", "del", h.a, check=False)
        run("ip", "netns", "del", h.b, check=False)
