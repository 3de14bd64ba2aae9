# SPDX-License-Identifier: Apache-2.0
"""perf/compare.py's own logic: its arguments, and how it turns runs into
ratios and the guard's verdict (CI runs the real thing, --guard)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "perf"))
import compare  # noqa: E402


def test_guard_narrows_the_run():
    a = compare.parse_args(["--guard"])
    assert a.paths == ["direct", "haproxy", "rdmagw"]
    assert a.tests == ["redis-set", "redis-get", "http-close"]
    assert a.requests <= 30000 and a.seconds <= 2


@pytest.mark.parametrize("argv, needle", [
    (["--paths", "direct,nginx"], "--paths 'direct,nginx': unknown nginx"),
    (["--tests", "hol"], "hol is read against pingpong"),
    (["--rounds", "0"], "--rounds 0: must be at least 1"),
    (["--tests", ""], "unknown (empty)"),
])
def test_bad_arguments_say_which_and_why(argv, needle, capsys):
    with pytest.raises(SystemExit):
        compare.parse_args(argv)
    assert needle in capsys.readouterr().err


def test_direct_is_always_measured():
    assert compare.parse_args(["--paths", "rdmagw"]).paths == ["direct", "rdmagw"]


def runs(rate, cpu, units):
    return [{"rate": rate, "cpu": cpu, "units": units}]


def test_guard_fails_when_rdmagw_costs_more_cpu_per_request_than_haproxy():
    results = {
        "redis-set": {"direct": runs(80000, 0, 1000), "haproxy": runs(30000, 0.020, 1000),
                      "rdmagw": runs(40000, 0.010, 1000)},
        "http-close": {"direct": runs(20000, 0, 1000), "haproxy": runs(7000, 0.100, 1000),
                       "rdmagw": runs(9000, 0.150, 1000)},
    }
    rows, worse = compare.targets_table(results, ["direct", "haproxy", "rdmagw"], ["redis-set", "http-close"], None)
    assert worse == ["http-close"]
    by_figure = {r[0]: r for r in rows}
    # 10 µs against 20 µs: 0.50, above the 0.33 target for SET.
    assert by_figure["CPU per request, redis-set (µs)"][3] == "0.50"
    assert by_figure["CPU per request, redis-set (µs)"][5] == "**no**"
    assert by_figure["http-close, ratio to direct"][1] == "0.45"


def test_haproxy_best_setting_is_chosen_per_figure():
    results = {"iperf3": {"direct": runs(20, 0, 10), "haproxy": runs(7, 12, 4),
                          "haproxy-splice": runs(13, 4, 8), "rdmagw": runs(6, 9, 3)}}
    rows, _ = compare.targets_table(results, ["direct", "haproxy", "haproxy-splice", "rdmagw"], ["iperf3"], None)
    by_figure = {r[0]: r for r in rows}
    assert "(haproxy-splice)" in by_figure["CPU per GiB of bulk (s)"][2]  # 0.5 s/GiB against 3
    assert by_figure["bulk throughput (Gbit/s)"][3] == f"{6 / 13:.2f}"


def test_everyones_cpu_predicts_the_ratio_and_what_a_target_leaves_the_pair():
    def run(rate, cpu, app, units, wall):
        return [{"rate": rate, "cpu": cpu, "app_cpu": app, "units": units, "wall": wall}]
    # Direct: 20 µs of client + backend per request, one core's worth busy.
    # Through rdmagw the client and backend cost 22 µs and the pair 18 µs:
    # 40 µs in all, 0.8 of a core busy, 0.45 of direct's rate.
    results = {"http-keepalive": {"direct": run(100000, 0, 0.020, 1000, 0.02),
                                  "rdmagw": run(45000, 0.018, 0.022, 1000, 0.05)}}
    budget, leaves = compare.cpu_budget_tables(results, ["direct", "rdmagw"], ["http-keepalive"], cores=2)
    rows = {r[1]: r for r in budget}
    assert rows["direct"][2:] == ["20.0", "–", "1.00", "1.00", "1.00"]
    # Columns: client + backend, proxies, cores busy, predicted, measured.
    assert rows["rdmagw"][2:] == ["22.0", "18.0", "0.80", "0.50", "0.45"]
    # ≥ 0.7 of direct: 20 / 0.7 − 22 = 6.6 µs for the pair at direct's one
    # busy core; with both cores busy, 2 × 20 / 0.7 − 22 = 35.1 µs.
    assert leaves == [["http-keepalive", "≥ 0.7", "20.0", "22.0", "6.6", "35.1", "18.0"]]
    # Direct listed last changes nothing.
    assert compare.cpu_budget_tables(results, ["rdmagw", "direct"], ["http-keepalive"], cores=2)[1] == leaves


def test_pingpong_counts_every_round_trip_for_the_cpu_per_round_trip(monkeypatch):
    sample = open(os.path.join(os.path.dirname(__file__), "samples", "sockperf-pp-tcp.txt")).read()
    monkeypatch.setattr(compare, "run", lambda cmd, timeout: sample)
    r = compare.pingpong(1, 1)
    # The warm-up's and the measured part's replies (66129), not only the
    # measured observations (37612): the proxies handled all of them.
    assert r["units"] == 66129 and r["observations"] == 37612


# Two runs of the client, one of a proxy's thread (tid 12, process 11),
# one of sockperf's server, a kernel thread and the idle task.
TIMEHIST = """\
           time    cpu  task name                       wait time  sch delay   run time
                        [tid/pid]                          (msec)     (msec)     (msec)
