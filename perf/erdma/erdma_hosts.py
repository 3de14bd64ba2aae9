# SPDX-License-Identifier: Apache-2.0
"""Running things on the two hosts of the eRDMA kit, the same way on both.

Every operation is one POSIX sh script, run either here (`sh -c`) or on the
server (`ssh -o BatchMode=yes HOST sh -c '...'`), each with a timeout. So
the code that starts, watches, measures and stops a process on the server is
the code that does it on the client, and `--server local` (both sides on
this host) exercises all of it without ssh.

Background processes are started detached from the shell that starts them
(their output in a log file, their PID echoed back), so an ssh session need
not stay open while they run; they are stopped by that PID.
"""
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # noqa: E402  (perf/benchlib.py)

SSH_OPTIONS = ("BatchMode=yes",          # never prompt: a password prompt would hang the run
               "ConnectTimeout=10",
               "ServerAliveInterval=5",  # a dead link ends ssh within ~15 s, not at TCP's timeout
               "ServerAliveCountMax=3")

# Raise the memory-lock limit as far as this user may before exec: rdmagw
# pins workers x tunnel.rdma.slab_size for RDMA (docs/rdma.md).
RAISE_MEMLOCK = 'ulimit -l unlimited 2>/dev/null || ulimit -l "$(ulimit -H -l)" 2>/dev/null'


class HostError(RuntimeError):
    pass


def q(word) -> str:
    return shlex.quote(str(word))


def start_script(workdir: str, name: str, argv: list, cpus=None) -> str:
    """Starts argv in the background in workdir, output to NAME.log, and
    prints its PID. `exec` keeps the PID the one of argv itself (through
    taskset, which execs too)."""
    cmd = " ".join(q(a) for a in argv)
    if cpus:
        cmd = f"taskset -c {q(','.join(str(c) for c in cpus))} {cmd}"
    return (f"cd {q(workdir)} && ( {RAISE_MEMLOCK}; exec {cmd} ) "
            f">{q(name + '.log')} 2>&1 </dev/null & echo $!")


def wait_log_script(pid: int, log: str, needle: str, seconds: float) -> str:
    """Exit 0 once the log holds needle; 3 if the process ended first; 4 at the timeout."""
    tries = max(1, int(seconds * 10))
    return (f"i=0; while [ $i -lt {tries} ]; do "
            f"grep -qF -- {q(needle)} {q(log)} 2>/dev/null && exit 0; "
            f"{alive_test(pid)} || exit 3; sleep 0.1; i=$((i+1)); done; exit 4")


def alive_test(pid: int) -> str:
    """A shell test, true while pid runs. A zombie counts as gone: a process
    whose parent is not waiting for it (ours are orphans) may stay one."""
    return f'[ "$(sed "s/.*) //" /proc/{int(pid)}/stat 2>/dev/null | cut -c1)" != Z ] && [ -e /proc/{int(pid)} ]'


def stop_script(pid: int, seconds: int = 15) -> str:
    """SIGTERM, then SIGKILL if it has not gone after `seconds` (rdmagw lets
    open streams drain on SIGTERM; there are none by then)."""
    pid = int(pid)
    return (f"kill {pid} 2>/dev/null || exit 0; i=0; while [ $i -lt {seconds * 10} ]; do "
            f"{alive_test(pid)} || exit 0; sleep 0.1; i=$((i+1)); done; kill -9 {pid} 2>/dev/null; exit 0")


class Host:
    """One host: `ssh_dest` None is this machine."""

    def __init__(self, role: str, ssh_dest=None, ssh_options=(), timeout: float = 30.0):
        self.role = role
        self.ssh_dest = ssh_dest
        self.ssh_options = list(ssh_options)
        self.timeout = timeout

    def __str__(self):
        return f"{self.role} ({self.ssh_dest})" if self.ssh_dest else f"{self.role} (this host)"

    def argv(self, script: str) -> list:
        if not self.ssh_dest:
            return ["sh", "-c", script]
        opts = []
        for o in list(SSH_OPTIONS) + self.ssh_options:
            opts += ["-o", o]
        # ssh hands the remote login shell one string; `sh -c '...'` makes
        # the script run under sh whatever that shell is.
        return ["ssh", *opts, self.ssh_dest, "sh -c " + q(script)]

    def run(self, script: str, input_text=None, timeout=None, check=True) -> subprocess.CompletedProcess:
        timeout = timeout or self.timeout
        try:
            r = subprocess.run(self.argv(script), input=input_text, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HostError(f"{self}: did not finish in {timeout:.0f} s: {script[:200]}") from None
        if self.ssh_dest and r.returncode == 255:
            raise HostError(f"{self}: ssh failed (BatchMode: key-based login needed; see --ssh-option): "
                            f"{r.stderr.strip()[-500:]}")
        if check and r.returncode != 0:
            raise HostError(f"{self}: exit {r.returncode}: {script[:200]}\n{(r.stdout + r.stderr).strip()[-1500:]}")
        return r

    # --- files -------------------------------------------------------------------

    def mkdtemp(self) -> str:
        return self.run('mktemp -d "${TMPDIR:-/tmp}/rdmagw-erdma.XXXXXX"').stdout.strip()

    def write_file(self, path: str, text: str, mode: str = "0600") -> None:
        # umask first: the file is never readable by others, even for a moment.
        self.run(f"umask 077 && cat > {q(path)} && chmod {mode} {q(path)}", input_text=text)

    def read_file(self, path: str) -> str:
        return self.run(f"cat {q(path)}").stdout

    def tail(self, path: str, lines: int = 30) -> str:
        return self.run(f"tail -n {int(lines)} {q(path)}", check=False).stdout

    # --- processes ---------------------------------------------------------------

    def start(self, workdir: str, name: str, argv: list, cpus=None) -> int:
        out = self.run(start_script(workdir, name, argv, cpus)).stdout.strip()
        if not out.isdigit():
            raise HostError(f"{self}: starting {name} printed {out!r}, not a PID")
        return int(out)

    def wait_log(self, pid: int, log: str, needle: str, seconds: float = 30.0) -> None:
        r = self.run(wait_log_script(pid, log, needle, seconds), timeout=seconds + self.timeout, check=False)
        if r.returncode == 0:
            return
        why = {3: "it exited", 4: f"no '{needle}' after {seconds:.0f} s"}.get(r.returncode, f"exit {r.returncode}")
        raise HostError(f"{self}: {os.path.basename(log)} (pid {pid}): {why}; its log ends:\n{self.tail(log)}")

    def cpu_seconds(self, pids: list) -> dict:
        """{pid: utime+stime in seconds}, read in one command. The ticks are
        converted with this host's CLK_TCK (100 on every Linux this targets)."""
        if not pids:
            return {}
        r = self.run("cat " + " ".join(f"/proc/{int(p)}/stat" for p in pids), check=False)
        lines = r.stdout.splitlines()
        if r.returncode != 0 or len(lines) != len(pids):
            raise HostError(f"{self}: cannot read the CPU time of pids {pids} (has one exited?): "
                            f"{r.stderr.strip()}")
        return {p: benchlib.parse_proc_stat_cpu(line) for p, line in zip(pids, lines)}

    def stop(self, pid: int, seconds: int = 15) -> None:
        self.run(stop_script(pid, seconds), timeout=seconds + self.timeout, check=False)
