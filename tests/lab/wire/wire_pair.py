# SPDX-License-Identifier: Apache-2.0
"""An rdmagw pair across the lab's wire: host-a's sidecar runs here (host a),
host-b's on host b through lab-on, with an echo server behind it. Both logs
land in files here; host b's admin endpoint listens on the control network,
so its /peers and /metrics are read from here too."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import urllib.request

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
RDMAGW = os.environ.get("RDMAGW_BIN", os.path.join(ROOT, "build", "bin", "rdmagw"))
ADDR = os.environ.get("RDMAGW_LAB_ADDR", "")
PEER = os.environ.get("RDMAGW_LAB_PEER_ADDR", "")
CONTROL_PEER = os.environ.get("RDMAGW_LAB_CONTROL_PEER", "")
TCP_PORT, RDMA_PORT, ADMIN_PORT, LISTEN_PORT = 7471, 7472, 9901, 6000


def link(*args: str) -> None:
    """Changes the link between the hosts (lab-link)."""
    subprocess.run(["lab-link", *args], check=True, timeout=60)


def on_b(*argv: str, stdin: bytes | None = None, timeout: float = 60) -> str:
    r = subprocess.run(["lab-on", "b", *argv], input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0, f"on host b: {' '.join(argv)} exited {r.returncode}: {out}"
    return out


def config(node: str, addr: str, peer_addr: str, transport: str, admin: str, key: str, tunnel_extra: dict,
           listener: bool, routes: list[tuple[str, int, int]]) -> str:
    tunnel = {"address": addr, "tcp_port": TCP_PORT, "rdma_port": RDMA_PORT, "transport": transport,
              "auth": {"mode": "psk", "key_files": [key]}, "rdma": {"slab_size": "64MiB"}}
    tunnel.update(tunnel_extra)
    doc = {"node": node, "admin": admin, "workers": 1, "tunnel": tunnel}
    if not admin.startswith("127."):
        # Reachable from host a over the control network: needs its token.
        doc["admin_token_file"] = os.path.join(os.path.dirname(key), "admin-token")
    if listener:
        doc["peers"] = [{"name": "host-b", "address": peer_addr, "tcp_port": TCP_PORT, "rdma_port": RDMA_PORT}]
        doc["listeners"] = [{"name": name, "listen": f"tcp:127.0.0.1:{listen}", "peer": "host-b",
                             "target": f"tcp:127.0.0.1:{target}"} for name, listen, target in routes]
    else:
        doc["targets"] = [f"tcp:127.0.0.1:{target}" for _, _, target in routes]
    # JSON is YAML: no YAML writer needed.
    return json.dumps(doc, indent=1)


class WirePair:
    """`routes`: (name, port on host a's 127.0.0.1, port on host b's) for each
    listener; without them, one listener on LISTEN_PORT to an echo server
    started on host b."""

    def __init__(self, workdir: str, transport: str = "rdma", routes: list[tuple[str, int, int]] | None = None,
                 **tunnel_extra):
        assert PEER, "run me with tools/rdma-lab run --wire"
        self.routes = routes
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.transport = transport
        self.tunnel_extra = tunnel_extra
        self.procs: list[subprocess.Popen] = []
        self.key = secrets.token_hex(32)
        self.admin_token = secrets.token_hex(16)

    # -- lifecycle -------------------------------------------------------
    def start(self, before_a=None) -> "WirePair":
        """Starts host b's side, then `before_a()` if given, then host a's."""
        self.echo = None
        if self.routes is None:
            # The echo server on b; its port goes into a's listener.
            self.echo = subprocess.Popen(
                ["lab-on", "b", "python3", "-S", os.path.join(os.path.dirname(__file__), "serve_echo.py")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.procs.append(self.echo)
            line = self.echo.stdout.readline()
            m = re.fullmatch(r"port (\d+)\n", line)
            assert m, f"the echo server on host b said {line!r}"
            self.routes = [("echo", LISTEN_PORT, int(m.group(1)))]
        key_path = os.path.join(self.dir, "key")
        with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400), "w") as f:
            f.write(self.key)
        b_conf = config("host-b", PEER, ADDR, self.transport, f"{CONTROL_PEER}:{ADMIN_PORT}", key_path,
                        self.tunnel_extra, False, self.routes)
        # One call to host b (each costs a second or more in the emulated
        # VMs): the key and token are hex, the configuration comes on stdin.
        on_b("sh", "-c", f"mkdir -p {self.dir} && umask 077 && printf %s {self.key} > {key_path} && "
             f"printf %s {self.admin_token} > {self.dir}/admin-token && cat > {self.dir}/b.yaml",
             stdin=b_conf.encode())
        a_conf = config("host-a", ADDR, PEER, self.transport, f"127.0.0.1:{ADMIN_PORT}", key_path,
                        self.tunnel_extra, True, self.routes)
        with open(os.path.join(self.dir, "a.yaml"), "w") as f:
            f.write(a_conf)
        self.b_log = os.path.join(self.dir, "host-b.log")
        self.a_log = os.path.join(self.dir, "host-a.log")
        self.b = subprocess.Popen(["lab-on", "b", RDMAGW, "--config", f"{self.dir}/b.yaml"],
                                  stdin=subprocess.DEVNULL, stdout=open(self.b_log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(self.b)
        self.wait_log(self.b_log, "event=ready", 60)
        if before_a:
            before_a()
        self.a = subprocess.Popen([RDMAGW, "--config", f"{self.dir}/a.yaml"], stdin=subprocess.DEVNULL,
                                  stdout=open(self.a_log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(self.a)
        self.wait_log(self.a_log, "event=ready", 60)
        return self

    def stop(self) -> None:
        t0 = time.monotonic()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        took = []
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
            took.append(f"{os.path.basename(p.args[-1] if p.args[0] != 'lab-on' else p.args[2])}"
                        f" {time.monotonic() - t0:.1f} s")
        print(f"wire pair stopped: {', '.join(took)}", flush=True)

    # -- what happened ----------------------------------------------------
    @property
    def address(self):
        return ("127.0.0.1", LISTEN_PORT)

    @staticmethod
    def log_text(path: str) -> str:
        with open(path, errors="replace") as f:
            return f.read()

    def events(self, path: str, event: str) -> list[str]:
        return [l for l in self.log_text(path).splitlines() if f"event={event} " in l + " "]

    def wait_log(self, path: str, needle: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_text(path).splitlines():
                if needle in line:
                    return line
            for p in self.procs:
                assert p.poll() is None or p is self.echo, f"{p.args} exited {p.returncode}:\n{self.log_text(path)[-3000:]}"
            time.sleep(0.2)
        raise AssertionError(f"no {needle!r} in {path} within {timeout} s:\n{self.log_text(path)[-3000:]}")

    def admin(self, host: str, path: str):
        base = f"http://127.0.0.1:{ADMIN_PORT}" if host == "a" else f"http://{CONTROL_PEER}:{ADMIN_PORT}"
        req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {self.admin_token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read().decode()
        return json.loads(body) if path.startswith("/peers") or path.startswith("/stats") else body

    def metrics(self, host: str) -> dict[str, float]:
        out = {}
        for line in self.admin(host, "/metrics").splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out

    def metric_family(self, host: str, name: str) -> dict[str, float]:
        """One family's samples with a non-zero value, by their labels."""
        return {k[len(name):]: v for k, v in self.metrics(host).items()
                if (k == name or k.startswith(name + "{")) and v}

    def session_transport(self) -> str | None:
        peers = self.admin("a", "/peers").get("peers", [])
        return peers[0].get("transport") if peers else None
