# SPDX-License-Identifier: Apache-2.0
"""Transport selection between sidecars (runs where RDMA exists: the lab)."""

from __future__ import annotations

import pytest

from backends import EchoServer, prng_bytes
from clients import echo_roundtrip
from conftest import TEST_TRANSPORT

pytestmark = pytest.mark.skipif(TEST_TRANSPORT == "tcp", reason="needs an RDMA device (tests/lab)")


def test_rdma_pair_carries_streams_over_rdma(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], workers=1)
    payload = prng_bytes(5, 256 * 1024)
    assert echo_roundtrip(p.address("echo"), payload, timeout=30) == payload
    assert "event=session_open" in p.a.log_text() and "transport=rdma" in p.a.log_text()


def test_auto_against_a_tcp_only_peer_falls_back_to_tcp_and_works(pair, backend):
    echo = backend(EchoServer())
    p = pair([{"name": "echo", "target": echo.endpoint}], [echo.endpoint], workers=1,
             a_transport="auto", b_transport="tcp")
    payload = prng_bytes(6, 256 * 1024)
    assert echo_roundtrip(p.address("echo"), payload, timeout=30) == payload
    log = p.a.log_text()
    assert "event=transport_fallback" in log and "from=rdma" in log and "to=tcp" in log
    assert "event=transport_selected peer=host-b transport=tcp" in log
