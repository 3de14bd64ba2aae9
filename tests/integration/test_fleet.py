# SPDX-License-Identifier: Apache-2.0
"""A fleet, not a pair (docs/configuration.md, "Fleet"): 16 hosts as
network namespaces on one bridge, each with its rdmagw, an echo server and
iptables redirecting its clients' connections to port 8000 of any host to its
rdmagw. No host names another in `peers:`; every route says
`peer: destination`, inside `tunnel.peer_cidrs`.

- Sessions appear on first use only, one per peer actually used, and carry
  every byte (SHA-256 of the echo).
- `tunnel.max_sessions`: the longest-idle session is closed to make room;
  when every session carries streams, a new one is refused and its stream
  reset; both counted and shown in /peers.
- A destination outside peer_cidrs is never dialled (its stream is reset);
  a reload that adds the CIDR lets it through.
- A reload that shortens `tunnel.session_idle_ms` closes idle sessions, on
  both ends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clients import require_root_and, wait_for
from conftest import REPO, RDMAGW_BIN, ManagedProcess, Sidecar, key_file
from fleet_hosts import ECHO_SERVER, fleet_hosts
from netns_hosts import run

HOSTS = 16
SUBNET = "10.77.0"
PORT = 8000
NOBODY = 65534
MAX_SESSIONS = 4
CLIENT = str(Path(__file__).with_name("fleet_client.py"))

def config(i: int, ip: str, cidrs: str, idle_ms: int) -> str:
    return f"""node: h{i}
workers: 1
admin: "127.0.0.1:9901"
tunnel:
  address: {ip}
  tcp_port: 7471
  transport: tcp
  session_idle_ms: {idle_ms}
  max_sessions: {MAX_SESSIONS}
  peer_cidrs: [{cidrs}]
  auth: {{mode: psk, key_files: [{key_file()}]}}
targets: ["tcp:{ip}:{PORT}"]
listeners:
  - name: out
    listen: "transparent:127.0.0.1:15001"
    routes:
      - {{match: "{SUBNET}.0/24:{PORT}", peer: destination}}
