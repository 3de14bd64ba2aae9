#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""On host b of the wire: an echo server (tests/integration's EchoServer) on
127.0.0.1. Prints "port N" once it listens and serves until its standard
input ends (lab-on passes host a's through, so it stops with its caller)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "integration"))
from backends import EchoServer  # noqa: E402

server = EchoServer().start()
print(f"port {server.port}", flush=True)
sys.stdin.read()
server.stop()
