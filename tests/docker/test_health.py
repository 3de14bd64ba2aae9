# SPDX-License-Identifier: Apache-2.0
"""The health checks as the deployment files write them, run against a real
rdmagw started through the image's entrypoint: the Dockerfile's HEALTHCHECK,
the compose health check, the pod's readiness and liveness probes and its
preStop hook.  Each command is taken from its file, with the image's
/usr/local/bin/rdmagwctl replaced by the built one and RDMAGW_ADMIN pointing
at the admin port this test chose (as the image's ENV does in a container).

The sequence is the one a sidecar goes through: ready (every check passes),
drained by the preStop hook (readiness fails saying why, liveness holds), then
SIGTERM (rdmagw exits 0 at once: no stream was left).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from container_support import (
    DOCKER, ENTRYPOINT, IMAGE_RDMAGWCTL, TIMEOUT, free_port, healthcheck, read_until, require_ready_command, run,
    seconds, sidecar_config)
from test_examples import load, pod_documents


def image_commands() -> dict[str, tuple[list[str], float]]:
    """Each check's command and the time its runner gives it."""
    flags, command = healthcheck()
    out = {"Dockerfile HEALTHCHECK": (command, seconds(flags["--timeout"]))}
    (compose,) = load(DOCKER / "compose.yaml")
    check = compose["services"]["rdmagw-a"]["healthcheck"]
    assert check["test"][0] == "CMD", check
    out["compose healthcheck"] = (check["test"][1:], seconds(check["timeout"]))
    _, pod = pod_documents()
    sidecar = {c["name"]: c for c in pod["spec"]["containers"]}["rdmagw"]
    for name in ("readinessProbe", "livenessProbe"):
        out[f"pod {name}"] = (sidecar[name]["exec"]["command"], sidecar[name]["timeoutSeconds"])
    out["pod preStop"] = (sidecar["lifecycle"]["preStop"]["exec"]["command"], pod["spec"]["terminationGracePeriodSeconds"])
    return out


@pytest.fixture
def sidecar(rdmagw_bin, rdmagwctl_bin, tmp_path):
    """rdmagw through the entrypoint, ready; yields (process, env for rdmagwctl)."""
    require_ready_command(rdmagwctl_bin)
    admin = f"127.0.0.1:{free_port()}"
    config = tmp_path / "rdmagw.yaml"
    config.write_text(sidecar_config(admin))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDMAGW_")}
    env.update(RDMAGW_BIN=str(rdmagw_bin), RDMAGW_CONFIG=str(config), RDMAGW_ADMIN=admin)
    proc = subprocess.Popen([str(ENTRYPOINT)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        log = read_until(proc, "event=ready", timeout=15)
        assert "warning" not in log, log
        yield proc, env
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=TIMEOUT)
        proc.stderr.close()


def run_check(name: str, command: list[str], budget: float, env: dict, rdmagwctl_bin):
    assert command[0] == IMAGE_RDMAGWCTL, f"{name}: {command}"
    started = time.monotonic()
    proc = run([rdmagwctl_bin, *command[1:]], env=env, timeout=budget + 5)
    took = time.monotonic() - started
    assert took < budget, f"{name} took {took:.1f} s, its runner allows {budget} s"
    return proc


def test_health_checks_probes_and_prestop_hook_against_a_real_rdmagw(sidecar, rdmagwctl_bin):
    proc, env = sidecar
    checks = image_commands()
    hook, hook_budget = checks.pop("pod preStop")

    for name, (command, budget) in checks.items():
        result = run_check(name, command, budget, env, rdmagwctl_bin)
        assert result.returncode == 0, f"{name} on a ready rdmagw: exit {result.returncode}\n{result.stderr}"

    # The pod is deleted: the preStop hook drains and returns (no stream open).
    result = run_check("pod preStop", hook, hook_budget, env, rdmagwctl_bin)
    assert result.returncode == 0, f"preStop: exit {result.returncode}\n{result.stdout}{result.stderr}"
    assert "drained: no streams left" in result.stdout, result.stdout

    # Drained: every readiness check fails and says why; liveness holds, or
    # the kubelet would restart the sidecar in the middle of its drain.
    for name, (command, budget) in checks.items():
        result = run_check(name, command, budget, env, rdmagwctl_bin)
        if name == "pod livenessProbe":
            assert result.returncode == 0, f"{name} failed on a draining rdmagw:\n{result.stderr}"
        else:
            assert result.returncode == 1, f"{name} on a drained rdmagw: exit {result.returncode}\n{result.stderr}"
            assert "draining" in result.stdout + result.stderr, result.stdout + result.stderr

    # Then SIGTERM: nothing left to wait for, rdmagw exits 0 at once.
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest = read_until(proc, "event=stopped", timeout=15)
    assert proc.wait(timeout=15) == 0, rest
    assert time.monotonic() - started < 5, f"rdmagw took {time.monotonic() - started:.1f} s to stop after the drain"


def test_health_check_fails_as_not_ready_when_nothing_answers(rdmagwctl_bin):
    """No rdmagw (not started yet, or gone): exit 1 for Docker ("unhealthy";
    2 is reserved there) and for the kubelet, within the check's time."""
    require_ready_command(rdmagwctl_bin)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDMAGW_")}
    env["RDMAGW_ADMIN"] = f"127.0.0.1:{free_port()}"
    for name, (command, budget) in image_commands().items():
        result = run_check(name, command, budget, env, rdmagwctl_bin)
        assert result.returncode == 1, f"{name} with nothing listening: exit {result.returncode}\n{result.stderr}"
        assert "cannot reach admin" in result.stderr, result.stderr
