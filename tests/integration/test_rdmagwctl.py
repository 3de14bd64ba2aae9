# SPDX-License-Identifier: Apache-2.0
"""rdmagwctl, the admin endpoint's command-line client, against a real pair:
status, peers, streams (tables and --json), top, check, and an unreachable
endpoint.

Binary: $RDMAGWCTL_BIN, else rdmagwctl next to the rdmagw binary (build/bin/).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from admin_client import admin_json
from clients import connect, echo_roundtrip, free_port, recv_exact, send_all
from conftest import RDMAGWCTL_BIN, TEST_TRANSPORT, check_sanitizers, echo_pair, render_config

ERROR_LINE = re.compile(r"^(?P<file>.+):(?P<line>\d+):(?P<col>\d+): (?P<key>\S+): (?P<message>.+)$")
ADMIN_LINE = re.compile(r'^admin:\s*"?(?P<address>[^"\s]+)"?\s*$', re.M)
ADMIN_UP_TIMEOUT_S = 10.0

# What `transport` says for the sessions of a pair on this run's transport.
EXPECTED_TRANSPORT = "tcp" if TEST_TRANSPORT == "tcp" else "rdma"


@pytest.fixture(scope="session")
def rdmagwctl_bin(rdmagw_bin) -> str:
    """Built with rdmagw, so missing it next to a built rdmagw is a failure."""
    path = RDMAGWCTL_BIN
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"rdmagwctl not found at {path} (it is built with rdmagw; or set RDMAGWCTL_BIN)")
    return path


def run_ctl(binary: str, *args: str, env: dict | None = None, timeout: float = 30):
    full_env = dict(os.environ)
    full_env.pop("RDMAGW_ADMIN", None)  # tests say where the endpoint is
    full_env.update(env or {})
    r = subprocess.run([binary, *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                       env=full_env)
    out, err = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    check_sanitizers(" ".join([binary, *args]), out + err, r.returncode)
    return r.returncode, out, err


def admin_address(sidecar) -> str:
    """The `admin:` address conftest wrote into the sidecar's config."""
    m = ADMIN_LINE.search(sidecar.config_path.read_text())
    assert m, f"no admin: line in {sidecar.config_path}"
    return m.group("address")


def ctl_until(binary: str, sidecar, *args: str, accept=lambda rc, out: rc == 0,
              timeout: float = ADMIN_UP_TIMEOUT_S):
    """Runs `rdmagwctl --admin <sidecar's> ARGS` until `accept(rc, stdout)`:
    the admin thread starts alongside the workers, and counters are read a
    moment stale. Returns the last (rc, out, err); the caller asserts."""
    address = admin_address(sidecar)
    deadline = time.monotonic() + timeout
    result = (None, "", "")
    for _ in range(1000):
        result = run_ctl(binary, "--admin", address, *args)
        if accept(result[0], result[1]) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    return result


def table_rows(out: str, first_column: str) -> list[list[str]]:
    """The rows of the table whose header starts with `first_column`, split on
    runs of two or more spaces (cells themselves hold at most one). The table
    ends at a blank line or the streams view's "showing ..." line."""
    rows, inside = [], False
    for line in out.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == first_column:
            inside = True
            continue
        if inside:
            if not line.strip() or line.startswith("showing "):
                break
            rows.append(cells)
    return rows


# ---------------------------------------------------------------------------
# status


def test_status_names_the_listener_and_the_peer(rdmagwctl_bin, pair, backend):
    p, _ = echo_pair(pair, backend, "ctl-echo")
    assert echo_roundtrip(p.address("ctl-echo"), b"ping") == b"ping"
    rc, out, err = ctl_until(rdmagwctl_bin, p.a, "status",
                             accept=lambda rc, out: rc == 0 and "host-b" in out)
    assert rc == 0, f"rc={rc}\n{out}{err}"
    assert "host-a" in out, f"node name missing from status:\n{out}"
    listeners = table_rows(out, "NAME")
    assert any(row[0] == "ctl-echo" and row[1] == p.listeners["ctl-echo"]["listen"] for row in listeners), (
        f"no row for listener ctl-echo with its address in:\n{out}")
    assert "host-b" in out, f"peer host-b missing from status:\n{out}"
    assert re.search(r"^state\s+ready", out, re.M), f"not reported ready:\n{out}"


