# SPDX-License-Identifier: Apache-2.0
"""perf/erdma: the eRDMA redis kit, in the parts that need no eRDMA and no ssh.

Arguments and their errors, the rdmagw configurations (validated by the
real parser, `rdmagw --check`, with 127.0.0.1 addresses), redis.conf, the
redis-benchmark command, parsing of recorded output, the medians, ratios
and CPU per request, the report; the host runner's scripts on this host; and
one short whole run with `--server local` (direct and the TCP pair, all on
127.0.0.1).

    /usr/bin/python3 -m pytest tests/perf -q -p no:cacheprovider
"""
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "perf"))
sys.path.insert(0, os.path.join(ROOT, "perf", "erdma"))
import benchlib  # noqa: E402
import erdma_bench  # noqa: E402
import erdma_hosts  # noqa: E402
import erdma_kit as kit  # noqa: E402

RDMAGW = os.environ.get("RDMAGW_BIN", os.path.join(ROOT, "build", "bin", "rdmagw"))
TICK = os.sysconf("SC_CLK_TCK")


def no_route(ip):
    raise AssertionError(f"route lookup for {ip} not expected in this test")


def parse(*argv, route=no_route):
    return kit.parse_args(list(argv), route=route)


def parse_error(capsys, *argv, route=no_route) -> str:
    with pytest.raises(SystemExit) as e:
        kit.parse_args(list(argv), route=route)
    assert e.value.code == 2
    return capsys.readouterr().err


def sample(name):
    with open(os.path.join(HERE, "samples", name), newline="") as f:
        return f.read()


# --- arguments -------------------------------------------------------------------


def test_defaults_are_the_brief_load():
    o = parse("--server", "local")
    assert o.local and o.server_ip == "127.0.0.1" and o.client_ip == "127.0.0.1"
    assert o.paths == ["direct", "rdma", "tcp"]
    assert (o.clients, o.data_size, o.threads, o.tests, o.pipeline) == (100, 512, 4, ["set"], 1)
    assert o.rounds == 5 and o.workers == 4 and o.redis_port == 6379 and o.base_port == 7471
    assert kit.bench_label(o) == "redis-benchmark -c 100 -d 512 --threads 4 -t set -n 2000000"


def test_remote_server_address_comes_from_the_ssh_destination():
    asked = []

    def route(ip):
        asked.append(ip)
        return "10.0.0.1"

    o = parse("--server", "root@10.0.0.2", route=route)
    assert (o.server_ip, o.client_ip, asked) == ("10.0.0.2", "10.0.0.1", ["10.0.0.2"])
    o = parse("--server", "bench-b", "--server-ip", "10.0.0.2", "--client-ip", "10.0.0.1")
    assert (o.server_ip, o.client_ip) == ("10.0.0.2", "10.0.0.1")
    assert parse("--server", "root@[fd00::2]", "--client-ip", "fd00::1").server_ip == "fd00::2"


def test_route_lookup_sends_nothing_and_finds_loopback_for_loopback():
    assert kit.route_source_ip("127.0.0.1") == "127.0.0.1"


def test_order_of_paths_is_fixed_and_paths_can_be_left_out():
    assert parse("--server", "local", "--paths", "tcp,direct").paths == ["direct", "tcp"]


