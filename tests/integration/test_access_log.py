# SPDX-License-Identifier: Apache-2.0
"""The access log (docs/logging.md, "Access log"): one line per application
connection when it ends, on both sidecars, saying who, where, how many
bytes, how long and how it ended. Real sidecars and sockets:

- by default in the process log (event=access): a clean echo on both sides,
  a client's reset, a target that refuses;
- into access_log.path as JSON, reopened on SIGUSR1 after the file moved
  (as logrotate does), and a reload that turns it off;
- bounded: past lines_per_second lines are counted, not written, and the
  next line says how many were left out.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import struct
import time

from admin_client import admin_request, parse_metrics
from backends import EchoServer
from clients import connect, echo_roundtrip, free_port, how_stream_ends, recv_exact, send_all, wait_for
from conftest import TEST_TRANSPORT


def access_lines(sc) -> list[dict]:
    """The event=access lines of `sc`'s process log, as dicts."""
    out = []
    for line in sc.log_text().splitlines():
        if " event=access " not in line:
            continue
        out.append(dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', line)))
        out[-1] = {k: v.strip('"') for k, v in out[-1].items()}
    return out


def wait_lines(sc, n: int, what: str) -> list[dict]:
    wait_for(lambda: len(access_lines(sc)) >= n, timeout=10, what=what)
    return access_lines(sc)


def written(sc) -> dict:
    m = parse_metrics(admin_request(sc.admin_port, "/metrics").text)
    return {r: m.get(f'rdmagw_access_log_lines_total{{result="{r}"}}', 0) for r in ("written", "suppressed")}


def test_a_clean_echo_is_one_line_on_each_side(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint])
    payload = b"x" * 100_000
    s = connect(p.address("echo"), timeout=10)
    client = "127.0.0.1:%d" % s.getsockname()[1]
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    s.close()
    assert got == payload
    (a,) = wait_lines(p.a, 1, "host-a's access line")
    (b,) = wait_lines(p.b, 1, "host-b's access line")
    transport = "tcp" if TEST_TRANSPORT == "tcp" else "rdma"
    assert a["direction"] == "outbound" and a["listener"] == "echo" and a["client"] == client, a
    assert a["peer"] == "host-b" and a["target"] == echo.endpoint and a["transport"] == transport, a
    assert a["bytes_from_app"] == a["bytes_to_app"] == str(len(payload)), a
    assert a["end"] == "close" and "by" not in a and int(a["duration_ms"]) >= 0, a
    assert b["direction"] == "inbound" and b["peer"] == "host-a" and b["target"] == echo.endpoint, b
    assert b["bytes_from_app"] == b["bytes_to_app"] == str(len(payload)) and b["end"] == "close", b
    assert b["transport"] == transport and b["remote"], b  # the peer's end of the session
    # One connection, named alike on both sides, with the client it came from.
    assert re.fullmatch(r"[0-9a-f]{32}", a["connection"]) and b["connection"] == a["connection"], (a, b)
    assert b["client"] == client, b
    # When it began, and its phases in microseconds: the wait for a session
    # (outbound), the target's connect (inbound), the first byte to each
    # side's application; none past the whole.
    for line in (a, b):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["start"]), line
        assert int(line["duration_us"]) >= int(line["first_byte_us"]), line
    assert 0 <= int(a["session_wait_us"]) <= int(a["duration_us"]) and "connect_us" not in a, a
    assert 0 <= int(b["connect_us"]) <= int(b["first_byte_us"]) and "session_wait_us" not in b, b
    assert written(p.a) == {"written": 1, "suppressed": 0}


def test_a_client_reset_and_a_refused_target_say_who_ended_them(pair, backend):
    echo = backend(EchoServer())
    closed = f"tcp:127.0.0.1:{free_port()}"  # allowed, nothing listens
    p = pair([{"name": "echo", "target": echo.endpoint}, {"name": "closed", "target": closed}],
             [echo.endpoint, closed])
    # The client resets mid-stream (SO_LINGER 0).
    s = connect(p.address("echo"), timeout=10)
    s.sendall(b"y" * 5000)
    got = b""
    while len(got) < 5000:
        got += s.recv(65536)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    (a,) = wait_lines(p.a, 1, "host-a's line for the reset")
    assert a["end"] == "reset" and a["by"] == "client" and a["reason"].startswith("local-reset"), a
    assert a["bytes_from_app"] == "5000" and a["bytes_to_app"] == "5000", a
    (b,) = wait_lines(p.b, 1, "host-b's line for the reset")
    assert b["end"] == "reset" and b["by"] == "peer" and b["reason"] == "cancel", b
    # The target refuses: the far side says so, and the client's side that
    # the peer ended it.
    assert how_stream_ends(p.address("closed"), b"hello", timeout=10) == "reset"
    lines = wait_lines(p.b, 2, "host-b's line for the refused target")
    assert lines[1]["by"] == "target" and lines[1]["target"] == closed, lines[1]
    assert lines[1]["reason"].startswith("connect-failed") and "refused" in lines[1]["reason"], lines[1]
    lines = wait_lines(p.a, 2, "host-a's line for the refused target")
    assert lines[1]["by"] == "peer" and lines[1]["reason"] == "refused", lines[1]


