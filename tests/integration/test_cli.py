# SPDX-License-Identifier: Apache-2.0
"""Command line: --check, --help, --version."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from clients import free_port
from conftest import check_sanitizers, render_config, sanitized

ERROR_LINE = re.compile(r"^.+:\d+:\d+: \S+: .+")


def run(binary, *args, timeout=10, env=None):
    r = subprocess.run([binary, *args], stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=timeout, env=env)
    out, err = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    check_sanitizers(" ".join(map(str, [binary, *args])), out + err, r.returncode)
    return r.returncode, out, err


def valid_config() -> str:
    return render_config(
        "host-a", tunnel_port=free_port(), admin_port=free_port(),
        peers=[("host-b", free_port())],
        listeners=[{"name": "echo", "listen": f"tcp:127.0.0.1:{free_port()}", "peer": "host-b",
                    "target": "tcp:127.0.0.1:6379"}],
        targets=["tcp:127.0.0.1:6379"])


def error_lines(out: str) -> list[str]:
    return [l for l in out.splitlines() if ERROR_LINE.match(l)]


def test_check_valid_config_exits_0(rdmagw_bin, tmp_path):
    cfg = tmp_path / "ok.yaml"
    cfg.write_text(valid_config())
    rc, out, err = run(rdmagw_bin, "--check", "--config", str(cfg))
    assert rc == 0, f"--check rejected a valid config (rc={rc}):\n{out}{err}"


def test_check_unknown_key_exits_2_with_file_line_col(rdmagw_bin, tmp_path):
    text = valid_config()
    lineno = len(text.splitlines()) + 1
    cfg = tmp_path / "unknown.yaml"
    cfg.write_text(text + "bogus_key: 1\n")
    rc, out, err = run(rdmagw_bin, "--check", "--config", str(cfg))
    assert rc == 2, f"rc={rc}\n{out}{err}"
    lines = error_lines(out + err)
    assert lines, f"no FILE:LINE:COL: key: message line in:\n{out}{err}"
    assert any(l.startswith(f"{cfg}:{lineno}:") and "bogus_key" in l for l in lines), (
        f"no error at {cfg}:{lineno} naming bogus_key:\n{out}{err}")


def test_check_bad_port_exits_2_with_file_line_col(rdmagw_bin, tmp_path):
    text = valid_config()
    lines_in = text.splitlines()
    idx = next(i for i, l in enumerate(lines_in) if l.startswith("  tcp_port:"))
    lines_in[idx] = "  tcp_port: 70000"
    cfg = tmp_path / "badport.yaml"
    cfg.write_text("\n".join(lines_in) + "\n")
    rc, out, err = run(rdmagw_bin, "--check", "--config", str(cfg))
    assert rc == 2, f"rc={rc}\n{out}{err}"
    lines = error_lines(out + err)
    assert lines, f"no FILE:LINE:COL: key: message line in:\n{out}{err}"
    assert any(l.startswith(f"{cfg}:{idx + 1}:") and "tcp_port" in l for l in lines), (
        f"no error at {cfg}:{idx + 1} naming tcp_port:\n{out}{err}")


def test_help_exits_0_with_usage_on_stdout(rdmagw_bin):
    rc, out, err = run(rdmagw_bin, "--help")
    assert rc == 0, f"rc={rc}\n{out}{err}"
    assert "--config" in out, f"usage on stdout does not mention --config:\n{out}"


def test_version_names_the_release_and_the_commit(rdmagw_bin):
    rc, out, err = run(rdmagw_bin, "--version")
    assert rc == 0, f"rc={rc}\n{out}{err}"
    m = re.fullmatch(r"rdmagw (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}(-dirty)?|unknown)\)\n", out)
    assert m, f"not 'rdmagw X.Y.Z (commit ...)':\n{out}{err}"
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent)
    if head.returncode == 0 and m.group(2) != "unknown":
        # A build of a checkout names the checkout's commit (the build ran
        # before this test, at the same HEAD).
        assert m.group(2).removesuffix("-dirty") == head.stdout.strip(), (out, head.stdout)


def test_options_take_their_value_either_way_and_every_one_is_checked(rdmagw_bin, tmp_path):
    """One convention, as rdmagwctl's: `--opt value` and `--opt=value`;
    --check refuses any option a start would refuse (exit 2, naming it)."""
    cfg = tmp_path / "ok.yaml"
    cfg.write_text(valid_config())
    for args in (["--config", str(cfg)], [f"--config={cfg}"], ["-c", str(cfg)],
                 ["-c", str(cfg), "--log-level", "debug"], ["-c", str(cfg), "--log-level=warn"]):
        rc, out, err = run(rdmagw_bin, "--check", *args)
        assert rc == 0, (args, rc, out, err)
    refused = {
        ("--log-level", "bogus"): "--log-level 'bogus' must be one of debug, info, warn, error",
        ("--log-level=bogus",): "--log-level 'bogus' must be one of",
        ("--log-level",): "--log-level needs a value",
        ("--check=yes",): "--check takes no value",
        ("--takeover=1",): "--takeover takes no value",
        ("--bogus",): "unknown option '--bogus'",
        ("extra",): "unexpected argument 'extra'",
    }
    for extra, said in refused.items():
        rc, out, err = run(rdmagw_bin, "--check", "-c", str(cfg), *extra)
        assert rc == 2 and said in err, (extra, rc, out, err)
    rc, out, err = run(rdmagw_bin, "--check")
    assert rc == 2 and "--config FILE is required" in err, (rc, err)


def test_transport_rdma_without_a_device_exits_1_saying_why(rdmagw_bin, tmp_path):
    """`transport: rdma` never falls back: on a host with no RDMA device it
    refuses to start and names the key and the reason. (`auto` on the same
    host runs on TCP; every other test here does that.)"""
    import glob
    import pytest
    if glob.glob("/sys/class/infiniband/*"):
        pytest.skip("this host has an RDMA device; the lab tests cover transport: rdma")
    text = render_config("host-a", tunnel_port=free_port(), admin_port=free_port(),
                         tunnel_extra={"rdma_port": free_port()})
    text = text.replace("transport: tcp", "transport: rdma")
    cfg = tmp_path / "rdma.yaml"
    cfg.write_text(text)
    code, out, err = run(rdmagw_bin, "--config", str(cfg))
    assert code == 1, (code, out, err)
    assert "event=transport_unavailable" in err and "key=tunnel.transport" in err
    assert "no RDMA device" in err


def test_too_few_threads_fails_start_naming_the_thread(rdmagw_bin):
    """A pids/threads limit (RLIMIT_NPROC here, a container's pids.max in
    practice) below 1 main + 1 admin + `workers` threads: rdmagw exits 1 at
    once, saying which thread could not start, instead of hanging."""
    import os
    import shutil
    import tempfile
    work = tempfile.mkdtemp(prefix="rdmagw-nproc-")
    try:
        os.chmod(work, 0o755)  # read by the unprivileged uid below
        cfg = os.path.join(work, "n.yaml")
        with open(cfg, "w") as f:
            # auth=None (a loopback tunnel): the unprivileged uid below could not read the key file.
            f.write(render_config("host-a", tunnel_port=free_port(), admin_port=free_port(), workers=4, auth=None))
        os.chmod(cfg, 0o644)
        # On the sanitizer build: LeakSanitizer's exit check needs a thread of
        # its own, which this limit refuses (a fatal error of LSan, not a leak);
        # AddressSanitizer and UBSan stay on.
        asan_options = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"), "detect_leaks=0"]))
        env = dict(os.environ, ASAN_OPTIONS=asan_options)
        for limit, expect in [(1, "cannot start the admin thread"), (3, "event=worker_failed worker=1")]:
            # A uid nothing else runs as, so the limit counts only this process.
            code, out, err = run("prlimit", f"--nproc={limit}", "setpriv", "--reuid=64321", "--regid=64321",
                                 "--clear-groups", rdmagw_bin, "--config", cfg, timeout=20, env=env)
            assert code == 1, (limit, code, err)
            assert expect in err and "Resource temporarily unavailable" in err, (limit, err)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_no_address_space_for_the_slab_is_a_clear_error_not_an_abort(rdmagw_bin, tmp_path):
    """`ulimit -v` (or strict overcommit) refuses the buffer slab each worker
    reserves: rdmagw says so and exits 1; it used to end in `terminate
    called ...` (exit 134)."""
    import pytest
    if sanitized(rdmagw_bin):
        pytest.skip("ASan and TSan reserve terabytes of address space: no `ulimit -v` lets them start")
    cfg = tmp_path / "v.yaml"
    cfg.write_text(render_config("host-a", tunnel_port=free_port(), admin_port=free_port(), transport="tcp",
                                 workers=1))
    # Enough for the process and its threads, not for a worker's ~1 GiB slab.
    code, out, err = run("prlimit", f"--as={768 << 20}", rdmagw_bin, "--config", str(cfg), timeout=20)
    assert code == 1, (code, out, err)
    assert "event=worker_failed" in err and "for the buffer slab" in err and "ulimit -v" in err, err
    assert "terminate called" not in err


def test_worker_cpus_pins_each_worker_and_a_cpu_it_may_not_use_fails_start(rdmagw_bin, sidecar):
    """worker_cpus: worker i runs on worker_cpus[i % n], pinned before it
    allocates; a CPU outside the process's affinity stops the start, naming
    the key and the CPUs it may use."""
    import os
    cpus = sorted(os.sched_getaffinity(0))
    text = render_config("host-a", tunnel_port=free_port(), admin_port=free_port(), workers=2,
                         extra_lines=[f"worker_cpus: [{cpus[-1]}]"])
    sc = sidecar("host-a", text)
    sc.start()
    log = sc.log_text()
    for w in (0, 1):
        assert f"event=worker_pinned worker={w} cpu={cpus[-1]}" in log, log
    # Both worker threads run on that CPU only (the main and admin threads
    # are not pinned).
    pinned = []
    for tid in os.listdir(f"/proc/{sc.pid}/task"):
        with open(f"/proc/{sc.pid}/task/{tid}/status") as f:
            allowed = next(l.split()[1] for l in f if l.startswith("Cpus_allowed_list:"))
        pinned += [tid] if allowed == str(cpus[-1]) else []
    assert len(pinned) >= 2, pinned
    sc.stop()

    bad = max(cpus) + 1
    text = text.replace(f"worker_cpus: [{cpus[-1]}]", f"worker_cpus: [{cpus[0]}, {bad}]")
    cfg = sc.config_path
    cfg.write_text(text)
    code, out, err = run(rdmagw_bin, "--config", str(cfg))
    assert code == 1, (code, out, err)
    assert "event=worker_failed" in err and f"worker_cpus[1]: cannot run worker 1 on CPU {bad}" in err, err
    assert "this process may use CPUs " + ",".join(map(str, cpus)) in err, err
