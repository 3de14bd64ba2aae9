# SPDX-License-Identifier: Apache-2.0
"""Shared pieces of the podman end-to-end tests: the podman and
podman-compose commands as tests/docker/e2e/run set them up, polling with a
deadline, and the examples copied where they can run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOCKER = REPO / "docker"
IMAGE = os.environ.get("RDMAGW_E2E_IMAGE", "")
APP_IMAGE = os.environ.get("RDMAGW_E2E_APP_IMAGE", "")
AGENT_IMAGE = os.environ.get("RDMAGW_E2E_AGENT_IMAGE", "")
BASE_IMAGE = os.environ.get("RDMAGW_E2E_BASE_IMAGE", "")
COMPOSE = os.environ.get("RDMAGW_E2E_COMPOSE", "")
SIDECAR_UID = 1337


class CommandFailed(AssertionError):
    pass


def run(argv, *, timeout=120, check=True, env=None, input=None, cwd=None) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env,
                       input=input, cwd=cwd)
    if check and r.returncode != 0:
        raise CommandFailed(f"{' '.join(map(str, argv))} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


def podman(*args, **kw) -> subprocess.CompletedProcess:
    return run(["podman", *args], **kw)


def inspect(container: str, fmt: str) -> str:
    return podman("inspect", "--format", fmt, container).stdout.strip()


def exists(container: str) -> bool:
    return podman("container", "exists", container, check=False).returncode == 0


def wait_for(what: str, probe, timeout: float = 60, interval: float = 0.5):
    """probe() until it returns something true; fail naming `what` and the
    last value otherwise."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def health_status(container: str) -> str:
    """Runs the container's health check once and returns its state.  podman
    schedules health checks with systemd timers; without systemd (this
    machine, most CI) nothing runs them, so the test does, as a timer would."""
    podman("healthcheck", "run", container, check=False, timeout=30)
    state = json.loads(podman("inspect", "--format", "{{json .State}}", container).stdout)
    health = state.get("Health") or state.get("Healthcheck") or {}
    return health.get("Status", "")


def wait_healthy(container: str, timeout: float = 60) -> None:
    wait_for(f"{container} to turn healthy", lambda: health_status(container) == "healthy" or None,
             timeout=timeout, interval=2)


def logs(container: str) -> str:
    r = podman("logs", container, check=False)
    return r.stdout + r.stderr


def copy_examples(dest: Path) -> Path:
    """docker/ as the compose file expects to find it (examples, seccomp.json),
    with a fresh pre-shared key readable by the sidecar only."""
    work = dest / "docker"
    work.mkdir(parents=True)
    for name in ("compose.yaml", "compose.rdma.yaml", "seccomp.json"):
        shutil.copy(DOCKER / name, work / name)
    shutil.copytree(DOCKER / "examples", work / "examples")
    keys = work / "keys"
    keys.mkdir()
    key = keys / "fleet"
    key.write_text(subprocess.run(["sh", "-c", "head -c 32 /dev/urandom | base64"], capture_output=True,
                                  text=True, check=True).stdout)
    os.chown(key, SIDECAR_UID, SIDECAR_UID)
    key.chmod(0o400)
    return work
