# SPDX-License-Identifier: Apache-2.0
"""Who may use the admin endpoint (docs/admin.md, "Access"): a real rdmagw, asked over real sockets.

Without a token (loopback only): a browser cannot drive it, neither by a
cross-origin "simple" POST (Origin header) nor by DNS rebinding (a Host that
is not the admin address). With admin_token_file: everything but /live and
/ready needs the token; rdmagwctl sends it from --token-file or
$RDMAGW_ADMIN_TOKEN_FILE; a reload rotates it.
"""

from __future__ import annotations

import os
import subprocess

from admin_client import admin_request
from clients import free_port
from conftest import RDMAGW_BIN, RDMAGWCTL_BIN, check_sanitizers, key_file, render_config

RDMAGWCTL = RDMAGWCTL_BIN


def ctl(port: int, *args, env_extra: dict | None = None):
    env = dict(os.environ)
    env.pop("RDMAGW_ADMIN_TOKEN_FILE", None)
    env.update(env_extra or {})
    r = subprocess.run([RDMAGWCTL, "--admin", f"127.0.0.1:{port}", *args], capture_output=True, text=True,
                       timeout=20, env=env)
    check_sanitizers("rdmagwctl", r.stdout + r.stderr, r.returncode)
    return r.returncode, r.stdout + r.stderr


def test_without_a_token_a_browser_cannot_drive_the_admin_endpoint(sidecar):
    admin = free_port()
    a = sidecar("host-a", tunnel_port=free_port(), admin_port=admin, transport="tcp")
    a.start()
    # The cross-origin "simple" POST a page on any site can send (no preflight).
    r = admin_request(admin, "/drain", "POST", headers={"Origin": "http://evil.example",
                                                        "Content-Type": "text/plain"})
    assert r.status == 403, r.text
    assert admin_request(admin, "/ready").status == 200, "refused, yet it drained"
    # DNS rebinding: the page's own name, resolved to 127.0.0.1.
    for host in ("evil.example", f"evil.example:{admin}", f"127.0.0.1.nip.io:{admin}"):
        r = admin_request(admin, "/config", headers={"Host": host})
        assert r.status == 403 and "not this admin address" in r.text, (host, r.status, r.text)
    # What local tools send is answered.
    for host in (f"127.0.0.1:{admin}", f"localhost:{admin}", f"LOCALHOST:{admin}"):
        assert admin_request(admin, "/config", headers={"Host": host}).status == 200, host
    assert admin_request(admin, "/stats").status == 200
    # Probes are answered whatever they carry.
    assert admin_request(admin, "/ready", headers={"Origin": "http://evil.example"}).status == 200
    assert admin_request(admin, "/live", headers={"Host": "evil.example"}).status == 200
    code, out = ctl(admin, "status")
    assert code == 0, out


def with_token(sidecar, name: str):
    """A started rdmagw with admin_token_file: (admin port, token file, token)."""
    admin = free_port()
    path = key_file(name)
    sidecar("host-a", tunnel_port=free_port(), admin_port=admin, transport="tcp",
            extra_lines=[f"admin_token_file: {path}"]).start()
    return admin, path, open(path).read().strip()


def test_with_a_token_every_request_but_live_and_ready_needs_it(sidecar):
    admin, token_path, token = with_token(sidecar, "admin-token")
    for path, method in (("/stats", "GET"), ("/config", "GET"), ("/metrics", "GET"), ("/drain", "POST")):
        r = admin_request(admin, path, method)
        assert r.status == 401 and r.headers.get("www-authenticate") == "Bearer", (path, r.status, r.text)
        r = admin_request(admin, path, method, headers={"Authorization": "Bearer " + "x" * len(token)})
        assert r.status == 401, (path, r.status)
    assert admin_request(admin, "/ready").status == 200
    assert admin_request(admin, "/live").status == 200
    ok = admin_request(admin, "/stats", headers={"Authorization": f"Bearer {token}"})
    assert ok.status == 200, ok.text
    # With the token, a request from anywhere is answered (it proved itself).
    r = admin_request(admin, "/config", headers={"Authorization": f"Bearer {token}", "Origin": "http://x"})
    assert r.status == 200

    code, out = ctl(admin, "status")
    assert code == 1 and "401" in out and "--token-file" in out, out
    code, out = ctl(admin, "--token-file", token_path, "status")
    assert code == 0, out
    code, out = ctl(admin, "status", env_extra={"RDMAGW_ADMIN_TOKEN_FILE": token_path})
    assert code == 0, out
    code, out = ctl(admin, "--token-file", "/nonexistent/token", "status")
    assert code == 2 and "/nonexistent/token" in out, out


def test_a_reload_rotates_the_token(sidecar):
    admin, path, old = with_token(sidecar, "admin-rotate")
    new = "n" * 40
    key_file("admin-rotate", content=new + "\n")
    r = admin_request(admin, "/reload", "POST", headers={"Authorization": f"Bearer {old}"})
    assert r.status == 200 and "admin token changed" in r.json()["changes"], r.text
    assert admin_request(admin, "/stats", headers={"Authorization": f"Bearer {old}"}).status == 401
    assert admin_request(admin, "/stats", headers={"Authorization": f"Bearer {new}"}).status == 200


def test_an_admin_address_other_hosts_reach_needs_a_token(tmp_path):
    text = render_config("host-a", tunnel_port=free_port(), admin_port=free_port(), transport="tcp")
    text = text.replace('admin: "127.0.0.1:', 'admin: "0.0.0.0:')
    cfg = tmp_path / "open-admin.yaml"
    cfg.write_text(text)
    r = subprocess.run([RDMAGW_BIN, "--check", "--config", str(cfg)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "admin_token_file" in r.stderr and "reachable from other hosts" in r.stderr, r.stderr
    cfg.write_text(text + f"admin_token_file: {key_file('admin-open')}\n")
    r = subprocess.run([RDMAGW_BIN, "--check", "--config", str(cfg)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stdout + r.stderr