def test_status_json_has_the_documented_keys(rdmagwctl_bin, pair, backend):
    p, _ = echo_pair(pair, backend, "ctl-echo")
    assert echo_roundtrip(p.address("ctl-echo"), b"x" * 1000) == b"x" * 1000

    def counted(rc, out):
        if rc != 0:
            return False
        stats = json.loads(out)
        return any(l.get("name") == "ctl-echo" and l.get("accepted", 0) >= 1 and l.get("bytes_received", 0) >= 1000
                   and l.get("bytes_sent", 0) >= 1000 for l in stats.get("listeners", []))

    rc, out, err = ctl_until(rdmagwctl_bin, p.a, "status", "--json", accept=counted)
    assert rc == 0, f"rc={rc}\n{out}{err}"
    stats = json.loads(out)
    for key in ("version", "node", "uptime_seconds", "ready", "draining", "workers", "transport",
                "transport_reason", "io_uring", "config", "listeners", "peers", "streams", "rdma", "latency"):
        assert key in stats, f"/stats answer lacks {key!r}: {sorted(stats)}"
    assert stats["node"] == "host-a"
    assert stats["ready"] is True and stats["draining"] is False
    assert stats["workers"] == 2
    for key in ("file", "generation", "reloads", "reload_failures", "last_reload"):
        assert key in stats["config"], f"config lacks {key!r}: {stats['config']}"
    assert stats["config"]["file"].endswith("host-a.yaml"), stats["config"]
    (listener,) = [l for l in stats["listeners"] if l["name"] == "ctl-echo"]
    for key in ("listen", "configured", "accepted", "active", "bytes_received", "bytes_sent"):
        assert key in listener, f"listener lacks {key!r}: {listener}"
    assert listener["listen"] == p.listeners["ctl-echo"]["listen"]
    assert listener["accepted"] >= 1 and listener["bytes_received"] >= 1000 and listener["bytes_sent"] >= 1000, listener
    (peer,) = [x for x in stats["peers"] if x["name"] == "host-b"]
    for key in ("sessions_tcp", "sessions_rdma", "streams_opened", "bytes_sent", "bytes_received",
                "credit_stalls", "reconnects"):
        assert key in peer, f"peer lacks {key!r}: {peer}"
    for key in ("opened_outbound", "opened_inbound", "active", "failed"):
        assert key in stats["streams"], f"streams lacks {key!r}: {stats['streams']}"
    assert stats["streams"]["opened_outbound"] >= 1
    for reason in ("no-session", "not-allowed", "target-refused", "target-unreachable", "peer-gone", "reset",
                   "resource", "protocol", "shutdown", "rejected"):
        assert reason in stats["streams"]["failed"], f"streams.failed lacks {reason!r}"
    for key in ("stream_open", "target_connect", "session_rtt"):
        assert key in stats["latency"], f"latency lacks {key!r}: {stats['latency']}"


# ---------------------------------------------------------------------------
# peers


def test_config_prints_the_whole_configuration_in_effect(rdmagwctl_bin, pair, backend):
    p, _ = echo_pair(pair, backend, "ctl-echo")
    for args in ((), ("--json",)):
        rc, out, err = run_ctl(rdmagwctl_bin, "--admin", f"127.0.0.1:{p.a.admin_port}", *args, "config")
        assert rc == 0, f"rc={rc}\n{out}{err}"
        assert json.loads(out) == admin_json(p.a.admin_port, "/config")
    shown = json.loads(out)
    assert shown["node"] == "host-a" and shown["listeners"][0]["name"] == "ctl-echo"
    # The key file by its path, never its content.
    key_file = shown["tunnel"]["auth"]["key_files"][0]
    assert shown["tunnel"]["auth"]["mode"] == "psk" and key_file.startswith("/")
    assert open(key_file).read().strip() not in out