shutdown_timeout_ms: 2000
"""


class Fleet:
    def __init__(self, hosts, sidecars):
        self.hosts = hosts        # [(namespace, address)]
        self.sidecars = sidecars  # rdmagw of each host

    def ip(self, i: int) -> str:
        return self.hosts[i][1]

    def admin(self, i: int, path: str) -> str:
        r = run("ip", "netns", "exec", self.hosts[i][0], "curl", "-sS", "--max-time", "5",
                f"http://127.0.0.1:9901{path}")
        return r.stdout

    def peers(self, i: int) -> list[dict]:
        return json.loads(self.admin(i, "/peers"))["peers"]

    def dialled(self, i: int) -> dict[str, dict]:
        """Host i's discovered peers by address."""
        return {p["name"]: p for p in self.peers(i) if p["discovered"]}

    def sessions_to(self, i: int) -> set[str]:
        return {name for name, p in self.dialled(i).items() if p["sessions"]}

    def metric(self, i: int, name: str) -> float:
        for line in self.admin(i, "/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"host {i}: no metric {name}")

    def limit(self, i: int, action: str) -> float:
        for line in self.admin(i, "/metrics").splitlines():
            if line.startswith(f'rdmagw_tunnel_session_limit_total{{action="{action}"}} '):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"host {i}: no session limit metric for {action}")

    def client(self, i: int, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.hosts[i][0], "setpriv", f"--reuid={NOBODY}",
                                 f"--regid={NOBODY}", "--clear-groups", sys.executable, CLIENT, *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def run_client(self, i: int, dests: list[int], count: int, size: int) -> list[dict]:
        p = self.client(i, "run", *[f"{self.ip(d)}:{PORT}:{count}:{size}" for d in dests])
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
        return json.loads(out)


def ends(results: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        out[r["end"]] = out.get(r["end"], 0) + 1
    return out


@pytest.fixture
def fleet(sidecar, procs, tmp_path):
    require_root_and(("ip", "iptables", "setpriv", "curl"), "fleet test")
    with fleet_hosts(HOSTS, SUBNET) as hosts:
        sidecars = []
        tool = str(REPO / "tools" / "rdmagw-iptables")
        for i, (ns, ip) in enumerate(hosts):
            server = ManagedProcess(f"echo-h{i}", ["ip", "netns", "exec", ns, sys.executable, "-c", ECHO_SERVER,
                                                   ip, str(PORT)], tmp_path / f"echo-h{i}.log")
            procs.append(server)
            server.start()
            # Hosts .1-.15 are inside peer_cidrs at first; .16 is not.
            sc = sidecar(f"h{i}", config(i, ip, f"{SUBNET}.0/28", 60000), netns=ns)
            sc.start()
            sidecars.append(sc)
            # rdmagw runs as root here: uid 0's connections are never redirected.
            run("ip", "netns", "exec", ns, tool, "install", "--uid", "0", "--capture", f"{SUBNET}.0/24:{PORT}",
                "--redirect-port", "15001")
        yield Fleet(hosts, sidecars)


def test_a_fleet_finds_its_peers_by_destination_on_demand_within_its_limits(fleet, tmp_path):
    f = fleet
    # Nothing is dialled before a stream needs it.
    for i in range(HOSTS):
        assert f.peers(i) == [], f"host {i} has sessions before any stream"
        assert "event=session_open" not in f.sidecars[i].log_text()

    # Every host but the last talks to the next three: 15 x 3 x 4 streams of 64 KiB.
    ring = HOSTS - 1
    wanted = {i: sorted({(i + k) % ring for k in (1, 2, 3)}) for i in range(ring)}
    clients = {i: f.client(i, "run", *[f"{f.ip(d)}:{PORT}:4:65536" for d in wanted[i]]) for i in range(ring)}
    for i, p in clients.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert ends(json.loads(out)) == {"ok": 12}, f"host {i}: {out}"
    for i in range(ring):
        assert f.sessions_to(i) == {f.ip(d) for d in wanted[i]}, f"host {i}: {f.dialled(i)}"
        for name, peer in f.dialled(i).items():
            assert peer["state"] == "up" and peer["connect"] == "on_demand" and not peer["configured"]
            assert len(peer["sessions"]) == 1 and peer["sessions"][0]["peer_node"] == f"h{int(name.rsplit('.', 1)[1]) - 1}"
        # One session per peer used, whatever the number of streams.
        assert f.sidecars[i].log_text().count("event=session_open") == 3 + 3  # 3 dialled, 3 accepted
    print("15 hosts x 3 peers: 45 sessions on first use, 180 streams byte-exact")

    # max_sessions (4): host 0 holds sessions to 1, 2, 3; one more fits.
    assert ends(f.run_client(0, [4], 1, 1024)) == {"ok": 1}
    assert f.sessions_to(0) == {f.ip(d) for d in (1, 2, 3, 4)}
    assert f.limit(0, "closed_idle") == 0
    # Two more: the two longest-idle sessions make room.
    assert ends(f.run_client(0, [5], 1, 1024)) == {"ok": 1}
    assert ends(f.run_client(0, [6], 1, 1024)) == {"ok": 1}
    sessions = f.sessions_to(0)
    assert len(sessions) == MAX_SESSIONS and {f.ip(d) for d in (4, 5, 6)} <= sessions, sessions
    assert f.limit(0, "closed_idle") == 2
    made_room = [p for p in f.dialled(0).values() if "make room" in p["last_close"]]
    assert len(made_room) == 2 and all(p["state"] == "idle" for p in made_room), made_room
    assert f.sidecars[0].log_text().count("event=session_evicted") == 2

    # Every session busy: a fifth peer is refused, and its stream reset.
    holder = f.client(0, "hold", *[f"{f.ip(d)}:{PORT}" for d in (7, 8, 9, 10)], stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert f.sessions_to(0) == {f.ip(d) for d in (7, 8, 9, 10)}
        assert f.limit(0, "closed_idle") == 6
        assert ends(f.run_client(0, [11], 2, 1024)) == {"reset": 2}
        assert f.limit(0, "refused") >= 1
        assert f.sidecars[0].wait_log(lambda l: "event=session_refused" in l and "max_sessions" in l, timeout=5)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # Streams done: their sessions are idle, and make room again.
    wait_for(lambda: all(p["sessions"][0]["idle_ms"] >= 0 for p in f.dialled(0).values() if p["sessions"]),
             timeout=10, what="host 0's sessions idle once the held streams closed")
    assert ends(f.run_client(0, [11], 2, 1024)) == {"ok": 2}

    # Host 15 (.16) is outside peer_cidrs: never dialled, the stream is reset.
    outside = f.ip(HOSTS - 1)
    assert ends(f.run_client(0, [HOSTS - 1], 1, 1024)) == {"reset": 1}
    assert f.sidecars[0].wait_log(
        lambda l: "event=stream_rejected" in l and f"{outside}:{PORT}" in l and "outside tunnel.peer_cidrs" in l,
        timeout=5)
    assert "event=session_open" not in f.sidecars[HOSTS - 1].log_text()
    # A reload adds its CIDR, and shortens session_idle_ms to 1 s.
    sc = f.sidecars[0]
    sc.config_path.write_text(config(0, f.ip(0), f"{SUBNET}.0/28, {SUBNET}.16/28", 1000))
    mark = sc.log_size()
    sc.send_signal(1)  # SIGHUP
    assert sc.wait_log(lambda l: "event=config_reloaded" in l, timeout=10, since=mark)
    assert "tunnel.peer_cidrs" in sc.log_text(mark) and "tunnel.session_idle_ms: 60000 -> 1000" in sc.log_text(mark)
    assert ends(f.run_client(0, [HOSTS - 1], 3, 65536)) == {"ok": 3}
    assert outside in f.sessions_to(0)
    assert f.sidecars[HOSTS - 1].log_text().count("event=session_open") == 1

    # Idle for 1 s: host 0's sessions close, and so do the accepting ends.
    wait_for(lambda: not f.sessions_to(0), timeout=10, what="host 0's idle sessions closed")
    assert all(p["state"] == "idle" for p in f.dialled(0).values())
    assert "idle for 1000 ms" in f.dialled(0)[outside]["last_close"]
    assert f.metric(0, "rdmagw_tunnel_sessions_idle_closed_total") >= 4
    wait_for(lambda: f.peers(HOSTS - 1) == [], timeout=10, what="host 15's end of the idle session closed")
    for i in range(HOSTS):
        assert "event=worker_failed" not in f.sidecars[i].log_text()


def test_streams_through_discovered_peers_survive_a_takeover(fleet, procs, tmp_path):
    """`rdmagw --takeover` on host 0 while it holds streams to three peers it
    found by destination: the new process rebuilds those links from
    peer_cidrs, the streams go on, and it lists the same peers."""
    f = fleet
    peers = (1, 2, 3)  # a fourth session (to host 5) still fits max_sessions
    holder = f.client(0, "hold", *[f"{f.ip(d)}:{PORT}" for d in peers], stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert f.sessions_to(0) == {f.ip(d) for d in peers}
        old = f.sidecars[0]
        new = Sidecar("h0-new", old.config_path, tmp_path / "h0-new.log", RDMAGW_BIN, netns=f.hosts[0][0])
        new.argv = new.argv + ["--takeover"]
        procs.append(new)
        new.start(wait=True, timeout=30)
        assert old.wait(timeout=30) == 0, old.tail()
        assert "event=takeover_done" in old.log_text() or "event=takeover_adopted" in new.log_text()
        assert "takeover_session_dropped" not in new.log_text(), new.tail()
        # The held streams carry on, through the new process.
        holder.stdin.write("echo\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == f"echoed {len(peers)}"
        dialled = f.dialled(0)
        assert {name for name, p in dialled.items() if p["sessions"]} == {f.ip(d) for d in peers}, dialled
        # And a new stream to another peer is found by destination as before.
        assert ends(f.run_client(0, [5], 2, 65536)) == {"ok": 2}
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