def test_json_file_reopened_on_sigusr1_and_a_reload_turns_it_off(pair, backend, tmp_path):
    echo = backend(EchoServer())
    path = tmp_path / "access.json"
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint],
             a_lines=["access_log:", f"  path: {path}", "  format: json"])
    assert echo_roundtrip(p.address("echo"), b"first", timeout=10) == b"first"
    wait_for(lambda: path.exists() and path.read_text().count("\n") == 1, timeout=10, what="the first JSON line")
    first = json.loads(path.read_text())
    assert first["event"] == "access" and first["node"] == "host-a" and first["direction"] == "outbound"
    assert first["bytes_from_app"] == 5 and first["end"] == "close" and first["time"].endswith("Z"), first
    assert "event=access" not in p.a.log_text(), "with a path, lines go to the file only"
    # logrotate: move the file, then SIGUSR1.
    rotated = tmp_path / "access.json.1"
    path.rename(rotated)
    p.a.send_signal(signal.SIGUSR1)
    assert p.a.wait_log("event=access_log_reopened", 5), p.a.tail()
    assert echo_roundtrip(p.address("echo"), b"second", timeout=10) == b"second"
    wait_for(lambda: path.exists() and path.read_text().count("\n") == 1, timeout=10, what="a line in the new file")
    assert json.loads(path.read_text())["bytes_from_app"] == 6
    assert rotated.read_text().count("\n") == 1, "the moved file got nothing more"
    # A reload turns the access log off: no line for the next connection.
    text = p.a.config_path.read_text().replace(f"  path: {path}\n", f"  path: {path}\n  enabled: false\n")
    p.a.config_path.write_text(text)
    r = admin_request(p.a.admin_port, "/reload", "POST")
    assert r.status == 200 and any("access_log.enabled" in c for c in r.json()["changes"]), r.text
    assert echo_roundtrip(p.address("echo"), b"third", timeout=10) == b"third"
    time.sleep(0.5)
    assert path.read_text().count("\n") == 1
    assert written(p.a)["written"] == 2


def test_past_lines_per_second_lines_are_counted_and_the_next_says_how_many(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], workers=1,
             a_lines=["access_log: {lines_per_second: 1}"])
    for i in range(6):
        assert echo_roundtrip(p.address("echo"), b"n%d" % i, timeout=10) == b"n%d" % i
    wait_for(lambda: sum(written(p.a).values()) == 6, timeout=10, what="six connections counted")
    counts = written(p.a)
    assert counts["written"] >= 1 and counts["suppressed"] >= 3, counts  # 1 a second, a burst of 1
    time.sleep(1.2)
    assert echo_roundtrip(p.address("echo"), b"last", timeout=10) == b"last"
    lines = wait_lines(p.a, counts["written"] + 1, "the line after the pause")
    assert int(lines[-1].get("suppressed", 0)) == counts["suppressed"], lines[-1]


def test_refused_streams_and_connections_have_a_line_too(pair, backend):
    """A stream host-b refuses (its target is not in targets) and a
    connection a listener refuses at accept (max_connections) each get an
    access line, with the same fields as any other."""
    echo = backend(EchoServer())
    unlisted = f"tcp:127.0.0.1:{free_port()}"
    p = pair([{"name": "echo", "target": echo.endpoint, "max_connections": 1},
              {"name": "unlisted", "target": unlisted}], [echo.endpoint])
    # Not allowed at host-b: both sides' lines name the one connection.
    assert how_stream_ends(p.address("unlisted"), b"hello", timeout=10) == "reset"
    (b,) = wait_lines(p.b, 1, "host-b's line for the refused stream")
    assert b["direction"] == "inbound" and b["end"] == "reset" and b["by"] == "rdmagw", b
    assert b["reason"] == "not-allowed" and b["target"] == unlisted and b["start"] and b["remote"], b
    (a,) = wait_lines(p.a, 1, "host-a's line for the refused stream")
    assert a["connection"] == b["connection"] and b["client"] == a["client"], (a, b)
    assert a["end"] == "reset" and a["by"] == "peer" and a["reason"] == "not-allowed", a
    # Past max_connections at host-a's listener: reset at accept, with a line.
    held = connect(p.address("echo"), timeout=10)
    try:
        deadline = time.monotonic() + 10
        send_all(held, b"held", deadline)
        assert recv_exact(held, 4, deadline) == b"held"  # the one place is taken
        assert how_stream_ends(p.address("echo"), b"x", timeout=10) == "reset"
    finally:
        held.close()
    lines = wait_lines(p.a, 2, "host-a's line for the connection past max_connections")
    refused = [l for l in lines if l.get("reason") == "limit: max_connections"]
    assert refused and refused[0]["listener"] == "echo" and refused[0]["by"] == "rdmagw", lines
    assert refused[0]["client"].startswith("127.0.0.1:") and "connection" not in refused[0], refused