@pytest.mark.parametrize("argv, message", [
    ([], "the following arguments are required: --server"),
    (["--rounds", "0"], "argument --rounds: must be between 1 and 100, got 0"),
    (["--rounds", "five"], "argument --rounds: must be an integer, got 'five'"),
    (["--requests", "-5"], "argument --requests: must be at least 1, got -5"),
    (["--paths", "direct,roce"], "argument --paths: 'direct,roce': each path must be one of direct, rdma, tcp"),
    (["--paths", "rdma,tcp"], "argument --paths: 'rdma,tcp': 'direct' is needed"),
    (["--tests", "set,lrange_100"], "argument --tests: 'set,lrange_100': supported tests are set,get"),
    (["--gw-cpus", "3-1"], "argument --gw-cpus: '3-1': range '3-1' runs backwards"),
    (["--gw-cpus", "0-3,x"], "argument --gw-cpus: '0-3,x' is not a CPU list like 0-3,8 ('x')"),
    (["--redis-cpus", "2048"], "argument --redis-cpus: '2048': CPU 2048 is above 1023"),
    (["--buffer-size", "2MiB"], "argument --buffer-size: must be between 1024 and 1048576 bytes, got '2MiB'"),
    (["--buffer-size", "16KB"], "argument --buffer-size: must be a byte count or a number with KiB, MiB or GiB, "
                                "got '16KB'"),
    (["--slab-size", "512KiB"], "argument --slab-size: must be between 1048576 and 68719476736 bytes"),
    (["--bench-extra", "-r 1000 -n 5"], "argument --bench-extra: '-r 1000 -n 5': -n is set by the kit"),
    (["--redis-port", "7472"], "argument --redis-port: 7472 is one of the rdmagw ports 7471-7484"),
    (["--base-port", "65530"], "argument --base-port: must be between 1024 and 65522, got 65530"),
    (["--server-ip", "bench-b"], "argument --server-ip: must be a numeric IPv4 or IPv6 address, got 'bench-b'"),
])
def test_bad_arguments_name_the_argument_the_value_and_why(capsys, argv, message):
    server = [] if not argv else ["--server", "local"]
    err = parse_error(capsys, *(server + argv))
    assert message in err, err
    assert err.startswith("usage: erdma_bench.py")


@pytest.mark.parametrize("argv, message", [
    (["--server", "-oProxyCommand=touch /tmp/x"], "argument --server: '-oProxyCommand=touch /tmp/x' is not an ssh "
                                                  "destination like user@10.0.0.2"),
    (["--server", "root@bench-b"], "argument --server-ip: required when --server names a host ('bench-b')"),
    (["--server", "root@10.0.0.2", "--server-ip", "127.0.0.1"],
     "argument --server-ip: 127.0.0.1 is a loopback address, but --server root@10.0.0.2 is another host"),
    (["--server", "root@10.0.0.2", "--client-ip", "127.0.0.1"], "argument --client-ip: 127.0.0.1 is a loopback"),
    (["--server", "root@10.0.0.2", "--client-ip", "10.0.0.2"], "argument --client-ip: 10.0.0.2 is also --server-ip"),
])
def test_bad_hosts(capsys, argv, message):
    err = parse_error(capsys, *argv)
    assert message in err, err


def test_no_route_to_the_server_says_to_give_client_ip(capsys):
    def route(ip):
        raise OSError(101, "Network is unreachable")

    err = parse_error(capsys, "--server", "root@10.0.0.2", route=route)
    assert "argument --client-ip: no route from this host to --server-ip 10.0.0.2" in err
    assert "give --client-ip" in err


