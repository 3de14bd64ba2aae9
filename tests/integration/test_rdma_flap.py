# SPDX-License-Identifier: Apache-2.0
"""`transport: auto` through link flaps, in the RDMA lab: after the lab's
link has gone down for 3 s and up again once (after which, before
`rdma_head_start_ms`, a fresh pair's RDMA CM connect could hang and every
stream waiting for it was reset at connect_timeout_ms), fresh pairs are
started one after the other, each moving STREAMS streams of SIZE bytes both
ways (SHA-256 at both ends) across a 3 s link-down of its own. Every stream
of every pair must arrive whole: no reset, no short read. The sessions may
run on RDMA or TCP, and move between them, as the link allows. In the lab
they end up on TCP: an RDMA connect in flight while the link is down (the
first connect, or `auto`'s probe) leaves Soft-RoCE unable to connect for
the rest of the boot (tests/lab/rxe_connect_while_down.sh), so this test
shows that nothing is lost, not that RDMA comes back (which
test_rdma_hang.py and test_rdma_failover.py show).

RDMAGW_LAB_FLAP_PAIRS sets how many pairs (CI: 1; the run recorded in
perf/results/2026-11-27-lab-flap.md: 20, `tools/rdma-lab run --timeout 3000 -- env
RDMAGW_LAB_FLAP_PAIRS=20 tests/lab/rdma_integration.sh flap`).

Runs only in the lab (tests/lab/rdma_integration.sh): it needs the rxe device.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from conftest import TEST_TRANSPORT
from test_resume import Target, move_streams, stream_problems

DEVICE = os.environ.get("RDMAGW_LAB_DEVICE", "")
NETDEV = os.environ.get("RDMAGW_LAB_NETDEV", "")
PAIRS = int(os.environ.get("RDMAGW_LAB_FLAP_PAIRS", "1"))
STREAMS = 8
SIZE = int(os.environ.get("RDMAGW_LAB_FLAP_SIZE", str(24 << 20)))
DOWN_S = 3.0
TUNNEL = {"resume_timeout_ms": 30000, "rdma_probe_interval_ms": 1000}

pytestmark = pytest.mark.skipif(TEST_TRANSPORT == "tcp" or not DEVICE or not NETDEV,
                                reason="needs the lab's rxe device (tests/lab)")


def link(state: str) -> None:
    subprocess.run(["ip", "link", "set", "dev", NETDEV, state], check=True, timeout=30)


def flap(seconds: float = DOWN_S) -> None:
    link("down")
    try:
        time.sleep(seconds)
    finally:
        link("up")


@pytest.mark.deadline(60 + PAIRS * 90)
def test_fresh_auto_pairs_carry_every_stream_across_link_flaps(pair, backend):
    flap()  # the link has been down once before any of the pairs starts
    time.sleep(1.0)
    outcomes = []
    for i in range(PAIRS):
        target = backend(Target())
        p = pair([{"name": "io", "target": target.endpoint}], [target.endpoint], workers=1,
                 a_tunnel=TUNNEL, b_tunnel=TUNNEL, a_transport="auto", b_transport="auto")
        result: dict = {}

        def run():
            try:
                clients, ends, took = move_streams(p.address("io"), target, STREAMS, SIZE, 120, seed0=1000 * i)
                result["problems"] = stream_problems(clients, ends, STREAMS, SIZE)
                result["took"] = took
            except Exception as e:  # reported below, with the pair it belongs to
                result["problems"] = [f"{type(e).__name__}: {e}"]

        mover = threading.Thread(target=run, daemon=True)
        mover.start()
        time.sleep(0.5)
        flap()
        mover.join(timeout=150)
        assert not mover.is_alive(), f"pair {i}: streams did not end within their bound"
        log = p.a.log_text() + p.b.log_text()
        resets = log.count("event=stream_reset")
        outcomes.append((i, result.get("problems", []), resets, result.get("took")))
        p.a.stop()
        p.b.stop()
        target.stop()
    for i, problems, resets, took in outcomes:
        print(f"pair {i}: {'good' if not problems and not resets else 'BAD'}"
              f"{'' if took is None else f' in {took:.1f} s'}; {resets} resets; {problems[:2]}")
    bad = [o for o in outcomes if o[1] or o[2]]
    assert not bad, f"{len(bad)} of {PAIRS} pairs lost streams: {bad[:3]}"
