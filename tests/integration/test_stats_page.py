# SPDX-License-Identifier: Apache-2.0
"""The admin endpoint's stats page (GET /, docs/admin.md) in a real browser.

Headless Chromium, driven by Selenium through chromedriver, loads the page
from host-a of a pair on the TCP transport that carries traffic, and the test
checks what the page shows against what was sent: the peer, its transport, a
session, the open stream's target, the listener's bytes, a rate after two
polls. Node names that are HTML must show as text. Then the peer stops (the
page shows it down), the process being viewed stops (an error banner), and
comes back (the banner goes).

Needs Debian's chromium, chromium-driver and python3-selenium
(tools/dev/install-deps); without them the test fails, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from admin_client import admin_request
from backends import EchoServer
from clients import connect, echo_roundtrip, free_port, recv_exact, send_all
from conftest import render_config

INSTALL_HINT = "run tools/dev/install-deps (it installs chromium, chromium-driver and python3-selenium)"

# Listener and peer names are free text (node names are not: a node name is
# letters, digits, '.', '-' and '_'): the page must show them as text, never
# run them. Either would mark the body if it ran.
LISTENER = 'echo <script>document.body.dataset.pwned="a"</script>'
PEER = 'host-b "><img src=x onerror="document.body.dataset.pwned=\'b\'">'

POLL_S = 0.5  # the page's refresh interval here (?interval=); 2 s by default
PAGE_WAIT_S = 15.0  # for what the page should show after a change

# Every row of a table as {data-col: text}, plus the row's class.
ROWS_JS = """
const table = document.getElementById(arguments[0]);
if (!table || table.tBodies.length === 0) return [];
return Array.from(table.tBodies[0].rows, (tr) => {
  const row = {_class: tr.className};
  for (const td of tr.cells) if (td.dataset.col) row[td.dataset.col] = td.textContent;
  return row;
});
"""

# What the tests read besides the tables.
STATE_JS = """
const banner = document.getElementById("banner");
return {
  polls: Number(document.body.dataset.polls),
  banner: banner.hidden ? null : banner.textContent,
  stale: document.getElementById("main").classList.contains("stale"),
  node: document.getElementById("node").textContent,
  title: document.title,
  pwned: document.body.dataset.pwned || null,
  images: document.images.length,
  scripts: document.scripts.length,
  streams_count: document.getElementById("streams-count").textContent,
  pause: document.getElementById("pause").textContent,
};
"""


def _selenium():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        pytest.fail(f"Selenium is missing ({e}): {INSTALL_HINT}", pytrace=False)
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        missing = " and ".join(name for name, path in (("chromium", chromium), ("chromedriver", driver)) if not path)
        pytest.fail(f"{missing} not found on PATH: {INSTALL_HINT}", pytrace=False)
    return webdriver, Options, Service, chromium, driver


def _kill_leftovers(marker: str) -> None:
    """SIGKILLs processes whose command line holds `marker` (this test's own
    profile directory: only the Chromium it started), should quit() have
    left one behind."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium under chromedriver; quit at teardown."""
    webdriver, Options, Service, chromium, chromedriver = _selenium()
    profile = tempfile.mkdtemp(prefix="rdmagw-chromium-")
    options = Options()
    options.binary_location = chromium
    for arg in ["--headless=new",
                "--no-sandbox",  # root has no user namespace sandbox
                "--disable-dev-shm-usage",  # containers give /dev/shm 64 MiB
                "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-features=Translate,MediaRouter", "--window-size=1600,1200",
                f"--user-data-dir={profile}"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The driver is given by path: Selenium must not go looking for one online.
    service = Service(executable_path=chromedriver,
                      service_args=[f"--log-path={tmp_path / 'chromedriver.log'}"])
    driver = None
    try:
        driver = webdriver.Chrome(service=service, options=options)
        driver.set_page_load_timeout(20)
        driver.set_script_timeout(10)
        yield driver
    finally:
        try:
            if driver is not None:
                driver.quit()
            else:
                service.stop()
        finally:
            _kill_leftovers(profile)
            shutil.rmtree(profile, ignore_errors=True)


class Ticker:
    """Echoes 1 KiB through an open stream every 100 ms, so the page has a
    rate to show that is not zero."""

    def __init__(self, sock):
        self.sock = sock
        self.stop_event = threading.Event()
        self.sent = 0
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, name="ticker", daemon=True)
        self.thread.start()

    def _run(self):
        chunk = b"t" * 1024
        try:
            while not self.stop_event.wait(0.1):
                deadline = time.monotonic() + 5
                send_all(self.sock, chunk, deadline)
                assert recv_exact(self.sock, len(chunk), deadline) == chunk
                self.sent += len(chunk)
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the ticker thread did not stop"
        assert self.error is None, f"traffic on the open stream failed: {self.error!r}"