def test_help_answers(capsys):
    with pytest.raises(SystemExit) as e:
        kit.parse_args(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for needle in ("--server USER@HOST", "NetACC", "security group", "7471-7473", "--gw-cpus", "--dry-run",
                   "perf/erdma/README.md"):
        assert needle in out


def test_cpu_lists_and_byte_sizes():
    assert kit.parse_cpu_list("0-3,8") == [0, 1, 2, 3, 8]
    assert kit.parse_cpu_list("1,1-2") == [1, 2]
    assert [kit.parse_byte_size(t) for t in ("65536", "64KiB", "128 MiB", "1GiB")] == [65536, 65536, 128 << 20,
                                                                                       1 << 30]


def test_memlock():
    o = parse("--server", "local", "--workers", "4", "--slab-size", "64MiB")
    assert kit.memlock_needed_kib(o) == 4 * 64 * 1024
    assert kit.memlock_ok("unlimited\n", 10 ** 9)
    assert kit.memlock_ok("262144\n", 262144) and not kit.memlock_ok("8192\n", 262144)
    with pytest.raises(ValueError, match="ulimit -l printed"):
        kit.memlock_ok("sh: ulimit: bad", 1)


# --- ports and files -------------------------------------------------------------


def test_port_plan_never_shares_a_port():
    # --server local puts all four rdmagw processes and redis on one address.
    plan = kit.port_plan(7471)
    assert len(set(plan.values())) == len(plan) == 14
    assert min(plan.values()) == 7471 and max(plan.values()) == 7484


def test_ports_to_open_on_the_server():
    assert kit.server_open_ports(parse("--server", "local")) == [6379, 7471, 7472, 7473]
    assert kit.server_open_ports(parse("--server", "local", "--paths", "direct,tcp", "--redis-port", "7000")) == [
        7000, 7473]


def remote_opts(*extra):
    return parse("--server", "root@10.0.0.2", "--client-ip", "10.0.0.1", *extra)


def test_rdma_pair_configuration():
    o = remote_opts("--gw-cpus", "8-11", "--buffer-size", "64KiB", "--slab-size", "256MiB", "--busy-poll-us", "50",
                    "--rdma-device", "erdma_0")
    a, b = kit.gateway_configs(o, "rdma", "/etc/k/a", "/etc/k/b")
    assert 'address: "10.0.0.1"' in a and "transport: rdma" in a
    assert 'key_files: ["/etc/k/a"]' in a and 'key_files: ["/etc/k/b"]' in b
    assert '- {name: b, address: "10.0.0.2", tcp_port: 7471, rdma_port: 7472, connect: always}' in a
    assert 'listen: "tcp:127.0.0.1:7479", peer: b, target: "tcp:127.0.0.1:6379"' in a
    assert "worker_cpus: [8, 9, 10, 11]" in a and "worker_cpus: [8, 9, 10, 11]" in b
    for text in (a, b):
        assert "buffer_size: 65536" in text
        assert '  rdma:\n    device: "erdma_0"\n    slab_size: 268435456\n    busy_poll_us: 50\n' in text
    assert 'address: "10.0.0.2"' in b and "tcp_port: 7471\n  rdma_port: 7472\n  transport: rdma" in b
    assert b.rstrip().endswith('targets: ["tcp:127.0.0.1:6379"]')  # B opens redis only
    assert "peers" not in b and "listeners" not in b


def test_tcp_pair_configuration_has_no_rdma_section():
    a, b = kit.gateway_configs(remote_opts("--busy-poll-us", "50"), "tcp", "/k", "/k")
    assert "transport: tcp" in a and "transport: tcp" in b
    assert "rdma:" not in a and "rdma:" not in b
    assert "tcp_port: 7473, rdma_port: 7474" in a  # the TCP pair's B, not the RDMA pair's
    assert 'listen: "tcp:127.0.0.1:7480"' in a


def test_ipv6_addresses_are_quoted_and_bracketed_where_needed():
    o = parse("--server", "root@[fd00::2]", "--client-ip", "fd00::1")
    a, b = kit.gateway_configs(o, "rdma", "/k", "/k")
    assert 'address: "fd00::1"' in a and 'address: "fd00::2"' in a
    assert kit.benchmark_argv(o, "direct", 10, "pw")[:5] == ["redis-benchmark", "-h", "fd00::2", "-p", "6379"]


@pytest.fixture
def rdmagw_built():
    # Fails rather than skips: a missing binary must not pass for a tested kit.
    if not os.access(RDMAGW, os.X_OK):
        pytest.fail(f"{RDMAGW} not built: run tools/dev/build")


@pytest.fixture
def redis_installed():
    missing = [t for t in ("redis-server", "redis-benchmark") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run tools/dev/install-deps")


needs_rdmagw = pytest.mark.usefixtures("rdmagw_built")


def check(path):
    return subprocess.run([RDMAGW, "--check", "--config", str(path)], capture_output=True, text=True, timeout=30)


@needs_rdmagw
@pytest.mark.parametrize("extra", [[], ["--gw-cpus", "0", "--buffer-size", "64KiB", "--slab-size", "64MiB",
                                        "--busy-poll-us", "50", "--rdma-device", "erdma_0", "--workers", "2"]])
def test_generated_configurations_pass_rdmagw_check(tmp_path, extra):
    o = parse("--server", "local", *extra)  # 127.0.0.1 on both sides
    key = tmp_path / "key"
    key.write_text(os.urandom(32).hex() + "\n")
    key.chmod(0o400)
    for path in ("rdma", "tcp"):
        for side, text in zip("ab", kit.gateway_configs(o, path, str(key), str(key))):
            f = tmp_path / f"{side}-{path}.yaml"
            f.write_text(text)
            r = check(f)
            assert r.returncode == 0, f"{f.name}:\n{text}\n{r.stdout}{r.stderr}"


@needs_rdmagw
def test_the_check_is_real(tmp_path):
    # The same files with one value broken are refused: the test above proves something.
    key = tmp_path / "key"
    key.write_text(os.urandom(32).hex())
    key.chmod(0o400)
    a, _ = kit.gateway_configs(parse("--server", "local"), "rdma", str(key), str(key))
    f = tmp_path / "bad.yaml"
    f.write_text(a.replace("transport: rdma", "transport: roce"))
    r = check(f)
    assert r.returncode == 2 and "tunnel.transport: must be one of auto, rdma, tcp, got 'roce'" in r.stderr


def test_redis_conf():
    conf = kit.redis_conf(remote_opts("--redis-io-threads", "4", "--redis-port", "6400"), "s3cret")
    lines = conf.splitlines()
    for line in ("port 6400", "bind 10.0.0.2 127.0.0.1", 'save ""', "appendonly no", "requirepass s3cret",
                 "io-threads 4", "io-threads-do-reads yes"):
        assert line in lines
    local = kit.redis_conf(parse("--server", "local"), "pw").splitlines()
    assert "bind 127.0.0.1" in local and not any(line.startswith("io-threads") for line in local)


def test_benchmark_commands():
    o = remote_opts("--bench-cpus", "4-7", "--bench-extra", "-r 1000000", "--tests", "set,get", "--pipeline", "16")
    direct = kit.benchmark_argv(o, "direct", 5000, "pw")
    assert direct == ["taskset", "-c", "4,5,6,7", "redis-benchmark", "-h", "10.0.0.2", "-p", "6379", "-a", "pw",
                      "-c", "100", "-d", "512", "--threads", "4", "-P", "16", "-t", "set,get", "-n", "5000", "-q",
                      "-r", "1000000"]
    rdma = kit.benchmark_argv(o, "rdma", 5000, "pw")
    assert rdma[4:8] == ["-h", "127.0.0.1", "-p", "7479"]
    assert kit.benchmark_argv(o, "tcp", 5000, "pw")[4:8] == ["-h", "127.0.0.1", "-p", "7480"]
    assert kit.bench_label(o) == "redis-benchmark -c 100 -d 512 --threads 4 -t set,get -n 2000000 -P 16 -r 1000000"


# --- output and numbers ----------------------------------------------------------


def test_recorded_redis_benchmark_output():
    o = parse("--server", "local")
    assert kit.parse_bench_output(o, sample("redis-benchmark-set-threads.txt")) == {"SET": 39761.43}
    both = parse("--server", "local", "--tests", "get,set")
    assert kit.parse_bench_output(both, sample("redis-benchmark-set-get.txt")) == {"GET": 89285.71, "SET": 87719.30}
    with pytest.raises(ValueError, match="redis-benchmark printed no result for GET"):
        kit.parse_bench_output(both, sample("redis-benchmark-set-threads.txt"))
    with pytest.raises(ValueError, match="Connection refused"):
        kit.parse_bench_output(o, sample("redis-benchmark-refused.txt"))


def test_cpu_per_request_from_recorded_proc_stat():
    before_text = sample("proc-stat-redis-server.txt")  # utime 7, stime 33
    head, rest = before_text[:before_text.rindex(")") + 2], before_text[before_text.rindex(")") + 2:].split()
    rest[11], rest[12] = str(7 + 2 * TICK), str(33 + 3 * TICK)  # 5 s more of CPU
    before = benchlib.parse_proc_stat_cpu(before_text)
    after = benchlib.parse_proc_stat_cpu(head + " ".join(rest))
    assert kit.cpu_us_per_request(before, after, 1_000_000) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="went backwards"):
        kit.cpu_us_per_request(after, before, 10)
    with pytest.raises(ValueError, match="requests must be positive"):
        kit.cpu_us_per_request(0, 1, 0)


def run(rnd, path, rps, requests=1_000_000, a=None, b=None, redis=1.0):
    cpu = {"redis": redis}
    if a is not None:
        cpu.update(a=a, b=b)
    return {"round": rnd, "path": path, "rps": {"SET": rps}, "requests": requests, "cpu_s": cpu}


RUNS = [
    run(1, "direct", 300_000, redis=3.0), run(1, "rdma", 450_000, a=2.0, b=2.5, redis=2.0),
    run(1, "tcp", 210_000, a=4.0, b=4.5),
    run(2, "rdma", 600_000, a=3.0, b=3.0), run(2, "tcp", 240_000, a=5.0, b=5.0), run(2, "direct", 330_000, redis=3.3),
    run(3, "tcp", 180_000, a=6.0, b=6.0), run(3, "direct", 200_000, redis=2.5), run(3, "rdma", 500_000, a=2.5, b=2.0),
]


def test_summary_medians_ratios_and_cpu():
    s = kit.summarise(RUNS, ["direct", "rdma", "tcp"])
    assert s["direct"]["rps"] == {"SET": 300_000} and s["direct"]["ratio"] == {"SET": 1.0}
    assert s["direct"]["cpu_us"] == {"redis": 3.0}  # no rdmagw on the direct path
    assert s["rdma"]["rps"]["SET"] == 500_000
    assert s["rdma"]["ratio"]["SET"] == pytest.approx(500 / 300)
    # Same-round ratios: 1.5, 600/330, 2.5.
    assert s["rdma"]["ratio_range"]["SET"] == pytest.approx((1.5, 2.5))
    assert s["rdma"]["cpu_us"] == pytest.approx({"a": 2.5, "b": 2.5, "pair": 4.5, "redis": 1.0})
    assert s["tcp"]["rps"]["SET"] == 210_000 and s["tcp"]["ratio"]["SET"] == pytest.approx(0.7)
    assert s["tcp"]["cpu_us"] == pytest.approx({"a": 5.0, "b": 5.0, "pair": 10.0, "redis": 1.0})
    assert all(v["rounds"] == 3 for v in s.values())


def test_summary_needs_direct():
    with pytest.raises(ValueError, match="no direct run"):
        kit.summarise([r for r in RUNS if r["path"] != "direct"], ["direct", "rdma"])


def test_results_table():
    table = kit.results_table(kit.summarise(RUNS, ["direct", "rdma", "tcp"])).splitlines()
    assert table[0] == ("| path | SET req/s | SET vs direct | rdmagw A µs CPU/req | rdmagw B µs CPU/req | "
                        "A+B µs CPU/req | redis-server µs CPU/req |")
    assert table[2] == "| kernel TCP, direct | 300,000 | 1.00 | – | – | – | 3.00 |"
    assert table[3] == "| rdmagw pair, RDMA (eRDMA) | 500,000 | 1.67 (1.50-2.50) | 2.50 | 2.50 | 4.50 | 1.00 |"
    assert table[4] == "| rdmagw pair, TCP transport | 210,000 | 0.70 (0.70-0.90) | 5.00 | 5.00 | 10.00 | 1.00 |"


def test_netacc_line():
    s = kit.summarise(RUNS, ["direct", "rdma", "tcp"])
    line = kit.netacc_line(s)
    assert line.startswith("NetACC (Alibaba Cloud, published): redis SET 767k req/s over eRDMA vs 333k over "
                           "kernel TCP, 2.30x.")
    # 500k / 300k = 1.67x, which is 1.67 / 2.30 = 0.72 of NetACC's gain.
    assert "This run: rdmagw over eRDMA 500k vs direct 300k, 1.67x (0.72 of NetACC's gain" in line
    no_rdma = kit.summarise([r for r in RUNS if r["path"] != "rdma"], ["direct", "tcp"])
    assert "measured no SET over the RDMA pair" in kit.netacc_line(no_rdma)


def test_report(tmp_path):
    o = remote_opts("--label", "g8ae.4xlarge x2", "--gw-cpus", "8-11")
    s = kit.summarise(RUNS, o.paths)
    meta = {"date": "2026-11-24", "command": "perf/erdma/erdma_bench.py --server root@10.0.0.2", "commit": "abc1234",
            "hosts": {"client (10.0.0.1)": "kernel: 6.1\n"}, "sessions": {"rdma": "4 sessions on rdma"},
            "configs": {"a-rdma.yaml (client)": "node: x\n"}}
    report = kit.format_report(o, s, RUNS, meta)
    assert report.startswith("# redis over rdmagw on eRDMA vs kernel TCP (2026-11-24)\n")
    for needle in ("Hosts: g8ae.4xlarge x2.", "`perf/erdma/erdma_bench.py --server root@10.0.0.2` at abc1234",
                   "Load: `redis-benchmark -c 100 -d 512 --threads 4 -t set -n 2000000`", "median of 3 rounds",
                   "workers=4, worker_cpus 8,9,10,11", kit.results_table(s), kit.netacc_line(s),
                   "- rdmagw pair, RDMA (eRDMA): 4 sessions on rdma", "## Every run",
                   "| 1 | rdmagw pair, RDMA (eRDMA) | SET 450,000 | 2.00 | 2.50 | 2.00 |",
                   "client (10.0.0.1):\n\n```\nkernel: 6.1\n```", "```yaml\nnode: x\n```"):
        assert needle in report, needle


def test_report_is_never_overwritten(tmp_path):
    results = tmp_path / "perf" / "results"
    results.mkdir(parents=True)
    assert kit.default_out(str(tmp_path), "2026-11-24") == str(results / "2026-11-24-erdma-redis.md")
    (results / "2026-11-24-erdma-redis.md").write_text("x")
    (results / "2026-11-24-erdma-redis-2.md").write_text("x")
    assert kit.default_out(str(tmp_path), "2026-11-24") == str(results / "2026-11-24-erdma-redis-3.md")


# --- the host runner -------------------------------------------------------------


def test_ssh_command_is_batch_mode_and_runs_sh():
    h = erdma_hosts.Host("server", "root@10.0.0.2", ["IdentityFile=/k"])
    argv = h.argv("echo 'a b'; ulimit -l")
    assert argv[0] == "ssh" and argv[-2] == "root@10.0.0.2"
    assert "BatchMode=yes" in argv and "ConnectTimeout=10" in argv and "IdentityFile=/k" in argv
    assert argv[-1] == "sh -c 'echo '\"'\"'a b'\"'\"'; ulimit -l'"
    assert erdma_hosts.Host("client").argv("true") == ["sh", "-c", "true"]


def test_start_script_quotes_and_pins():
    s = erdma_hosts.start_script("/tmp/w d", "a-rdma", ["/opt/rdmagw", "--config", "/tmp/w d/a.yaml"], [2, 3])
    assert s.startswith("cd '/tmp/w d' && ( ulimit -l unlimited")
    assert "exec taskset -c 2,3 /opt/rdmagw --config '/tmp/w d/a.yaml' ) >a-rdma.log 2>&1 </dev/null & echo $!" in s


def test_local_host_start_measure_stop(tmp_path):
    h = erdma_hosts.Host("client", timeout=10)
    wd = str(tmp_path)
    pid = h.start(wd, "spin", ["sh", "-c", "echo ready; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 30"])
    try:
        h.wait_log(pid, f"{wd}/spin.log", "ready", seconds=5)
        cpu = h.cpu_seconds([pid, os.getpid()])
        assert set(cpu) == {pid, os.getpid()} and all(v >= 0 for v in cpu.values())
    finally:
        h.stop(pid, seconds=5)
    assert not erdma_alive(pid)  # gone, or a zombie nobody has reaped yet: either way not running
    with open("/proc/sys/kernel/pid_max") as f:
        never = int(f.read()) + 1
    with pytest.raises(erdma_hosts.HostError, match="cannot read the CPU time"):
        h.cpu_seconds([os.getpid(), never])


def erdma_alive(pid):
    r = subprocess.run(["sh", "-c", erdma_hosts.alive_test(pid)], timeout=5)
    return r.returncode == 0


def test_wait_log_reports_an_exit_with_the_log(tmp_path):
    h = erdma_hosts.Host("server", timeout=10)
    pid = h.start(str(tmp_path), "dies", ["sh", "-c", "echo 'bind: Address already in use'; exit 1"])
    with pytest.raises(erdma_hosts.HostError, match="dies.log \\(pid \\d+\\): it exited; its log ends:\n"
                                                     "bind: Address already in use"):
        h.wait_log(pid, str(tmp_path / "dies.log"), "Ready to accept connections", seconds=5)


def test_timeouts_and_failures_are_errors(tmp_path):
    h = erdma_hosts.Host("server", timeout=10)
    with pytest.raises(erdma_hosts.HostError, match="did not finish in 1 s"):
        h.run("sleep 5", timeout=1)
    with pytest.raises(erdma_hosts.HostError, match="exit 3: .*\nnope"):
        h.run("echo nope; exit 3")


def test_write_file_is_private(tmp_path):
    h = erdma_hosts.Host("client")
    h.write_file(str(tmp_path / "key"), "k" * 64, "0400")
    assert stat.S_IMODE(os.stat(tmp_path / "key").st_mode) == 0o400
    assert h.read_file(str(tmp_path / "key")) == "k" * 64


# --- the whole kit, on this host -------------------------------------------------


def test_dry_run_starts_nothing(capsys):
    assert erdma_bench.main(["--server", "local", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# open on the server, from the client: TCP 6379, 7471, 7472, 7473" in out
    assert "transport: rdma" in out and "transport: tcp" in out
    assert "# direct: redis-benchmark -h 127.0.0.1 -p 6379 -a '<password>'" in out


def free_block(n):
    """n consecutive ports free on 127.0.0.1."""
    for _ in range(50):
        base = random.randrange(20000, 60000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    pytest.fail("no block of 15 free ports on 127.0.0.1 after several tries")


def pids_with(text):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


@needs_rdmagw
@pytest.mark.usefixtures("redis_installed")
def test_local_smoke_run(tmp_path, monkeypatch, capsys):
    # Both sides on 127.0.0.1, the TCP pair only (no RDMA device here), a few
    # thousand requests: a second or two of light load.
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the hosts' work directories go there
    base = free_block(15)
    out = tmp_path / "report.md"
    started = time.time()
    rc = erdma_bench.main(["--server", "local", "--paths", "direct,tcp", "--rounds", "2", "--requests", "3000",
                           "--warmup-requests", "500", "--workers", "1", "--clients", "4", "--threads", "1",
                           "--base-port", str(base), "--redis-port", str(base + 14), "--out", str(out),
                           "--rdmagw", RDMAGW])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert time.time() - started < 60
    report = out.read_text()
    assert "| kernel TCP, direct |" in report and "| rdmagw pair, TCP transport |" in report
    assert "- rdmagw pair, TCP transport: 1 session on tcp (configured)" in report
    assert report.count("| 1 | ") == 2 and report.count("| 2 | ") == 2
    assert "NetACC" in captured.out
    # Everything it started is gone, and so are the key and the password.
    assert pids_with(str(tmp_path)) == [] and pids_with(f"127.0.0.1:{base + 14}") == []
    (workdir,) = tmp_path.glob("rdmagw-erdma.*")
    assert not (workdir / "key").exists() and not (workdir / "redis.conf").exists()
    assert (workdir / "a-tcp.log").exists() and (workdir / "redis.log").exists()
