# SPDX-License-Identifier: Apache-2.0
"""perf/benchlib.py's parsers against output the tools really printed.

The samples in samples/ were recorded on 127.0.0.1 (redis-benchmark 7.0.15,
iperf3 3.12, sockperf 3.7, wrk 4.1.0 against nginx 1.22), including runs
that failed: a parser must find the figure in the first, and refuse the
second with an error that shows the tool's output.

    /usr/bin/python3 -m pytest tests/perf -q -p no:cacheprovider
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "perf"))
import benchlib  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def sample(name: str) -> str:
    with open(os.path.join(HERE, "samples", name), newline="") as f:  # keep the \r of progress lines
        return f.read()


# --- redis-benchmark -------------------------------------------------------------


def test_redis_benchmark_threads_progress_lines_are_skipped():
    # -q with --threads: progress lines "SET: rps=..." end in \r, the result in \n.
    text = sample("redis-benchmark-set-threads.txt")
    assert "\r" in text and "rps=" in text
    assert benchlib.parse_redis_benchmark(text) == {"SET": 39761.43}


def test_redis_benchmark_two_tests():
    assert benchlib.parse_redis_benchmark(sample("redis-benchmark-set-get.txt")) == {"SET": 87719.30,
                                                                                      "GET": 89285.71}


def test_redis_benchmark_csv_gives_rate_and_p99():
    r = benchlib.parse_redis_csv(sample("redis-benchmark-csv-get.txt"))
    assert r == {"GET": {"rps": 25641.03, "p99_ms": 0.551}}


def test_redis_benchmark_csv_without_result_is_an_error():
    with pytest.raises(ValueError, match="Connection refused"):
        benchlib.parse_redis_csv(sample("redis-benchmark-refused.txt"))


def test_redis_benchmark_without_result_is_an_error_showing_the_output():
    with pytest.raises(ValueError, match="redis-benchmark printed no result") as e:
        benchlib.parse_redis_benchmark(sample("redis-benchmark-refused.txt"))
    assert "Connection refused" in str(e.value)


# --- iperf3 ----------------------------------------------------------------------


def test_iperf3_json():
    r = benchlib.parse_iperf3_json(sample("iperf3-client.json"))
    assert r["bytes"] == 2777415680
    assert r["seconds"] == pytest.approx(1.000089)
    assert r["gbps"] == pytest.approx(22.217348, rel=1e-6)


def test_iperf3_error_is_raised_with_its_message():
    with pytest.raises(ValueError, match="iperf3: unable to connect to server: Connection refused"):
        benchlib.parse_iperf3_json(sample("iperf3-refused.json"))


def test_iperf3_text_that_is_not_json():
    with pytest.raises(ValueError, match="iperf3 printed no JSON"):
        benchlib.parse_iperf3_json("iperf3: error - unable to connect to server\n")


# --- sockperf --------------------------------------------------------------------


def test_sockperf_percentiles_and_observations():
    # The sample has colour escapes around "Total N observations".
    assert benchlib.parse_sockperf(sample("sockperf-pp-tcp.txt")) == {"p50": 13.710, "p99": 19.448,
                                                                       "observations": 37612,
                                                                       "round_trips": 66129}


def test_sockperf_failure():
    with pytest.raises(ValueError, match="sockperf printed no percentile 50.000") as e:
        benchlib.parse_sockperf(sample("sockperf-refused.txt"))
    assert "Connection refused" in str(e.value)


# --- wrk -------------------------------------------------------------------------


def test_wrk_summary():
    assert benchlib.parse_wrk(sample("wrk-ok.txt")) == {"requests": 59950, "rps": 54499.85, "errors": 0}


def test_wrk_latency_distribution_gives_p99():
    r = benchlib.parse_wrk(sample("wrk-latency.txt"))
    assert r == {"requests": 18380, "rps": 16713.65, "errors": 0, "p99_us": 1520.0}


def test_wrk_counts_non_2xx_responses_as_errors():
    r = benchlib.parse_wrk(sample("wrk-404.txt"))
    assert r["requests"] == 48212 and r["errors"] == 48212


def test_wrk_counts_socket_errors():
    r = benchlib.parse_wrk(sample("wrk-socket-errors.txt"))
    assert r == {"requests": 0, "rps": 0.0, "errors": 13755}


def test_wrk_that_could_not_connect():
    with pytest.raises(ValueError, match="wrk printed no summary") as e:
        benchlib.parse_wrk(sample("wrk-refused.txt"))
    assert "unable to connect" in str(e.value)


# --- /proc/PID/stat ---------------------------------------------------------------


def test_proc_stat_utime_plus_stime():
    # redis-server after 50k SETs: utime 7, stime 33 ticks.
    assert benchlib.parse_proc_stat_cpu(sample("proc-stat-redis-server.txt")) == pytest.approx(40 / TICK)


def test_proc_stat_name_with_spaces_and_parentheses():
    # The command name "x (y) z" holds spaces and a ')': fields are counted from the last ')'.
    text = sample("proc-stat-odd-name.txt")
    assert text.startswith("12316 (x (y) z) S")
    assert benchlib.parse_proc_stat_cpu(text) == 0.0
    # The same line with utime 5 and stime 7 (fields 14 and 15).
    rest = text[text.rindex(")") + 2:].split()
    rest[11], rest[12] = "5", "7"
    assert benchlib.parse_proc_stat_cpu(text[:text.rindex(")") + 2] + " ".join(rest)) == pytest.approx(12 / TICK)


def test_cpu_seconds_of_this_process():
    with open("/proc/self/stat") as f:
        before = benchlib.parse_proc_stat_cpu(f.read())
    assert benchlib.cpu_seconds(os.getpid()) >= before >= 0


# --- tables ----------------------------------------------------------------------


def test_markdown_table():
    assert benchlib.markdown_table(["path", "req/s"], [["direct", "1,000"], ["pair", 900]]) == (
        "| path | req/s |\n|---|---:|\n| direct | 1,000 |\n| pair | 900 |")