class Page:
    """The stats page in the browser, read through small scripts."""

    def __init__(self, driver, shots: Path):
        self.driver = driver
        self.shots = shots

    def rows(self, table: str) -> list[dict]:
        return self.driver.execute_script(ROWS_JS, table)

    def state(self) -> dict:
        return self.driver.execute_script(STATE_JS)

    def row(self, table: str, **match) -> dict | None:
        for r in self.rows(table):
            if all(r.get(k) == v for k, v in match.items()):
                return r
        return None

    def until(self, predicate, what: str, timeout: float = PAGE_WAIT_S):
        """Polls `predicate(page)` until it returns something true; on timeout
        fails with what the page showed and a screenshot."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate(self)
            if value:
                return value
            if time.monotonic() >= deadline:
                shot = self.shots / f"stats-page-{re.sub(r'[^a-z0-9]+', '-', what.lower())[:60]}.png"
                self.driver.save_screenshot(str(shot))
                seen = {name: self.rows(name) for name in ("peers", "sessions", "streams", "listeners")}
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; page state "
                                     f"{json.dumps(self.state())}; tables {json.dumps(seen)}; screenshot {shot}")
            time.sleep(0.1)

    def severe_console_entries(self) -> list[dict]:
        return [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]


@pytest.mark.deadline(120)
def test_stats_page_in_a_browser(browser, sidecar, backend, tmp_path):
    echo = backend(EchoServer())
    b_port, a_port, b_admin, a_admin = free_port(), free_port(), free_port(), free_port()
    listen = f"tcp:127.0.0.1:{free_port()}"

    # The pair of conftest's `pair`, on TCP, with a listener and a peer whose
    # names are HTML (a JSON string is a YAML double-quoted scalar).
    b = sidecar("host-b", render_config("host-b", b_port, b_admin, targets=[echo.endpoint], transport="tcp"),
                tunnel_port=b_port, admin_port=b_admin)
    a = sidecar("host-a", render_config("host-a", a_port, a_admin, peers=[(json.dumps(PEER), b_port)],
                                        listeners=[{"name": json.dumps(LISTENER), "listen": listen,
                                                    "peer": json.dumps(PEER), "target": echo.endpoint}],
                                        transport="tcp"),
                tunnel_port=a_port, admin_port=a_admin)
    b.start()
    a.start()
    address = ("127.0.0.1", int(listen.rsplit(":", 1)[1]))

    # Traffic: three streams that come and go, one that stays open.
    for i in range(3):
        payload = bytes([65 + i]) * 3000
        assert echo_roundtrip(address, payload) == payload
    held = connect(address)
    ticker = None
    try:
        send_all(held, b"hello", time.monotonic() + 5)
        assert recv_exact(held, 5, time.monotonic() + 5) == b"hello"
        ticker = Ticker(held)

        # What a browser gets at /: the page, from the binary.
        head = admin_request(a_admin, "/", "HEAD")
        assert head.status == 200 and head.headers["content-type"] == "text/html; charset=utf-8", head.headers
        assert head.headers["cache-control"] == "no-store"

        started = time.monotonic()
        browser.get(f"http://127.0.0.1:{a_admin}/?interval={POLL_S}")
        page = Page(browser, tmp_path)
        page.until(lambda p: p.state()["polls"] >= 1, "the first update")

        # One session per worker.
        peer = page.until(lambda p: p.row("peers", name=PEER, transport="tcp", state="up",
                                          sessions="2 tcp, 0 rdma"), "peer host-b up on tcp, 2 sessions")
        assert peer["_class"] == "up", peer  # rows are coloured by state
        session = page.until(lambda p: p.row("sessions", peer=PEER, transport="tcp", state="open",
                                             role="dialer"), "an open tcp session to host-b")
        assert session["peer_node"] == "host-b", session  # the peer's own name
        assert re.fullmatch(r"\d+(\.\d)?(us|ms|s)", session["rtt"]) or session["rtt"] == "-", session
        stream = page.until(lambda p: p.row("streams", target=echo.endpoint, state="open"),
                            f"the open stream to {echo.endpoint}")
        # A stream names its peer by the node name the peer announced.
        assert (stream["side"], stream["listener"], stream["peer"]) == ("client", LISTENER, "host-b"), stream
        # The three short streams are gone, the held one is listed.
        page.until(lambda p: p.state()["streams_count"].startswith("showing 1 of 1,"), "a count of 1 stream")
        listener = page.until(lambda p: p.row("listeners", name=LISTENER, accepted="4", active="1"),
                              "listener echo: 4 accepted, 1 active")
        assert listener["listen"] == listen and listener["_class"] == "up", listener
        assert re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB)", listener["bytes_in"]) and listener["bytes_in"] != "0 B", listener

        # Rates come from two successive answers: after two polls, the
        # ticker's 10 KiB/s shows (each way) on the listener and the peer.
        polls = page.state()["polls"]
        page.until(lambda p: p.state()["polls"] >= polls + 2, "two more updates")
        nonzero_rate = re.compile(r"(?!0 B/s)\d+(\.\d)? (B|KiB|MiB)/s")
        listener = page.until(lambda p: (r := p.row("listeners", name=LISTENER))
                              and nonzero_rate.fullmatch(r["in_rate"]) and nonzero_rate.fullmatch(r["out_rate"]) and r,
                              "non-zero byte rates on listener echo")
        peer = page.until(lambda p: (r := p.row("peers", name=PEER))
                          and nonzero_rate.fullmatch(r["sent_rate"]) and r, "a non-zero send rate to host-b")
        failures = {r["reason"]: r for r in page.rows("failures")}
        assert failures["all"]["total"] == "0" and failures["all"]["rate"] == "0.0/s", failures
        assert {"not-allowed", "target-refused", "peer-gone"} <= failures.keys(), failures
        summary = {k: v for row in page.rows("summary") for k, v in row.items() if k != "_class"}
        assert summary["state"] == "ready" and summary["workers"] == "2", summary
        assert summary["transport"].startswith("tcp"), summary
        # Memory by worker, and what a peer's bytes cost in copies, as sizes.
        size = re.compile(r"\d+(\.\d)? (B|KiB|MiB|GiB)")
        assert size.fullmatch(peer["queued"]), peer
        workers = page.rows("workers")
        assert len(workers) == 2, workers
        assert all(size.fullmatch(w["buffers"]) and size.fullmatch(w["resident"]) for w in workers), workers
        assert any(w["resident"] != "0 B" for w in workers), workers  # the echo's bytes were written somewhere

        # Names are text: the tables showed them verbatim, nothing ran.
        state = page.state()
        assert state["node"] == "host-a" and state["title"] == "rdmagw host-a stats", state
        assert state["pwned"] is None and state["images"] == 0 and state["scripts"] == 1, state
        assert state["banner"] is None and not state["stale"], state
        # No script error, nothing the page's policy refused (an outside asset would be).
        assert page.severe_console_entries() == []

        # Pause holds the page still; resume polls again at once.
        browser.find_element("id", "pause").click()
        page.until(lambda p: p.state()["pause"] == "Resume", "the button to say Resume")
        time.sleep(POLL_S)  # an update under way when it was clicked ends
        paused_at = page.state()["polls"]
        time.sleep(POLL_S * 4)
        assert page.state()["polls"] == paused_at, "the page polled while paused"
        browser.find_element("id", "pause").click()
        page.until(lambda p: p.state()["polls"] > paused_at, "an update after resume")

        # The peer goes: the page shows it is no longer up.
        ticker.stop()
        ticker = None
        held.close()
        b.stop()
        peer = page.until(lambda p: (r := p.row("peers", name=PEER)) and r["state"] != "up" and r,
                          "host-b shown not up")
        assert peer["state"] in ("down", "connecting", "resuming") and peer["_class"] in ("down", "warn"), peer
        assert page.state()["banner"] is None  # the endpoint itself still answers

        # The process being viewed goes: every fetch fails, a banner says so,
        # the last data stays (dimmed).
        polls = page.state()["polls"]
        a.stop()
        state = page.until(lambda p: (s := p.state())["banner"] and s, "the error banner")
        assert "Update failed" in state["banner"] and "cannot reach the admin endpoint" in state["banner"], state
        assert "GET /stats" in state["banner"] and state["stale"], state
        assert page.row("peers", name=PEER) is not None  # what was known is still shown
        assert page.state()["polls"] == polls

        # It comes back: the banner goes, updates go on.
        a.restart()
        page.until(lambda p: (s := p.state())["banner"] is None and s["polls"] > polls and not s["stale"],
                   "the page to recover")
        assert time.monotonic() - started < 60, "the page took too long overall"
    finally:
        if ticker is not None:
            ticker.stop_event.set()
            ticker.thread.join(timeout=10)
        held.close()
