# SPDX-License-Identifier: Apache-2.0
"""A seccomp profile that blocks io_uring (the container runtimes' defaults
do) makes rdmagw refuse to start with one line that says what blocks it and
which profile to use, before it binds anything.

The filter is a real seccomp filter installed in the child between fork and
exec, answering io_uring_setup with the errno each runtime's default uses:
ENOSYS (podman, containers-common) or EPERM (Docker 25+).  tests/docker/e2e
runs the same start under podman's own default profile."""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import subprocess

import pytest

from clients import free_port
from conftest import check_sanitizers, render_config

NR_IO_URING_SETUP = 425  # the same on every architecture since 5.1
AUDIT_ARCH_X86_64 = 0xC000003E
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


def deny_io_uring_setup(err: int):
    """A preexec_fn: io_uring_setup fails with `err`; every other call, and
    every call of another architecture, is allowed."""
    ld_arch = SockFilter(0x20, 0, 0, 4)                   # A = seccomp_data.arch
    if_x86_64 = SockFilter(0x15, 1, 0, AUDIT_ARCH_X86_64)  # skip the allow below when x86_64
    allow = SockFilter(0x06, 0, 0, SECCOMP_RET_ALLOW)
    ld_nr = SockFilter(0x20, 0, 0, 0)                      # A = seccomp_data.nr
    if_setup = SockFilter(0x15, 0, 1, NR_IO_URING_SETUP)
    deny = SockFilter(0x06, 0, 0, SECCOMP_RET_ERRNO | err)
    program = (SockFilter * 7)(ld_arch, if_x86_64, allow, ld_nr, if_setup, deny, allow)
    prog = SockFprog(len(program), program)

    def install():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
                libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "installing the seccomp filter")
    return install


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter checks the x86_64 audit arch")
@pytest.mark.parametrize("err", [errno.ENOSYS, errno.EPERM], ids=["ENOSYS-podman", "EPERM-docker"])
def test_blocked_io_uring_fails_the_start_with_one_line_naming_the_profile(rdmagw_bin, tmp_path, err):
    listen_port, tunnel_port, admin_port = free_port(), free_port(), free_port()
    cfg = tmp_path / "rdmagw.yaml"
    cfg.write_text(render_config(
        "host-a", tunnel_port=tunnel_port, admin_port=admin_port, peers=[("host-b", free_port())],
        listeners=[{"name": "echo", "listen": f"tcp:127.0.0.1:{listen_port}", "peer": "host-b",
                    "target": "tcp:127.0.0.1:6379"}]))
    r = subprocess.run([rdmagw_bin, "--config", str(cfg)], stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=20, preexec_fn=deny_io_uring_setup(err))
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    check_sanitizers("rdmagw under a seccomp filter", out, r.returncode)
    assert r.returncode == 1, f"rc={r.returncode}\n{out}"
    errors = [line for line in out.splitlines() if " error " in line]
    assert len(errors) == 1, f"expected one error line, got:\n{out}"
    line = errors[0]
    assert "event=io_uring_unavailable" in line, line
    assert f"io_uring_setup: {__import__('os').strerror(err)}" in line, line
    assert "docker/seccomp.json" in line and "seccomp" in line, line
    assert "worker_failed" not in out, out
    # Nothing was bound: the check runs before the listeners.
    for port in (listen_port, tunnel_port, admin_port):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
