# SPDX-License-Identifier: Apache-2.0
"""Refusals, a far-side crash, and untrusted input on the tunnel port."""

from __future__ import annotations

import socket
import time

from backends import EchoServer, prng_bytes
from clients import RESET_ERRORS, connect, echo_roundtrip, recv_exact, send_all, wait_closed
from clients import free_port
from conftest import tcp_only


def _refused_line(b, reason: str, since: int, timeout: float = 5.0):
    return b.wait_log(lambda l: "event=stream_refused" in l and f"reason={reason}" in l,
                      timeout=timeout, since=since)


def _client_sees_close(address, timeout: float):
    """Connects, writes a little, and waits for EOF or reset.  Returns (how, seconds
    from the start of connect)."""
    t0 = time.monotonic()
    try:
        sock = connect(address, timeout=timeout)
    except RESET_ERRORS:
        # The refusal's RST can land before connect() returns to us (loaded host).
        return "reset", time.monotonic() - t0
    try:
        try:
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        except RESET_ERRORS:
            return "reset", time.monotonic() - t0
        how, _, got = wait_closed(sock, timeout=timeout)
        assert got == 0, f"refused stream delivered {got} bytes"
        return how, time.monotonic() - t0
    finally:
        sock.close()


def test_refused_target_closes_client_within_1s_and_logs_connect_failed(pair):
    dead_port = free_port()  # on the allowlist, but nobody listens there
    target = f"tcp:127.0.0.1:{dead_port}"
    p = pair([{"name": "dead", "target": target}], [target])
    mark = p.b.log_size()
    how, elapsed = _client_sees_close(p.address("dead"), timeout=5)
    assert how == "reset", f"a refused target reached the client as {how}, not a reset"
    assert elapsed < 1.0, f"client saw {how} only {elapsed:.2f}s after connecting"
    line = _refused_line(p.b, "connect-failed", mark)
    assert line, "host-b logged no event=stream_refused reason=connect-failed"


def test_target_not_on_allowlist_is_refused_and_logged_not_allowed(pair, backend):
    echo = backend(EchoServer())
    other = f"tcp:127.0.0.1:{free_port()}"  # host-b allows only this one
    p = pair([{"name": "forbidden", "target": echo.endpoint}], [other])
    mark = p.b.log_size()
    how, elapsed = _client_sees_close(p.address("forbidden"), timeout=5)
    assert how == "reset", f"a not-allowed target reached the client as {how}, not a reset"
    assert elapsed < 2.0, f"client saw {how} only {elapsed:.2f}s after connecting"
    line = _refused_line(p.b, "not-allowed", mark)
    assert line, "host-b logged no event=stream_refused reason=not-allowed"
    time.sleep(0.2)
    assert echo.accepted == 0, "host-b connected to a target that is not on its allowlist"


def test_far_side_sigkill_then_restart_serves_new_streams_within_5s(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    payload = prng_bytes(61, 64 * 1024)
    assert echo_roundtrip(p.address("echo"), payload, timeout=10) == payload

    p.b.kill9()
    assert p.b.proc.returncode == -9
    p.b.restart()  # same config, same tunnel port; waits for event=ready
    t_ready = time.monotonic()

    attempts, last_err = 0, None
    ok = False
    for attempts in range(1, 201):  # bounded in count and (below) in time
        if time.monotonic() - t_ready > 8:
            break
        try:
            if echo_roundtrip(p.address("echo"), payload, timeout=1.5) == payload:
                ok = True
                break
            last_err = "echo mismatch"
        except (OSError, EOFError, TimeoutError) as e:
            last_err = f"{type(e).__name__}: {e}"
        time.sleep(0.1)
    elapsed = time.monotonic() - t_ready
    assert ok, f"no echo round trip after the restart ({attempts} attempts, last: {last_err})"
    assert elapsed < 5.0, f"first good round trip {elapsed:.2f}s after host-b was ready"
    assert p.a.running(), "host-a died while its peer was down"


@tcp_only
def test_malformed_frame_ends_only_that_session(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    addr = p.address("echo")

    # A long-lived stream through the real session, used before and after.
    live = connect(addr, timeout=10)
    try:
        deadline = time.monotonic() + 30
        first = prng_bytes(71, 32 * 1024)
        send_all(live, first, deadline)
        assert recv_exact(live, len(first), deadline) == first

        mark = p.b.log_size()
        raw = connect(("127.0.0.1", p.b.tunnel_port), timeout=5)
        try:
            try:
                raw.sendall(b"\xff" * 64)
            except RESET_ERRORS:
                pass
            how, _, _ = wait_closed(raw, timeout=5)  # host-b must drop that session
        finally:
            raw.close()
        assert how in ("eof", "reset")

        line = p.b.wait_log(
            lambda l: "session" in l and ("malformed" in l or "protocol" in l),
            timeout=5, since=mark)
        assert line, "host-b logged no session error mentioning 'malformed' or 'protocol'"
        assert p.b.running(), "host-b died on a malformed frame"

        # The existing stream still works...
        second = prng_bytes(72, 32 * 1024)
        send_all(live, second, deadline)
        assert recv_exact(live, len(second), deadline) == second
        live.shutdown(socket.SHUT_WR)
        how, _, extra = wait_closed(live, timeout=5)
        assert how == "eof" and extra == 0
    finally:
        live.close()

    # ...and so do new ones.
    payload = prng_bytes(73, 100 * 1024)
    assert echo_roundtrip(addr, payload, timeout=10) == payload
    assert p.b.running()
