# SPDX-License-Identifier: Apache-2.0
"""The takeover channel against processes that should not be trusted with
it (docs/operations.md, "Takeover"; docs/security.md):

- another user (uid 65534) that wants the channel's abstract name, which has
  no file permissions: it can never bind it across a takeover (the
  listening socket moves with everything else), and if it took the name
  before rdmagw started, rdmagw says so and `rdmagw --takeover` refuses to
  send it a byte, let alone adopt its forged image (which named a
  root-owned file as a unix listener, for rdmagw to unlink);
- an old process whose image does not match its sockets: refused;
- split brain: a new process that answers ADOPTED after the old one gave up
  gets no RELEASED, and a new process whose old one does not release never
  serves, so at most one process serves.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from backends import EchoServer
from clients import connect, free_port, recv_exact, require_root_and
from conftest import RDMAGW_BIN, REPO, Sidecar, tcp_only
from takeover_channel import (ADOPTED, COMMIT, HEADER, HELLO, IMAGE, LOCAL_LEGS, LOCAL_LEGS_ADOPTED, MAGIC, REFUSED,
                              RELEASED, SOCKETS, SQUATTER, WELCOME, StalledTakeover, channel_name, image, receive,
                              send)
from test_takeover import Upgrades, echo_once, pair_with_a_stream, takeover_address

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", SQUATTER]


def squatter(tunnel_port: int, seconds: float, mode: str, forged_path: str = "/nonexistent") -> subprocess.Popen:
    env = dict(os.environ, FORGED_PATH=f"unix:{forged_path}")
    return subprocess.Popen(NOBODY + [takeover_address(tunnel_port), str(seconds), mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def root_owned_file(tmp_path) -> str:
    path = tmp_path / "root-owned"
    path.write_text("precious\n")
    os.chmod(path, 0o600)
    return str(path)


@tcp_only
@pytest.mark.deadline(90)
def test_another_user_never_gets_the_channel_across_a_takeover(pair, backend, procs, tmp_path):
    require_root_and(("setpriv",), "a squatter of another uid")
    echo = backend(EchoServer())
    p = pair([{"name": "e", "target": echo.endpoint}], [echo.endpoint])
    # It tries every millisecond while host-a is taken over, and well after
    # the old process has exited (until then, the old one held the name).
    squat = squatter(p.a.tunnel_port, 8, "race")
    try:
        upgrades = Upgrades(p, procs, tmp_path, RDMAGW_BIN)
        upgrades.take_over("host-a")
        out, err = squat.communicate(timeout=30)
    finally:
        if squat.poll() is None:
            squat.kill()
    assert out.strip() == "never bound", (out, err)
    new = upgrades.current["host-a"]
    assert "event=takeover_done" in new.log_text() and "event=takeover_unconfirmed" not in new.log_text()
    # The socket that came over serves the next takeover.
    upgrades.take_over("host-a")
    echo_once(p.address("e"), b"after two takeovers")


@tcp_only
@pytest.mark.deadline(90)
def test_a_squatted_channel_is_reported_and_never_spoken_to(sidecar, backend, tmp_path):
    require_root_and(("setpriv",), "a squatter of another uid")
    echo = backend(EchoServer())
    precious = root_owned_file(tmp_path)
    port = free_port()
    squat = squatter(port, 40, "hold", forged_path=precious)
    try:
        assert squat.stdout.readline().strip() == "bound"
        sc = sidecar("host-b", tunnel_port=port, admin_port=free_port(), targets=[echo.endpoint])
        sc.start()
        line = sc.wait_log("event=takeover_channel_taken", 10)
        assert line and "error" in line and "uid 65534" in line, sc.tail()

        # Root's --takeover finds the squatter where the running rdmagw
        # should be: it must neither send it anything nor adopt its image.
        new = Sidecar("host-b-new", sc.config_path, tmp_path / "host-b-new.log", RDMAGW_BIN)
        new.argv.append("--takeover")
        new.start(wait=False)
        assert new.wait(timeout=20) == 1
        log = new.log_text()
        assert "event=takeover_failed" in log and "uid 65534" in log and "nothing was sent" in log, log
        assert "event=takeover_adopted" not in log and "event=ready" not in log
        assert open(precious).read() == "precious\n"
        assert sc.running()
        squat.send_signal(signal.SIGTERM)
    finally:
        if squat.poll() is None:
            squat.kill()
    squat.wait(timeout=10)


class FakeOldProcess:
    """Holds the channel's name as a running rdmagw would (as root, so it may
    be taken over by root), and answers one takeover request as the test
    says: `sockets` are sent in SOCKETS with `image_bytes`, and ADOPTED is
    answered by `on_adopted` (RELEASED, REFUSED, or None: close)."""

    def __init__(self, tunnel_port: int, image_bytes: bytes, sockets=(), on_adopted: int | None = RELEASED,
                 announce: int | None = None, legs: tuple[bytes, list] | None = None):
        self.listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listening.bind(channel_name(tunnel_port))
        self.listening.listen(4)
        self.image, self.sockets, self.on_adopted = image_bytes, list(sockets), on_adopted
        self.announce = announce  # an IMAGE header claiming this many bytes, then only `image_bytes`
        self.legs = legs  # LOCAL_LEGS before the image: (payload, files whose descriptors ride on it)
        self.hello_features: int | None = None
        self.adopted = False
        self.answer = b""  # the payload of the new process's answer to IMAGE (REFUSED's: why)
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            self.listening.settimeout(20)
            conn, _ = self.listening.accept()
            kind, body, _, _ = receive(conn)
            assert kind == HELLO, kind
            self.hello_features = int.from_bytes(body[8:12], "little")
            if self.hello_features & COMMIT:
                send(conn, WELCOME, fds=[self.listening.fileno()], credentials=True)
            send(conn, SOCKETS, fds=[s.fileno() for s in self.sockets])
            if self.legs is not None:
                send(conn, LOCAL_LEGS, self.legs[0], fds=[f.fileno() for f in self.legs[1]])
            if self.announce is not None:
                conn.sendall(HEADER.pack(MAGIC, IMAGE, self.announce, 0) + self.image)
                time.sleep(3)  # the new process waits for the rest, or gives up
                conn.close()
                return
            send(conn, IMAGE, self.image)
            kind, self.answer, _, _ = receive(conn)
            self.adopted = kind == ADOPTED
            if self.on_adopted == REFUSED:
                send(conn, REFUSED, b"gave up waiting")
            elif self.on_adopted == RELEASED:
                send(conn, RELEASED)
            time.sleep(0.5)
            conn.close()
        except Exception as e:  # reported by the test
            self.error = e

    def close(self):
        self.thread.join(timeout=30)
        self.listening.close()
        for s in self.sockets:
            s.close()


def new_process(sidecar, tmp_path, port: int, targets) -> Sidecar:
    sc = sidecar("host-new", tunnel_port=port, admin_port=free_port(), targets=targets)
    sc.argv.append("--takeover")
    return sc


@tcp_only
@pytest.mark.parametrize("case", ["not-bpf", "layout", "cgroup", "mode-off"])
def test_redirected_legs_a_new_process_cannot_adopt_end_the_takeover_before_it_serves(sidecar, backend, tmp_path,
                                                                                     case):
    # What LOCAL_LEGS brings is checked before anything is loaded on it:
    # descriptors that are no BPF link and maps, a layout or a cgroup other
    # than this build's and configuration's, or a configuration without the
    # mode. The new process refuses, never serves; the old one is told why.
    require_root_and((), "local legs' takeover (cgroup v2)")
    mount = next((line.split()[1] for line in open("/proc/mounts") if line.split()[2:3] == ["cgroup2"]), None)
    if mount is None:
        pytest.skip("needs cgroup v2")
    echo = backend(EchoServer())
    port = free_port()
    shared = (REPO / "proxy" / "local" / "bpf" / "local_redirect_shared.h").read_text()
    this_layout = int(re.search(r"#define LOCAL_REDIRECT_LAYOUT (\d+)", shared).group(1))
    layout = 999 if case == "layout" else this_layout
    cgroup = mount + ("/elsewhere" if case == "cgroup" else "")
    # As many descriptors as LOCAL_LEGS carries (three links, nine maps), none of them BPF.
    junk = [open("/dev/null", "rb") for _ in range(12)]
    old = FakeOldProcess(port, image(), on_adopted=None, legs=(layout.to_bytes(4, "little") + cgroup.encode(), junk))
    lines = [] if case == "mode-off" else ["local_legs:", "  redirect: true", f"  cgroup: {mount}"]
    new = sidecar("host-new", tunnel_port=port, admin_port=free_port(), targets=[echo.endpoint], extra_lines=lines)
    new.argv.append("--takeover")
    new.start(wait=False)
    assert new.wait(timeout=20) == 1
    old.close()
    for f in junk:
        f.close()
    assert old.error is None, old.error
    assert not old.adopted
    log = new.log_text()
    assert "event=takeover_failed" in log and "event=ready" not in log, log
    expected = {"not-bpf": "is not a BPF link", "layout": f"layout 999, this build's programs use layout {this_layout}",
                "cgroup": "redirects in the cgroup " + cgroup, "mode-off": "this configuration does not"}[case]
    assert expected in log, log
    assert expected in old.answer.decode(), old.answer


@tcp_only
@pytest.mark.parametrize("answer", [REFUSED, None])
def test_a_new_process_whose_old_one_does_not_let_go_never_serves(sidecar, backend, tmp_path, answer):
    echo = backend(EchoServer())
    port = free_port()
    old = FakeOldProcess(port, image(), on_adopted=answer)
    new = new_process(sidecar, tmp_path, port, [echo.endpoint])
    new.start(wait=False)
    assert new.wait(timeout=20) == 1
    old.close()
    assert old.error is None, old.error
    assert old.hello_features == COMMIT | LOCAL_LEGS_ADOPTED and old.adopted
    log = new.log_text()
    assert "event=takeover_failed" in log and "did not let go" in log, log
    assert "event=ready" not in log and "event=takeover_adopted" not in log


@tcp_only
def test_a_new_process_serves_once_released_and_keeps_the_channel(sidecar, backend, tmp_path):
    echo = backend(EchoServer())
    port = free_port()
    old = FakeOldProcess(port, image(), on_adopted=RELEASED)
    new = new_process(sidecar, tmp_path, port, [echo.endpoint])
    new.start()
    old.close()  # our copy of the channel's socket closes: the new process holds it now
    assert old.error is None, old.error
    assert "event=takeover_done" in new.log_text()
    # The next takeover reaches the new process through the socket it got.
    stalled = StalledTakeover(port, features=COMMIT)
    assert stalled.take_image() > 0
    creds, fds = stalled.welcome
    assert creds[0] == new.pid and creds[1] == os.geteuid() and fds == 1
    stalled.vanish()
    assert new.wait_log("event=takeover_failed", 10), new.tail()
    assert new.running()


@tcp_only
def test_a_forged_image_is_checked_against_its_sockets(sidecar, backend, tmp_path):
    """An old process (of our own user) whose image names a unix listener at
    a root-owned file, backed by a TCP socket: the new process refuses the
    takeover before building anything; the file stays."""
    echo = backend(EchoServer())
    precious = root_owned_file(tmp_path)
    lure = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lure.bind(("127.0.0.1", 0))
    lure.listen(1)
    port = free_port()
    old = FakeOldProcess(port, image(listeners=[(f"unix:{precious}", [0])], fd_count=1), sockets=[lure],
                         on_adopted=RELEASED)
    new = new_process(sidecar, tmp_path, port, [echo.endpoint])
    new.start(wait=False)
    assert new.wait(timeout=20) == 1
    old.close()
    log = new.log_text()
    assert "its sockets do not match its image" in log and f"listener unix:{precious}" in log, log
    assert not old.adopted
    assert open(precious).read() == "precious\n"


@tcp_only
@pytest.mark.deadline(60)
def test_an_adopted_sent_after_the_old_process_gave_up_gets_no_release(pair, backend):
    """Split brain, from the old side: a new process that is slow to answer
    (here: not before the old one gives up, a quarter of resume_timeout_ms) is refused; the old one
    carries on alone, and never tells the late one it may serve."""
    p, s = pair_with_a_stream(pair, backend)
    try:
        late = StalledTakeover(p.a.tunnel_port, features=COMMIT)
        assert late.take_image() > 0
        assert p.a.wait_log("event=takeover_failed", 20), p.a.tail()
        kind, body = late.adopt()
        assert kind in (0, REFUSED) and kind != RELEASED, (kind, body)
        late.vanish()
        s.sendall(b"after")
        assert recv_exact(s, 5, time.monotonic() + 10) == b"after"
    finally:
        s.close()
    echo_once(p.address("e"), b"new")
    assert p.a.running() and "event=taken_over" not in p.a.log_text()


@tcp_only
def test_an_image_that_announces_gigabytes_costs_only_what_arrives(sidecar, backend, tmp_path):
    """A header may claim up to 8 GiB; the payload is read as it comes, so
    the new process neither allocates nor touches gigabytes for bytes that
    never come: it fails when the other end closes."""
    echo = backend(EchoServer())
    port = free_port()
    old = FakeOldProcess(port, b"\x02\x00\x00\x00" + b"\0" * 60, announce=6 << 30)
    new = new_process(sidecar, tmp_path, port, [echo.endpoint])
    new.start(wait=False)
    peak = 0
    deadline = time.monotonic() + 15
    while new.running() and time.monotonic() < deadline:
        try:
            peak = max(peak, new.rss_kib())
        except (OSError, ValueError):
            break
        time.sleep(0.05)
    assert new.wait(timeout=20) == 1
    old.close()
    assert "closed the takeover channel" in new.log_text(), new.tail()
    assert peak < 256 * 1024, f"the new process grew to {peak} KiB for an image that never came"
