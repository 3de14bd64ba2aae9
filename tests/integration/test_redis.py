# SPDX-License-Identifier: Apache-2.0
"""A real application behind the pair: redis-benchmark -> rdmagw -> rdmagw -> redis-server."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from clients import connect, free_port
from conftest import ManagedProcess


def _wait_redis(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    last = None
    for _ in range(1000):
        if time.monotonic() >= deadline:
            break
        try:
            s = connect(("127.0.0.1", port), timeout=1)
            try:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
            finally:
                s.close()
        except OSError as e:
            last = e
        time.sleep(0.1)
    raise TimeoutError(f"redis-server on port {port} not answering PING: {last}")


@pytest.mark.deadline(180)
def test_redis_benchmark_set_get_through_pair(pair, procs, tmp_path):
    server, bench = shutil.which("redis-server"), shutil.which("redis-benchmark")
    if not server or not bench:
        pytest.skip("redis-server / redis-benchmark not installed "
                    "(tools/dev/install-deps installs redis-server and redis-tools)")
    rport = free_port()
    redis = ManagedProcess("redis-server",
                           [server, "--port", str(rport), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                           tmp_path / "redis.log")
    procs.append(redis)
    redis.start()
    _wait_redis(rport)

    target = f"tcp:127.0.0.1:{rport}"
    p = pair([{"name": "redis", "target": target}], [target])
    _, lport = p.address("redis")
    try:
        r = subprocess.run([bench, "-h", "127.0.0.1", "-p", str(lport), "-t", "set,get",
                            "-n", "100000", "-q"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=150)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"redis-benchmark did not finish in 150 s; output so far: "
                             f"{(e.stdout or b'')[-2000:]!r}") from None
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    lines = [l.strip() for l in re.split(r"[\r\n]+", out) if l.strip()]
    print("\n".join(lines[-10:]))
    assert r.returncode == 0, f"redis-benchmark exited {r.returncode}:\n{out[-3000:]}"
    rps = re.compile(r"^(SET|GET): [\d.]+ requests per second")
    found = {m.group(1) for l in lines if (m := rps.match(l))}
    assert found == {"SET", "GET"}, f"no SET/GET requests-per-second lines in:\n{out[-3000:]}"
    assert "error" not in out.lower() and "ERR" not in out, out[-3000:]
    assert redis.running()
