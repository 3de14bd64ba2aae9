#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""On host b of the wire: an echo server (tests/integration's EchoServer) on
127.0.0.1. Prints "port N" once it listens and serves until its standard
input ends (lab-on passes host a's through, so it stops with its caller)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "integration"))
from backends import EchoServer  # noqa: E402

# Past EchoServer's default lifetime (900 s) its loop ends and closes every
# connection: the 20-minute soak (perf/wire_chaos_soak.sh) outlives that.
server = EchoServer(lifetime_s=4 * 3600).start()
print(f"port {server.port}", flush=True)
sys.stdin.read()
server.stop()
