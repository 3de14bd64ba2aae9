# SPDX-License-Identifier: Apache-2.0
"""listeners[].socket_mode on a real unix listener: the file gets the bits,
a process of another uid can connect only when they allow it, and a reload
changes them on the socket already listening (node mode shares the socket
with every pod on a host; docs/deploy.md, "Node mode")."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from clients import free_port
from conftest import render_config

NOBODY = 65534


@pytest.fixture
def open_dir():
    """A directory every uid can reach (pytest's tmp_path is under a 0700 one)."""
    path = tempfile.mkdtemp(prefix="rdmagw-sockmode-", dir="/tmp")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def connect_as_nobody(path: str) -> int:
    """0 when uid/gid 65534 can connect to the socket at `path`, else errno."""
    probe = ("import socket, sys\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    sys.exit(e.errno)\n")

    def drop():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    return subprocess.run([sys.executable, "-c", probe, path], preexec_fn=drop, timeout=10).returncode


def config(sock: str, mode: str | None, admin_port: int, tunnel_port: int) -> str:
    listener = {"name": "shared", "listen": f"unix:{sock}", "peer": "host-b", "target": "tcp:127.0.0.1:6379"}
    if mode is not None:
        listener["socket_mode"] = mode
    return render_config("host-a", tunnel_port=tunnel_port, admin_port=admin_port,
                         peers=[("host-b", free_port())], listeners=[listener])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_socket_mode_opens_the_socket_to_other_uids_and_a_reload_changes_it(sidecar, open_dir):
    sock = str(open_dir / "shared.sock")
    admin_port, tunnel_port = free_port(), free_port()
    sc = sidecar("host-a", config(sock, "0666", admin_port, tunnel_port)).start()
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o666
    assert connect_as_nobody(sock) == 0

    sc.config_path.write_text(config(sock, "0600", admin_port, tunnel_port))
    offset = len(sc.log_text())
    sc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "event=config_reloaded" not in sc.log_text(offset):
        assert "event=reload_failed" not in sc.log_text(offset), sc.tail()
        assert time.monotonic() < deadline, sc.tail()
        time.sleep(0.05)
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    assert connect_as_nobody(sock) == 13  # EACCES
    with socket.socket(socket.AF_UNIX) as own:  # root, the owner, still can
        own.connect(sock)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_without_socket_mode_the_umask_decides_and_other_uids_are_kept_out(sidecar, open_dir):
    sock = str(open_dir / "private.sock")
    sidecar("host-a", config(sock, None, free_port(), free_port())).start()
    assert not stat.S_IMODE(os.stat(sock).st_mode) & 0o002
    assert connect_as_nobody(sock) == 13