def test_peers_shows_the_peer_and_its_transport(rdmagwctl_bin, pair, backend):
    p, _ = echo_pair(pair, backend, "ctl-echo")
    assert echo_roundtrip(p.address("ctl-echo"), b"ping") == b"ping"  # a session is up

    def session_row(rc, out):
        return rc == 0 and any(row[0] == "host-b" and row[1] == "open" for row in table_rows(out, "PEER"))

    rc, out, err = ctl_until(rdmagwctl_bin, p.a, "peers", accept=session_row)
    assert rc == 0, f"rc={rc}\n{out}{err}"
    rows = [row for row in table_rows(out, "PEER") if row[0] == "host-b"]
    assert rows, f"no row for peer host-b in:\n{out}"
    assert any(row[1] == "open" and row[2] == EXPECTED_TRANSPORT and row[3] == "dialer" for row in rows), (
        f"no open {EXPECTED_TRANSPORT} dialer session to host-b in:\n{out}")

    def listed(rc, out):
        return rc == 0 and any(x.get("name") == "host-b" for x in json.loads(out).get("peers", []))

    rc, out, err = ctl_until(rdmagwctl_bin, p.a, "peers", "--json", accept=listed)
    assert rc == 0, f"rc={rc}\n{out}{err}"
    (peer,) = [x for x in json.loads(out)["peers"] if x["name"] == "host-b"]
    assert peer["configured"] is True and peer["state"] == "up", peer
    assert peer["sessions"] and all(s["transport"] == EXPECTED_TRANSPORT for s in peer["sessions"]), peer


# ---------------------------------------------------------------------------
# streams


def test_streams_shows_a_held_connection_on_both_sides(rdmagwctl_bin, pair, backend):
    p, echo = echo_pair(pair, backend, "ctl-echo")
    sock = connect(p.address("ctl-echo"))
    client = "127.0.0.1:%d" % sock.getsockname()[1]
    try:
        deadline = time.monotonic() + 10
        send_all(sock, b"hold", deadline)
        assert recv_exact(sock, 4, deadline) == b"hold"  # the stream is open end to end

        def one_open(rc, out):
            return rc == 0 and "showing 1-1 of 1" in out and " open" in out

        rc, out, err = ctl_until(rdmagwctl_bin, p.a, "streams", accept=one_open)
        assert rc == 0, f"rc={rc}\n{out}{err}"
        rows = table_rows(out, "SIDE")
        assert len(rows) == 1, f"expected one stream:\n{out}"
        side, listener, peer, shown_client, target = rows[0][:5]
        assert (side, listener, peer, shown_client, target) == ("client", "ctl-echo", "host-b", client,
                                                                echo.endpoint), out
        assert rows[0][-3:-1] == ["open", "app-data"], out  # state, and it waits for the client to write
        connection = rows[0][-1]
        assert re.fullmatch(r"[0-9a-f]{32}", connection), out
        assert "showing 1-1 of 1" in out, out

        # The far side names the same connection, and the client it came from.
        rc, out, err = ctl_until(rdmagwctl_bin, p.b, "streams", accept=one_open)
        assert rc == 0, f"rc={rc}\n{out}{err}"
        rows = table_rows(out, "SIDE")
        assert len(rows) == 1 and rows[0][0] == "target" and echo.endpoint in rows[0], (
            f"host-b does not list the target side of the stream:\n{out}")
        assert rows[0][-1] == connection and client in rows[0], (
            f"host-b does not name connection {connection} from {client}:\n{out}")

        def bytes_counted(rc, out):
            streams = json.loads(out)["streams"] if rc == 0 else []
            return len(streams) == 1 and streams[0].get("bytes_to_app") == 4

        rc, out, err = ctl_until(rdmagwctl_bin, p.a, "streams", "--json", accept=bytes_counted)
        assert rc == 0, f"rc={rc}\n{out}{err}"
        page = json.loads(out)
        assert page["total"] == 1 and page["offset"] == 0, page
        (stream,) = page["streams"]
        assert stream["side"] == "client" and stream["listener"] == "ctl-echo" and stream["peer"] == "host-b"
        assert stream["target"] == echo.endpoint and stream["state"] == "open"
        assert stream["bytes_from_app"] == 4 and stream["bytes_to_app"] == 4, stream
        assert stream["connection"] == connection and stream["client"] == client, stream
    finally:
        sock.close()

    rc, out, err = ctl_until(rdmagwctl_bin, p.a, "streams", accept=lambda rc, out: "no active streams" in out)
    assert rc == 0 and "no active streams" in out, f"the closed stream is still listed (rc={rc}):\n{out}{err}"


# ---------------------------------------------------------------------------
# top