--------------- ------  ------------------------------  ---------  ---------  ---------
   17434.039362 [0000]  sockperf[30]                        0.100      0.010      0.031
   17434.039368 [0001]  rdmagw[12/11]                       0.050      0.008      0.020
   17434.039370 [0001]  sockperf[20]                        0.040      0.004      0.012
   17434.039380 [0000]  ksoftirqd/0[14]                     0.000      0.001      0.002
   17434.039390 [0001]  <idle>                              0.000      0.000      0.123
   17434.039400 [0000]  sockperf[30]                        0.100      0.006      0.031
"""


def test_timehist_is_summed_per_process_class_and_read_per_round_trip():
    def classify(comm, pid):
        return {11: "proxies", 20: "server"}.get(pid, "client" if comm == "sockperf" else None)
    sums = compare.parse_timehist(TIMEHIST, classify)
    assert sums["client"][0] == 2 and abs(sums["client"][1] - 0.016) < 1e-9
    assert sums["proxies"][0] == 1 and sums["server"][0] == 1
    assert set(sums) == {"client", "proxies", "server"}
    # Per round trip (2 client wake-ups): 0.5 proxy runs, 4 µs of their delay.
    assert compare.sched_row("rdmagw", 100.0, sums) == ["rdmagw", "100.0", "2", "0.50", "4.0", "0.50", "2.0",
                                                        "8.0"]
    assert compare.sched_row("direct", 50.0, sums)[3:5] == ["–", "–"]


def test_hol_apart_needs_rdmagw_unless_the_tests_were_left_at_their_default(capsys):
    assert "hol-apart" not in compare.parse_args(["--paths", "haproxy"]).tests
    assert "hol-apart" in compare.parse_args([]).tests
    with pytest.raises(SystemExit):
        compare.parse_args(["--paths", "haproxy", "--tests", "pingpong,hol-apart"])
    assert "hol-apart runs through rdmagw only" in capsys.readouterr().err


def test_memory_rows_split_rss_into_buffers_and_the_rest_per_process():
    # (RSS KiB, fds, resident buffers KiB) for B then A: before, and after 2 rounds.
    before = [(9000, 13, 1000), (9500, 17, 1200)]
    snaps = [[(17000, 13, 8500), (14000, 17, 5000)], [(16000, 13, 7400), (14100, 17, 5050)]]
    rows = compare.pair_state_rows(before, snaps)
    by_name = {r[0]: r[1:] for r in rows}
    assert by_name["rdmagw B RSS KiB"] == [9000, 17000, 16000]
    assert by_name["rdmagw B buffers resident KiB"] == [1000, 8500, 7400]
    assert by_name["rdmagw B RSS outside buffers KiB"] == [8000, 8500, 8600]
    assert by_name["rdmagw A RSS outside buffers KiB"] == [8300, 9000, 9050]
    assert by_name["rdmagw A fds"] == [17, 17, 17]
    assert by_name["rdmagw B fds"] == [13, 13, 13]
    assert len(rows) == 8


def test_queued_share_is_of_what_both_sidecars_received_between_the_readings():
    before = [(1000, 10), (500, 0)]
    after = [(11000, 2010), (10500, 0)]  # 20000 received, 2000 of it queued
    assert compare.queued_share(before, after) == 0.1
    assert compare.queued_share(after, after) is None  # nothing arrived: no share


def test_the_report_shows_the_queued_share_of_rdmagw_paths_only_when_measured():
    runs = {"rate": 10.0, "units": 5.0, "cpu": 1.0, "app_cpu": 1.0, "wall": 5.0}
    results = {"iperf3": {"direct": [dict(runs)], "haproxy": [dict(runs)],
                          "rdmagw": [dict(runs, queued_share=0.25), dict(runs, queued_share=0.75)]}}
    args = compare.parse_args(["--paths", "direct,haproxy,rdmagw", "--tests", "iperf3"])
    text, _ = compare.report(results, ["direct", "haproxy", "rdmagw"], ["iperf3"], args, None)
    assert "### Payload that rdmagw copied" in text
    assert "| iperf3 | 0.5000 |" in text
    del results["iperf3"]["rdmagw"][0]["queued_share"], results["iperf3"]["rdmagw"][1]["queued_share"]
    text, _ = compare.report(results, ["direct", "haproxy", "rdmagw"], ["iperf3"], args, None)
    assert "### Payload that rdmagw copied" not in text


def test_a_failed_stats_reading_leaves_a_gap_not_a_crash():
    assert compare.queued_share([(1, 1), None], [(5, 1), (9, 9)]) is None
    rows = compare.pair_state_rows([(9000, 13, None), (9500, 17, 1200)],
                                   [[(17000, 13, 8500), (14000, 17, None)]])
    by_name = {r[0]: r[1:] for r in rows}
    assert by_name["rdmagw B RSS outside buffers KiB"] == ["–", 8500]
    assert by_name["rdmagw A buffers resident KiB"] == [1200, "–"]


def test_unix_paths_run_redis_alone_and_the_report_leaves_the_rest_blank(monkeypatch):
    commands = []
    monkeypatch.setattr(compare, "run", lambda cmd, timeout: commands.append(cmd) or "SET: 1000.00 requests per second")
    assert compare.redis("/tmp/x/redis.sock", "set", 10, 1)["rate"] == 1000.0
    assert commands[-1][1:3] == ["-s", "/tmp/x/redis.sock"]
    compare.redis(6379, "set", 10, 1)
    assert commands[-1][1:3] == ["-p", "6379"]

    run = {"rate": 10.0, "units": 5.0, "cpu": 1.0, "app_cpu": 1.0, "wall": 5.0, "p50": 20.0, "p99": 30.0}
    paths = ["direct", "rdmagw", "rdmagw-unix"]
    results = {"redis-set": {p: [dict(run)] for p in paths},
               "pingpong": {"direct": [dict(run)], "rdmagw": [dict(run)], "rdmagw-unix": []}}
    args = compare.parse_args(["--paths", ",".join(paths), "--tests", "redis-set,pingpong"])
    text, _ = compare.report(results, paths, ["redis-set", "pingpong"], args, None)
    assert "| redis-set (req/s) | 10 | 10 (1.00) | 10 (1.00) |" in text
    pingpong_rows = text.split("### 64 B ping-pong")[1].split("###")[0]
    assert "rdmagw-unix" not in pingpong_rows and "| rdmagw |" in pingpong_rows
