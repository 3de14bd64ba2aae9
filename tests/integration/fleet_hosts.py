# SPDX-License-Identifier: Apache-2.0
"""N hosts as network namespaces on one bridge (the bridge in a namespace of
its own), made for one test and deleted after it. Addresses exist only inside
these namespaces, so nothing a test sends through them leaves the machine."""

from __future__ import annotations

import contextlib
import secrets

from netns_hosts import run

# An echo server: `python3 -c ECHO_SERVER IP PORT...` listens on each port,
# echoes, and prints "accepted PORT" per connection (tests may count them).
ECHO_SERVER = r"""
import asyncio, sys
async def echo(reader, writer):
    print("accepted", writer.get_extra_info("sockname")[1], flush=True)
    try:
        while data := await reader.read(262144):
            writer.write(data)
            await writer.drain()
        writer.close()
    except ConnectionError:
        writer.transport.abort()
async def main():
    servers = [await asyncio.start_server(echo, sys.argv[1], int(p), backlog=256) for p in sys.argv[2:]]
    await asyncio.sleep(600)
asyncio.run(main())
"""


@contextlib.contextmanager
def fleet_hosts(count: int, subnet: str = "10.77.0"):
    """Yields [(namespace, address)] for hosts subnet.1 .. subnet.count, /24,
    on one bridge, lo up in each."""
    tag = secrets.token_hex(2)
    switch = f"rgfs{tag}"
    hosts = [(f"rgf{tag}h{i}", f"{subnet}.{i + 1}") for i in range(count)]
    made = []
    try:
        run("ip", "netns", "add", switch)
        made.append(switch)
        run("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", switch, "link", "set", "br0", "up")
        for i, (ns, ip) in enumerate(hosts):
            run("ip", "netns", "add", ns)
            made.append(ns)
            host_end, switch_end = f"rgf{tag}a{i}", f"rgf{tag}b{i}"
            run("ip", "link", "add", host_end, "type", "veth", "peer", "name", switch_end)
            run("ip", "link", "set", host_end, "netns", ns)
            run("ip", "link", "set", switch_end, "netns", switch)
            run("ip", "-n", switch, "link", "set", switch_end, "master", "br0")
            run("ip", "-n", switch, "link", "set", switch_end, "up")
            run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", host_end)
            run("ip", "-n", ns, "link", "set", host_end, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
        yield hosts
    finally:
        for ns in reversed(made):
            run("ip", "netns", "del", ns, check=False)