@pytest.mark.deadline(60)
def test_top_count_2_prints_two_tables(rdmagwctl_bin, pair, backend):
    p, _ = echo_pair(pair, backend, "ctl-echo")
    ctl_until(rdmagwctl_bin, p.a, "status")  # the admin endpoint is up
    rc, out, err = run_ctl(rdmagwctl_bin, "--admin", admin_address(p.a), "top", "--count", "2",
                           "--interval", "0.5")
    assert rc == 0, f"rc={rc}\n{out}{err}"
    headers = [l for l in out.splitlines() if l.startswith("LISTENER ")]
    assert len(headers) == 2, f"expected two listener tables:\n{out}"
    rows = [l for l in out.splitlines() if l.startswith("ctl-echo ")]
    assert len(rows) == 2, f"expected the listener once per table:\n{out}"
    assert all(re.search(r"/s\b", r) for r in rows), f"no rates in:\n{out}"
    assert "\x1b[" not in out, "ANSI screen control in output that is not a terminal"


# ---------------------------------------------------------------------------
# hostile strings: a fake admin endpoint serving canned JSON

# A peer's node name (sent in its tunnel handshake) or a pod name that would
# retitle the terminal (OSC ... BEL), clear it (CSI 2J), return the cursor
# (CR), start a line (LF), with DEL and CSI as a C1 control (U+009B).
HOSTILE = "x\x1b]0;pwned\x07\x1b[2J\rfake\nline\x7f\u009b31m back\\slash caf\u00e9"
# How rdmagwctl shows it (docs/admin.md, rdmagwctl).
HOSTILE_SHOWN = r"x\x1b]0;pwned\x07\x1b[2J\rfake\nline\x7f\u009b31m back\\slash caf" + "\u00e9"
# What a terminal could act on: C0 controls but LF, DEL, C1 controls.
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f\x80-\x9f]")


def hostile_answers() -> dict[str, dict]:
    h = HOSTILE
    return {
        "/stats": {
            "version": h, "commit": h, "node": h, "uptime_seconds": 5, "ready": True, "draining": False,
            "workers": 1, "transport": h, "transport_reason": h, "io_uring": h,
            "config": {"file": h, "generation": 2, "reloads": 1, "reload_failures": 0,
                       "last_reload": {"ok": True, "unix_time": 5, "changes": [h], "errors": []}},
            "listeners": [{"name": h, "listen": h, "configured": True, "accepted": 1, "active": 1,
                           "bytes_received": 1, "bytes_sent": 1}],
            "peers": [{"name": h, "sessions_tcp": 1, "sessions_rdma": 0, "streams_opened": 1,
                       "bytes_sent": 1, "bytes_received": 1, "credit_stalls": 0, "reconnects": 0}],
            "streams": {"opened_outbound": 1, "opened_inbound": 0, "active": 1, "failed": {h: 1}},
            "latency": {h: {"count": 1, "sum_seconds": 0.001}}},
        "/peers": {"peers": [
            {"name": h, "configured": False, "transport": "tcp", "state": "up", "last_error": h,
             "waiting_streams": 0, "sessions": [
                 {"worker": 0, "role": "acceptor", "transport": "tcp", "state": h, "remote_address": h,
                  "peer_node": h, "rtt_us": 41, "streams": 1, "bytes_sent": 1, "bytes_received": 1}]},
            {"name": h, "configured": True, "transport": "tcp", "state": "down", "last_error": h,
             "transport_reason": h, "last_close": h, "sessions": []}]},
        "/streams": {"total": 1, "offset": 0, "limit": 100, "streams": [
            {"worker": 0, "side": h, "listener": h, "peer": h, "target": h, "stream_id": 1, "age_ms": 5,
             "bytes_from_app": 1, "bytes_to_app": 1, "state": h, "waiting_for": h}]},
        "/services": {
            "services": {"file": h, "loaded": True, "services": 1, "endpoints": 1, "error": h,
                         "api": {"reachable": False, "since": h, "error": h}},
            "table": [{"namespace": h, "name": h, "cluster_ips": [h], "ports": [
                {"name": h, "port": 6379, "endpoints": [
                    {"address": h, "port": 6379, "state": h, "rdmagw": True, "pod": h, "node": h,
                     "streams": 1}]}]}]},
    }


