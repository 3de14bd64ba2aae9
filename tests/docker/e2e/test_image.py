# SPDX-License-Identifier: Apache-2.0
"""The image as built by podman from docker/Dockerfile: its size, what its
configuration keeps (HEALTHCHECK, user, entrypoint), the local legs'
programs built in, no apt leftovers, and the seccomp profile: blocked under the runtime's default, running under
docker/seccomp.json, and confined all the same."""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e_support import DOCKER, IMAGE, SIDECAR_UID, inspect, logs, podman, run, wait_for

# The image must stay small: the runtime stage is the base plus the shared
# libraries, iptables, iproute2 and python3.  Measured at 136 MB on the locally made
# slim base (tests/docker/e2e/make-base-image, itself 80 MB or so, like
# Debian's debian:12-slim).  The bound leaves room for Debian updates, not for
# a build stage or apt caches left in the image (hundreds of MB).
MAX_IMAGE_BYTES = 160 * 1000 * 1000

CONFIG = """\
node: e2e
admin: 127.0.0.1:9901
tunnel:
  address: 127.0.0.1
  transport: tcp
listeners:
  - name: echo
    listen: tcp:127.0.0.1:6380
    peer: nobody
    target: tcp:127.0.0.1:6379
peers:
  - name: nobody
    address: 127.0.0.1
    tcp_port: 7499
targets: []
"""


def test_image_is_small_and_says_its_size():
    size = int(inspect(IMAGE, "{{.Size}}"))
    print(f"image {IMAGE}: {size / 1e6:.1f} MB")
    assert size <= MAX_IMAGE_BYTES, f"{IMAGE} is {size / 1e6:.1f} MB, above {MAX_IMAGE_BYTES / 1e6:.0f} MB"


def test_image_keeps_its_healthcheck_user_and_entrypoint():
    (image,) = json.loads(podman("image", "inspect", IMAGE).stdout)
    config = image["Config"]
    health = image.get("Healthcheck") or {}
    assert health.get("Test") == ["CMD", "/usr/local/bin/rdmagwctl", "--timeout", "2", "ready"], (
        f"HEALTHCHECK lost (built without --format docker?): {health}")
    assert config.get("User") == f"{SIDECAR_UID}:{SIDECAR_UID}"
    assert config.get("Entrypoint") == ["/usr/local/bin/entrypoint.sh"]
    assert config.get("StopSignal") in ("SIGTERM", "15")


def test_image_binaries_name_the_commit_they_were_built_from():
    """The build context has no .git: tests/docker/e2e/run passes the
    commit as a build argument, and --version says it."""
    head = subprocess.run(["git", "-C", str(DOCKER), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    for binary in ("rdmagw", "rdmagwctl"):
        r = podman("run", "--rm", "--no-healthcheck", "--entrypoint", binary, IMAGE, "--version")
        assert r.stdout.strip().endswith(f"(commit {head})"), (binary, r.stdout, head)


def test_image_rdmagw_is_built_with_the_local_legs_programs():
    """The build stage has clang, bpftool and libbpf-dev: the programs of
    local_legs.redirect are embedded, and rdmagw loads them with libbpf
    (a build without them does not link it, and says so when asked)."""
    r = podman("run", "--rm", "--no-healthcheck", "--entrypoint", "ldd", IMAGE, "/usr/local/bin/rdmagw")
    assert "libbpf.so.1" in r.stdout, r.stdout


def test_image_has_no_apt_lists_caches_or_documentation():
    r = podman("run", "--rm", "--no-healthcheck", "--user", "0", "--entrypoint", "sh", IMAGE, "-c",
               "find /var/lib/apt/lists /var/cache/apt /usr/share/doc /usr/share/man -type f "
               "-not -name copyright -not -name lock | head -n 20")
    assert r.stdout.strip() == "", f"left in the image:\n{r.stdout}"


def start(tmp_path, name: str, *options: str) -> str:
    cfg = tmp_path / "rdmagw.yaml"
    cfg.write_text(CONFIG)
    cfg.chmod(0o644)
    podman("run", "-d", "--name", name, "--no-healthcheck", *options,
           "-v", f"{cfg}:/etc/rdmagw/rdmagw.yaml:ro,Z", IMAGE)
    return name


@pytest.fixture
def container_name(request):
    name = f"rdmagw-e2e-{request.node.name[:40].replace('[', '-').replace(']', '')}"
    podman("rm", "-f", name, check=False)
    yield name
    podman("rm", "-f", "-t", "0", name, check=False)


def test_the_runtime_default_profile_blocks_io_uring_and_rdmagw_says_which_profile_to_use(tmp_path,
                                                                                        container_name):
    start(tmp_path, container_name)
    wait_for("the container to exit", lambda: inspect(container_name, "{{.State.Status}}") == "exited" or None,
             timeout=30)
    assert inspect(container_name, "{{.State.ExitCode}}") == "1"
    out = logs(container_name)
    errors = [line for line in out.splitlines() if " error " in line]
    assert len(errors) == 1, f"expected one error line:\n{out}"
    assert "event=io_uring_unavailable" in errors[0] and "docker/seccomp.json" in errors[0], errors[0]
    assert "io_uring_setup: Function not implemented" in errors[0], errors[0]


def test_docker_seccomp_json_lets_rdmagw_run_and_still_confines_it(tmp_path, container_name):
    start(tmp_path, container_name, "--security-opt", f"seccomp={DOCKER / 'seccomp.json'}")
    wait_for("rdmagw ready", lambda: podman("exec", container_name, "rdmagwctl", "--timeout", "2", "ready",
                                            check=False).returncode == 0 or None, timeout=30)
    status = podman("exec", container_name, "sh", "-c", "grep -E '^(Seccomp|NoNewPrivs|Uid):' /proc/1/status").stdout
    assert "Seccomp:\t2" in status, f"not under a seccomp filter:\n{status}"
    assert f"Uid:\t{SIDECAR_UID}" in status, status
    # A call the default profile forbids is still forbidden (it is not
    # unconfined): sysfs(3) (139 on x86_64), harmless, answers EPERM under it.
    probe = "import ctypes; c = ctypes.CDLL(None, use_errno=True); print(c.syscall(139, 3), ctypes.get_errno())"
    answer = podman("exec", container_name, "python3", "-c", probe).stdout.split()
    assert answer == ["-1", "1"], f"sysfs(3) answered {answer}: the profile does not confine"
    podman("stop", "-t", "20", container_name)
    assert inspect(container_name, "{{.State.ExitCode}}") == "0", logs(container_name)
    assert "event=ready" in logs(container_name)


def test_the_committed_profile_is_the_runtime_default_plus_io_uring():
    r = run([DOCKER / "make-seccomp-profile", "--check"], check=False)
    assert r.returncode == 0, r.stdout + r.stderr
