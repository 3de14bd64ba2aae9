# SPDX-License-Identifier: Apache-2.0
"""docker/compose.yaml run for real with podman-compose: two "hosts" (network
namespaces on a podman bridge), the init container's redirect, Redis on host
B reached from an unmodified redis-cli on host A through both sidecars (the
transparent way and the explicit listener), health, rdmagwctl through
podman exec, and a stop that drains and exits 0."""

from __future__ import annotations

import json
import os

import pytest

from e2e_support import (APP_IMAGE, COMPOSE, IMAGE, copy_examples, exists, inspect, logs, podman, run,
                         wait_for, wait_healthy)

PROJECT = "rdmagw-e2e"
WRAPPER = os.path.join(os.path.dirname(__file__), "podman-without-requires")
HOST_B = "10.77.0.12"


def name(service: str) -> str:
    return f"{PROJECT}_{service}_1"


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    work = copy_examples(tmp_path_factory.mktemp("compose"))
    # compose.yaml names rdmagw:latest (with a build section, unused when
    # the image exists) and takes the application image from the environment.
    podman("tag", IMAGE, "localhost/rdmagw:latest")
    env = dict(os.environ, RDMAGW_APP_IMAGE=APP_IMAGE)
    compose = [COMPOSE, "--podman-path", WRAPPER, "-p", PROJECT, "-f", "compose.yaml"]
    run([*compose, "down", "-t", "5"], cwd=work, env=env, check=False, timeout=120)
    try:
        up = run([*compose, "up", "-d"], cwd=work, env=env, check=False, timeout=180)
        assert up.returncode == 0, f"podman-compose up failed ({up.returncode}):\n{up.stdout}{up.stderr}"
        yield work
    finally:
        for service in ("rdmagw-a", "rdmagw-b", "init-a", "app-a"):
            if exists(name(service)):
                print(f"---- {service}\n{logs(name(service))[-3000:]}")
        run([*compose, "down", "-t", "5"], cwd=work, env=env, check=False, timeout=120)


def test_init_container_installed_the_redirect_and_exited_0(example):
    wait_for("init-a to exit", lambda: inspect(name("init-a"), "{{.State.Status}}") == "exited" or None, timeout=30)
    assert inspect(name("init-a"), "{{.State.ExitCode}}") == "0", logs(name("init-a"))
    assert "rdmagw-init: done: IPv4 rules installed" in logs(name("init-a"))
    # In host A's namespace, which the holder owns: the sidecar and the
    # application share it, so the rules apply to the application.
    rules = podman("run", "--rm", "--no-healthcheck", "--pod", f"pod_{PROJECT}", "--network", f"container:{name('host-a')}", "--user", "0",
                   "--cap-drop", "ALL", "--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW",
                   "--entrypoint", "iptables-save", IMAGE, "-t", "nat").stdout
    assert f"-d {HOST_B}/32 -p tcp" in rules and "rdmagw:capture" in rules and "--to-ports 15001" in rules, rules


def test_both_sidecars_turn_healthy(example):
    for service in ("rdmagw-a", "rdmagw-b"):
        wait_healthy(name(service), timeout=60)


def test_the_holders_and_init_carry_no_health_check(example):
    # They would inherit the image's HEALTHCHECK, which asks an rdmagw they
    # do not run, and report unhealthy.
    for service in ("host-a", "host-b", "init-a"):
        config = json.loads(inspect(name(service), "{{json .Config.Healthcheck}}") or "null")
        assert not config or config.get("Test") in (["NONE"], None), f"{service}: {config}"


def test_an_unmodified_redis_client_on_host_a_reaches_redis_on_host_b_both_ways(example):
    app = name("app-a")
    wait_for("a transparent PONG", lambda: podman("exec", app, "redis-cli", "-h", HOST_B, "-p", "6379", "ping",
                                                  check=False).stdout.strip() == "PONG" or None, timeout=60)
    # 1 MiB each way, checked by SHA-256 on host A: the value goes to Redis on
    # host B through the redirect and comes back through the explicit listener.
    script = (
        "set -e; head -c 786432 /dev/urandom | base64 -w0 > /tmp/value; "
        f"redis-cli -h {HOST_B} -p 6379 -x set big < /tmp/value >/dev/null; "
        "redis-cli -h 127.0.0.1 -p 6380 --raw get big | head -c -1 > /tmp/back; "
        "sha256sum < /tmp/value; sha256sum < /tmp/back; stat -c %s /tmp/back")
    sent, back, size = podman("exec", app, "sh", "-c", script).stdout.split("\n")[:3]
    assert int(size) == 1048576
    assert sent == back, "the value came back different"
    # Redis on host B listens on its loopback only: without the tunnel,
    # nothing on HOST_B:6379 answers, so the PONG above crossed it.
    direct = podman("exec", name("rdmagw-a"), "python3", "-c",
                    f"import socket; s = socket.socket(); s.settimeout(3); print(s.connect_ex(('{HOST_B}', 6379)))",
                    check=False)
    assert direct.stdout.strip() not in ("", "0"), (
        f"rdmagw-a (exempt from the redirect) reached {HOST_B}:6379 directly: Redis is not loopback-only\n"
        f"{direct.stdout}{direct.stderr}")
    # The application's own loop in compose.yaml says the same.
    out = wait_for("app-a's loop to print both answers",
                   lambda: (lambda text: text if "transparent: PONG" in text and "explicit:" in text else None)(
                       logs(app)), timeout=30)
    assert "explicit:    " in out


def test_rdmagwctl_works_through_podman_exec(example):
    status = podman("exec", name("rdmagw-a"), "rdmagwctl", "status").stdout
    assert "state      ready" in status, status
    assert "host-b" in status and "transport  tcp" in status, status
    peers = podman("exec", name("rdmagw-b"), "rdmagwctl", "peers").stdout
    assert "host-a" in peers, peers


def test_the_sidecars_run_under_the_shipped_seccomp_profile(example):
    for service in ("rdmagw-a", "rdmagw-b"):
        status = podman("exec", name(service), "grep", "-E", "^(Seccomp|NoNewPrivs|CapEff):", "/proc/1/status").stdout
        assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status, status
        assert "CapEff:\t0000000000000000" in status, f"the sidecar holds capabilities:\n{status}"


def test_a_stop_drains_and_exits_0(example):
    container = name("rdmagw-a")
    podman("stop", "-t", "20", container, timeout=60)
    assert inspect(container, "{{.State.ExitCode}}") == "0", logs(container)
    out = logs(container)
    # SIGTERM (the image's STOPSIGNAL) asks for a drain, not a kill.
    assert "event=shutdown_requested" in out and "event=stopped" in out, out[-2000:]
    assert "event=shutdown_forced" not in out, out[-2000:]