@pytest.fixture
def hostile_admin():
    """An HTTP server on 127.0.0.1 answering like rdmagw's admin endpoint,
    every string in its answers hostile. JSON as a server may write it: the
    controls below 0x20 escaped, DEL and C1 as raw UTF-8. /ready answers 503
    with a hostile reason. Yields "127.0.0.1:PORT"."""
    answers = hostile_answers()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/ready":
                self.answer(503, HOSTILE.encode() + b"\xff\xfe\n", "text/plain")
            elif path in answers:
                self.answer(200, json.dumps(answers[path], ensure_ascii=False).encode(), "application/json")
            else:
                self.answer(404, b"not found\n", "text/plain")

        def answer(self, status: int, body: bytes, content_type: str):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run_ctl_bytes(binary: str, *args: str):
    """run_ctl, with stdout and stderr as the bytes printed."""
    env = dict(os.environ)
    env.pop("RDMAGW_ADMIN", None)
    r = subprocess.run([binary, *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=30, env=env)
    check_sanitizers(" ".join([binary, *args]), (r.stdout + r.stderr).decode("utf-8", "replace"), r.returncode)
    return r.returncode, r.stdout, r.stderr


def assert_no_raw_control(what: str, data: bytes) -> str:
    """`data` decodes as UTF-8 and holds no control byte but LF; returns the text."""
    text = data.decode("utf-8")  # bytes that are not UTF-8 would have been escaped
    m = RAW_CONTROL.search(text)
    assert m is None, f"{what}: raw control character {m.group()!r} at {m.start()}:\n{text!r}"
    return text


@pytest.mark.parametrize("command", ["status", "peers", "streams", "services"])
def test_hostile_names_print_escaped(rdmagwctl_bin, hostile_admin, command):
    rc, out, err = run_ctl_bytes(rdmagwctl_bin, "--admin", hostile_admin, command)
    assert rc == 0, f"rc={rc}\n{out!r}\n{err!r}"
    text = assert_no_raw_control(f"rdmagwctl {command}", out)
    assert_no_raw_control(f"rdmagwctl {command} (stderr)", err)
    assert HOSTILE_SHOWN in text, f"the escaped name is missing from:\n{text}"

    # --json: the same strings as JSON escapes, DEL and C1 included.
    rc, out, err = run_ctl_bytes(rdmagwctl_bin, "--admin", hostile_admin, command, "--json")
    assert rc == 0, f"rc={rc}\n{out!r}\n{err!r}"
    text = assert_no_raw_control(f"rdmagwctl {command} --json", out)
    path = "/stats" if command == "status" else f"/{command}"
    assert json.loads(text) == hostile_answers()[path], f"--json changed the server's answer:\n{text}"
    assert "\\u007f\\u009b" in text, f"DEL and CSI not written as \\u escapes:\n{text}"


def test_hostile_error_answer_prints_escaped(rdmagwctl_bin, hostile_admin):
    rc, out, err = run_ctl_bytes(rdmagwctl_bin, "--admin", hostile_admin, "ready")
    assert rc == 1, f"rc={rc}\n{out!r}\n{err!r}"
    text = assert_no_raw_control("rdmagwctl ready (stderr)", err)
    assert HOSTILE_SHOWN + r"\xff\xfe" in text, text


# ---------------------------------------------------------------------------
# check (offline) and failures


def good_config() -> str:
    return render_config(
        "host-a", tunnel_port=free_port(), admin_port=free_port(), peers=[("host-b", free_port())],
        listeners=[{"name": "echo", "listen": f"tcp:127.0.0.1:{free_port()}", "peer": "host-b",
                    "target": "tcp:127.0.0.1:6379"}],
        targets=["tcp:127.0.0.1:6379"])


def test_ready_and_drain_wait_exit_codes(rdmagwctl_bin, pair, backend):
    p, echo = echo_pair(pair, backend, "ctl-echo")
    rc, out, err = ctl_until(rdmagwctl_bin, p.a, "ready")
    assert rc == 0 and out.strip() == "ready", (rc, out, err)
    sock = connect(p.address("ctl-echo"))
    try:
        send_all(sock, b"hold", time.monotonic() + 5)
        assert recv_exact(sock, 4, time.monotonic() + 5) == b"hold"
        # drain --wait gives up while a stream stays open, and says so.
        rc, out, err = run_ctl(rdmagwctl_bin, "--admin", admin_address(p.a), "drain", "--wait",
                               "--wait-timeout", "1")
        assert rc == 1 and "1 stream still open" in err, (rc, out, err)
        rc, out, err = run_ctl(rdmagwctl_bin, "--admin", admin_address(p.a), "ready")
        assert rc == 1 and "draining" in err, (rc, out, err)
    finally:
        sock.close()
    rc, out, err = run_ctl(rdmagwctl_bin, "--admin", admin_address(p.a), "drain", "--wait",
                           "--wait-timeout", "10")
    assert rc == 0 and "drained" in out, (rc, out, err)
    # undrain: ready again, and a new connection goes through.
    rc, out, err = run_ctl(rdmagwctl_bin, "--admin", admin_address(p.a), "undrain")
    assert rc == 0 and out.startswith("accepting: "), (rc, out, err)
    rc, out, err = run_ctl(rdmagwctl_bin, "--admin", admin_address(p.a), "ready")
    assert rc == 0 and out.strip() == "ready", (rc, out, err)
    sock = connect(p.address("ctl-echo"))
    try:
        send_all(sock, b"again", time.monotonic() + 5)
        assert recv_exact(sock, 5, time.monotonic() + 5) == b"again"
        # Refused after SIGTERM (the open stream keeps the process up): exit
        # 1 with the server's reason.
        p.a.send_signal(signal.SIGTERM)
        assert p.a.wait_log(lambda l: "event=shutdown_requested" in l, timeout=5)
        rc, out, err = run_ctl(rdmagwctl_bin, "--admin", admin_address(p.a), "undrain")
        assert rc == 1 and "409" in err and "SIGTERM" in err, (rc, out, err)
    finally:
        sock.close()


def test_check_accepts_a_good_config(rdmagwctl_bin, tmp_path):
    cfg = tmp_path / "good.yaml"
    cfg.write_text(good_config())
    rc, out, err = run_ctl(rdmagwctl_bin, "check", str(cfg))
    assert rc == 0, f"rc={rc}\n{out}{err}"
    assert str(cfg) in out and "ok" in out, out


def test_check_rejects_a_bad_config_with_file_line_col(rdmagwctl_bin, tmp_path):
    lines = good_config().splitlines()
    port_line = next(i for i, l in enumerate(lines) if l.startswith("  tcp_port:"))
    lines[port_line] = "  tcp_port: 70000"
    lines.append("bogus_key: 1")
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    rc, out, err = run_ctl(rdmagwctl_bin, "check", str(cfg))
    assert rc == 2, f"rc={rc}\n{out}{err}"
    errors = [m for m in map(ERROR_LINE.match, (out + err).splitlines()) if m]
    assert any(m["file"] == str(cfg) and int(m["line"]) == port_line + 1 and m["key"] == "tunnel.tcp_port"
               for m in errors), f"no FILE:LINE:COL: tunnel.tcp_port: line for line {port_line + 1}:\n{out}{err}"
    assert any(int(m["line"]) == len(lines) and m["key"] == "bogus_key" for m in errors), (
        f"no error at line {len(lines)} for bogus_key:\n{out}{err}")

    rc, out, err = run_ctl(rdmagwctl_bin, "check", "--json", str(cfg))
    assert rc == 2, f"rc={rc}\n{out}{err}"
    answer = json.loads(out)
    assert answer["ok"] is False and {e["key"] for e in answer["errors"]} >= {"tunnel.tcp_port", "bogus_key"}


def test_unreachable_admin_exits_1_naming_the_address(rdmagwctl_bin):
    port = free_port()  # nothing listens there
    rc, out, err = run_ctl(rdmagwctl_bin, "--admin", f"127.0.0.1:{port}", "--timeout", "2", "status")
    assert rc == 1, f"rc={rc}\n{out}{err}"
    assert f"127.0.0.1:{port}" in err and "cannot reach" in err, err
    # And where to look: the usual cause is rdmagw not running, or elsewhere.
    assert "(is rdmagw running, with admin: at this address? Another address: --admin HOST:PORT or RDMAGW_ADMIN)" \
        in err, err
    assert err.count("\n") == 1, err  # one line

    # The same through $RDMAGW_ADMIN.
    rc, out, err = run_ctl(rdmagwctl_bin, "peers", env={"RDMAGW_ADMIN": f"127.0.0.1:{port}"})
    assert rc == 1 and f"127.0.0.1:{port}" in err, f"rc={rc}\n{out}{err}"


def test_usage_errors_exit_2_and_help_answers(rdmagwctl_bin):
    rc, out, err = run_ctl(rdmagwctl_bin, "--help")
    assert rc == 0 and "status" in out and "--admin" in out, f"rc={rc}\n{out}{err}"
    rc, out, err = run_ctl(rdmagwctl_bin, "no-such-command")
    assert rc == 2 and "no-such-command" in err, f"rc={rc}\n{out}{err}"
    rc, out, err = run_ctl(rdmagwctl_bin, "streams", "--limit", "0")
    assert rc == 2 and "--limit" in err, f"rc={rc}\n{out}{err}"
