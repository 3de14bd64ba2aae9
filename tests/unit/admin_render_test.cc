// SPDX-License-Identifier: Apache-2.0
// The admin endpoint's text output: the JSON writer, /stats, /peers,
// /streams, /config and the Prometheus text of /metrics. Where a real parser
// is at hand (python3's json, promtool) the output is also fed to it.
#include "proxy/admin/admin_render.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer_pool.h"
#include "common/metrics.h"
#include "config/config.h"
#include "config/config_keys.h"
#include "config/number_keys.h"
#include "proxy/admin/json_writer.h"
#include "proxy/admin/process_self.h"

using namespace rdmagw;
using namespace rdmagw::admin;

namespace {

std::string json_string(std::string_view text) {
  std::string out;
  append_json_string(&out, text);
  return out;
}

std::string json_double(double value) {
  std::string out;
  append_json_double(&out, value);
  return out;
}

bool have_program(const char* name) {
  return std::system(("command -v " + std::string(name) + " >/dev/null 2>&1").c_str()) == 0;
}

// Runs `command` with `input` on its standard input; returns its exit status
// and what it printed (stdout and stderr).
int run_with_input(const std::string& command, const std::string& input, std::string* output) {
  char path[] = "/tmp/admin_render_test.XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, input.data(), input.size()) == static_cast<ssize_t>(input.size()));
  close(fd);
  FILE* pipe = popen((command + " < " + path + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  int status = pclose(pipe);
  unlink(path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The text must parse as one JSON document (python3's json module; skipped
// without python3, which tools/dev/install-deps installs).
void require_valid_json(const std::string& text) {
  if (!have_program("python3")) return;
  std::string output;
  int rc = run_with_input("python3 -c 'import json, sys; json.loads(sys.stdin.buffer.read().decode(\"utf-8\"))'", text,
                          &output);
  INFO("json: " << text << "\npython3: " << output);
  REQUIRE(rc == 0);
}

std::shared_ptr<const Config> parse_config(const std::string& text) {
  ConfigResult r = parse_config_text(text, "test.yaml");
  std::string errors;
  for (const auto& e : r.errors) errors += e.to_string() + "\n";
  INFO(errors);
  REQUIRE(r.config);
  return r.config;
}

const char* kTwoListenerConfig = R"(
node: host-a
workers: 2
peers:
  - {name: b, address: 10.0.0.2, tcp_port: 7471}
listeners:
  - {name: redis, listen: "tcp:127.0.0.1:6380", peer: b, target: "tcp:127.0.0.1:6379"}
  - name: outbound
    listen: transparent:127.0.0.1:15001
    routes:
      - {match: 10.1.0.0/16:6379, peer: b}
      - {match: 10.2.0.5:8000-8100, peer: b, target: "tcp:127.0.0.1:8080"}
      - {match: 0.0.0.0/0, action: passthrough}
targets: ["tcp:127.0.0.1:6379", "unix:/run/redis.sock"]
)";

// Two workers' worth of counters, with known totals.
struct TwoWorkers {
  BufferPool slab{4096, 4, /*trimmable=*/true};
  metrics::WorkerMetrics w0, w1;
  WorkerMetricsList list() const { return {&w0, &w1}; }
  TwoWorkers() {
    w0.listener("redis").accepted.add(3);
    w1.listener("redis").accepted.add(4);
    w0.listener("redis").active.add(2);
    w1.listener("redis").active.add(1);
    w0.listener("redis").bytes_received.add(100);
    w1.listener("redis").bytes_sent.add(200);
    w1.listener("gone").accepted.add(9);  // not in the configuration
    w0.peer("b").bytes_sent.add(1000);
    w1.peer("b").bytes_sent.add(24);
    w0.peer("b").bytes_received.add(300);
    w1.peer("b").bytes_received.add(200);
    w0.peer("b").bytes_queued.add(40);
    w1.peer("b").bytes_queued.add(2);
    w0.buffer_bytes_in_use.set(4096);
    w0.buffer_bytes_posted.set(8192);
    // Worker 0's slab has two buffers written; worker 1 published none.
    uint8_t* b = slab.acquire();
    std::memset(b, 1, slab.buffer_size());
    std::memset(slab.acquire(), 1, slab.buffer_size());
    w0.set_buffer_slab(slab.base(), slab.slab_bytes());
    w0.peer("b").sessions_tcp.add(1);
    w1.peer("b").sessions_rdma.add(1);
    w1.peer("host-c").reconnects.add(5);
    w0.streams_opened_outbound.add(7);
    w1.streams_opened_outbound.add(3);
    w1.streams_opened_inbound.add(2);
    w0.target_streams_active.add(1);
    w1.target_streams_active.add(1);
    w0.failed(metrics::StreamFailure::kNotAllowed);
    w1.failed(metrics::StreamFailure::kNotAllowed);
    w1.failed(metrics::StreamFailure::kRejected);
    w0.rdma_send_completions.add(11);
    w0.session_resumes[1][0].add(2);  // rdma -> tcp
    w1.session_resumes[1][0].add(1);
    w1.session_resumes[0][1].add(4);  // tcp -> rdma
    w0.transport_losses[1][static_cast<size_t>(metrics::TransportLoss::kRetryExceeded)].add(3);
    w1.transport_losses[0][static_cast<size_t>(metrics::TransportLoss::kKeepaliveTimeout)].add(5);
    w1.rdma_recv_completions.add(12);
    // 40 us, 50 us (on the first bound), 3 ms, 20 s (overflow).
    w0.stream_open.observe_us(40);
    w1.stream_open.observe_us(50);
    w1.stream_open.observe_us(3'000);
    w0.stream_open.observe_us(20'000'000);
    w0.session_rtt.observe_us(100);
  }
};

Status sample_status() {
  Status s;
  s.version = "0.1.0";
  s.commit = "0123456789ab";
  s.node = "host-a";
  s.config_file = "/etc/rdmagw/rdmagw.yaml";
  s.config_generation = 2;
  s.uptime_seconds = 12.5;
  s.ready = true;
  s.workers = 2;
  s.transport = "rdma,tcp";
  s.transport_reason = "RDMA device available";
  s.io_uring = "defer_taskrun,multishot_accept";
  s.last_reload.ok = true;
  s.last_reload.changes = {"listener web added"};
  s.last_reload_unix = 1795000000.25;
  return s;
}

// Metric families as the text declares them: name -> TYPE, counting
// repeated HELP or TYPE lines.
struct Families {
  std::map<std::string, std::string> type;
  std::map<std::string, int> help_lines, type_lines;
};

Families families_of(const std::string& text) {
  Families f;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string hash, kind, name, type;
    words >> hash >> kind >> name >> type;
    if (hash != "#") continue;
    if (kind == "HELP") f.help_lines[name]++;
    if (kind == "TYPE") {
      f.type_lines[name]++;
      f.type[name] = type;
    }
  }
  return f;
}

// The value of the sample line that starts with `series` ("name{labels}").
std::string sample_value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series + " ", 0) == 0) return line.substr(series.size() + 1);
  FAIL("no sample " << series << " in:\n" << text);
  return "";
}

}  // namespace

TEST_CASE("json: strings are escaped, UTF-8 passes, invalid bytes are replaced", "[admin][json]") {
  CHECK(json_string("plain") == R"("plain")");
  CHECK(json_string("a\"b\\c/") == R"("a\"b\\c/")");
  CHECK(json_string("\n\r\t\b\f") == R"("\n\r\t\b\f")");
  CHECK(json_string(std::string("\x01\x1f\x00z", 4)) == R"("\u0001\u001f\u0000z")");
  // DEL and the C1 controls need no escape in JSON, but a terminal acts on
  // them: escaped, for a reader that prints an answer raw.
  CHECK(json_string("\x7f") == R"("\u007f")");
  CHECK(json_string("a\xC2\x9B"
                    "2J\xC2\x80\xC2\x9F\xC2\xA0") == "\"a\\u009b2J\\u0080\\u009f\xC2\xA0\"");
  CHECK(json_string("h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9F\x98\x80") == "\"h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9F\x98\x80\"");
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(json_string("a\xFF"
                    "b") == "\"a" + fffd + "b\"");
  CHECK(json_string("\xE2\x82") == "\"" + fffd + fffd + "\"");                        // truncated sequence
  CHECK(json_string("\xC0\xAF") == "\"" + fffd + fffd + "\"");                        // overlong '/'
  CHECK(json_string("\xED\xA0\x80") == "\"" + fffd + fffd + fffd + "\"");             // a UTF-16 surrogate
  CHECK(json_string("\xF4\x90\x80\x80") == "\"" + fffd + fffd + fffd + fffd + "\"");  // > U+10FFFF
  require_valid_json(json_string("x\x01\xFF\"\\\xE2\x82"));
}

TEST_CASE("json: numbers", "[admin][json]") {
  CHECK(json_double(0) == "0");
  CHECK(json_double(12.5) == "12.5");
  CHECK(json_double(0.0003) == "0.0003");
  CHECK(json_double(1795000000.1) == "1795000000.1");
  CHECK(json_double(-2.25) == "-2.25");
  CHECK(json_double(1e300) == "1e+300");
  CHECK(json_double(std::nan("")) == "null");
  CHECK(json_double(std::numeric_limits<double>::infinity()) == "null");

  JsonWriter w;
  w.begin_array().value(int64_t{-5}).value(std::numeric_limits<uint64_t>::max()).value(7u).value(true).value(false);
  w.end_array();
  CHECK(w.take() == "[-5,18446744073709551615,7,true,false]");
}

TEST_CASE("json: commas and nesting", "[admin][json]") {
  JsonWriter w;
  w.begin_object();
  w.field("a", 1).field("s", "text");  // a literal must stay a string, not become a bool
  w.key("b").begin_array().value(1).begin_object().end_object().begin_array().end_array().value("x").end_array();
  w.key("c").begin_object().key("d").null().field("e", std::string("f")).end_object();
  w.string_array("empty", {});
  w.end_object();
  std::string json = w.take();
  CHECK(json == R"({"a":1,"s":"text","b":[1,{},[],"x"],"c":{"d":null,"e":"f"},"empty":[]})");
  require_valid_json(json);
}

TEST_CASE("metrics: every family of docs/admin.md, HELP and TYPE once each", "[admin][metrics]") {
  // Even with nothing configured and nothing counted: an absent family
  // would look like a broken exporter.
  metrics::ProcessMetrics process;
  const std::string text = render_metrics_text(Status{}, nullptr, {}, process);
  const Families f = families_of(text);

  std::ifstream doc(std::string(RDMAGW_SOURCE_DIR) + "/docs/admin.md");
  REQUIRE(doc);
  std::string line;
  int documented = 0;
  while (std::getline(doc, line)) {
    // Table rows: | `rdmagw_name` | type | labels |
    if (line.rfind("| `rdmagw_", 0) != 0) continue;
    size_t name_end = line.find('`', 3);
    std::string name = line.substr(3, name_end - 3);
    size_t type_begin = line.find("| ", name_end) + 2;
    std::string type = line.substr(type_begin, line.find(' ', type_begin) - type_begin);
    INFO("metric " << name);
    CHECK(f.type.count(name) == 1);
    if (f.type.count(name)) CHECK(f.type.at(name) == type);
    CHECK(f.help_lines.count(name) == 1);
    ++documented;
  }
  CHECK(documented == 52);
  CHECK(f.type.size() == static_cast<size_t>(documented));  // and nothing undocumented
  for (const auto& [name, n] : f.help_lines) {
    INFO(name);
    CHECK(n == 1);
  }
  for (const auto& [name, n] : f.type_lines) {
    INFO(name);
    CHECK(n == 1);
    if (f.type.at(name) == "counter") CHECK(name.ends_with("_total"));
  }
}

TEST_CASE("metrics: build info, and the standard process metrics when /metrics read them", "[admin][metrics]") {
  metrics::ProcessMetrics process;
  Status status;
  status.version = "0.1.0";
  status.commit = "abc1234";
  std::string text = render_metrics_text(status, nullptr, {}, process);
  CHECK(text.find("\nrdmagw_build_info{version=\"0.1.0\",commit=\"abc1234\"} 1\n") != std::string::npos);
  CHECK(text.find("process_") == std::string::npos);  // not read: not invented
  status.self = ProcessSelf{.start_time_seconds = 1795000000.25,
                            .cpu_seconds = 12.5,
                            .resident_bytes = 9 << 20,
                            .virtual_bytes = 300 << 20,
                            .open_fds = 17,
                            .max_fds = 20000};
  text = render_metrics_text(status, nullptr, {}, process);
  for (const char* line : {"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.500\n",
                           "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1795000000.250\n",
                           "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 9437184\n",
                           "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes 314572800\n",
                           "# TYPE process_open_fds gauge\nprocess_open_fds 17\n",
                           "# TYPE process_max_fds gauge\nprocess_max_fds 20000\n"}) {
    INFO(line);
    CHECK(text.find(line) != std::string::npos);
  }
}

TEST_CASE("process metrics: /proc/PID/stat read from its last parenthesis, times from the boot time", "[admin]") {
  // A command name with spaces and a ')' of its own; proc(5)'s fields 14,
  // 15 (utime, stime: 250 + 50 ticks), 22 (starttime: 1000 ticks), 23
  // (vsize), 24 (rss: 10 pages).
  const std::string stat =
      "4242 (rd m)gw) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 123456789 10 "
      "18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";
  const std::string proc_stat = "cpu  1 2 3\nintr 5\nbtime 1795000000\nprocesses 9\n";
  std::optional<ProcessSelf> self = parse_process_stat(stat, proc_stat, 100, 4096);
  REQUIRE(self);
  CHECK(self->cpu_seconds == Approx(3.0));
  CHECK(self->start_time_seconds == Approx(1795000010.0));
  CHECK(self->virtual_bytes == 123456789);
  CHECK(self->resident_bytes == 10 * 4096);
  CHECK_FALSE(parse_process_stat("4242 (x) S 1 2", proc_stat, 100, 4096));  // cut short
  CHECK_FALSE(parse_process_stat(stat, "cpu 1\n", 100, 4096));              // no btime
  CHECK_FALSE(parse_process_stat("no parenthesis", proc_stat, 100, 4096));
  // This process's own, for real.
  std::optional<ProcessSelf> real = read_process_self();
  REQUIRE(real);
  CHECK(real->resident_bytes > 0);
  CHECK(real->open_fds >= 3);
  CHECK(real->max_fds >= real->open_fds);
  CHECK(real->start_time_seconds > 1.5e9);
}

TEST_CASE("metrics: counters summed over workers, configured names present", "[admin][metrics]") {
  TwoWorkers workers;
  metrics::ProcessMetrics process;
  process.config_reloads.add(3);
  process.config_reload_failures.add(1);
  auto config = parse_config(kTwoListenerConfig);
  const std::string text = render_metrics_text(sample_status(), config.get(), workers.list(), process);
  INFO(text);

  CHECK(sample_value(text, R"(rdmagw_connections_accepted_total{listener="redis"})") == "7");
  CHECK(sample_value(text, R"(rdmagw_connections_accepted_total{listener="gone"})") == "9");
  CHECK(sample_value(text, R"(rdmagw_connections_accepted_total{listener="outbound"})") == "0");  // configured, idle
  CHECK(sample_value(text, R"(rdmagw_connections_active{listener="redis"})") == "3");
  CHECK(sample_value(text, R"(rdmagw_listener_received_bytes_total{listener="redis"})") == "100");
  CHECK(sample_value(text, R"(rdmagw_listener_sent_bytes_total{listener="redis"})") == "200");
  CHECK(sample_value(text, R"(rdmagw_streams_opened_total{direction="outbound"})") == "10");
  CHECK(sample_value(text, R"(rdmagw_streams_opened_total{direction="inbound"})") == "2");
  CHECK(sample_value(text, R"(rdmagw_streams_failed_total{reason="not-allowed"})") == "2");
  CHECK(sample_value(text, R"(rdmagw_streams_failed_total{reason="rejected"})") == "1");
  CHECK(sample_value(text, R"(rdmagw_streams_failed_total{reason="no-session"})") == "0");
  CHECK(sample_value(text, R"(rdmagw_peer_sent_bytes_total{peer="b"})") == "1024");
  CHECK(sample_value(text, R"(rdmagw_peer_received_bytes_total{peer="b"})") == "500");
  CHECK(sample_value(text, R"(rdmagw_peer_queued_bytes_total{peer="b"})") == "42");
  CHECK(sample_value(text, R"(rdmagw_peer_queued_bytes_total{peer="host-c"})") == "0");
  CHECK(sample_value(text, R"(rdmagw_sessions{peer="b",transport="tcp"})") == "1");
  CHECK(sample_value(text, R"(rdmagw_sessions{peer="b",transport="rdma"})") == "1");
  CHECK(sample_value(text, R"(rdmagw_reconnects_total{peer="host-c"})") == "5");
  CHECK(sample_value(text, R"(rdmagw_worker_sessions{worker="0",transport="tcp"})") == "1");
  CHECK(sample_value(text, R"(rdmagw_worker_sessions{worker="1",transport="rdma"})") == "1");
  CHECK(sample_value(text, R"(rdmagw_worker_sessions{worker="1",transport="tcp"})") == "0");
  CHECK(sample_value(text, R"(rdmagw_worker_streams_active{worker="0"})") == "3");
  CHECK(sample_value(text, R"(rdmagw_worker_sent_bytes_total{worker="1"})") == "24");
  CHECK(sample_value(text, R"(rdmagw_worker_buffer_bytes{worker="0",state="in_use"})") == "4096");
  CHECK(sample_value(text, R"(rdmagw_worker_buffer_bytes{worker="0",state="resident"})") ==
        std::to_string(2 * workers.slab.buffer_size()));
  CHECK(sample_value(text, R"(rdmagw_worker_buffer_bytes{worker="1",state="resident"})") == "0");
  CHECK(sample_value(text, R"(rdmagw_rdma_completions_total{kind="send"})") == "11");
  CHECK(sample_value(text, R"(rdmagw_rdma_completions_total{kind="recv"})") == "12");
  CHECK(sample_value(text, R"(rdmagw_session_resumes_total{from="rdma",to="tcp"})") == "3");
  CHECK(sample_value(text, R"(rdmagw_session_resumes_total{from="tcp",to="rdma"})") == "4");
  CHECK(sample_value(text, R"(rdmagw_session_resumes_total{from="rdma",to="rdma"})") == "0");
  CHECK(sample_value(text, R"(rdmagw_transport_failures_total{transport="rdma",reason="retry-exceeded"})") == "3");
  CHECK(sample_value(text, R"(rdmagw_transport_failures_total{transport="tcp",reason="keepalive-timeout"})") == "5");
  CHECK(sample_value(text, R"(rdmagw_transport_failures_total{transport="tcp",reason="peer-closed"})") == "0");
  CHECK(sample_value(text, "rdmagw_config_reloads_total") == "3");
  CHECK(sample_value(text, "rdmagw_config_reload_failures_total") == "1");
  CHECK(sample_value(text, "rdmagw_config_generation") == "2");
  CHECK(sample_value(text, "rdmagw_ready") == "1");
}

TEST_CASE("metrics: metrics.peer_series keeps the busiest peers' series, the rest summed as (other)",
          "[admin][metrics]") {
  TwoWorkers workers;
  workers.w0.peer("quiet").bytes_sent.add(7);
  workers.w0.peer("quiet").reconnects.add(2);
  workers.w0.peer("b").rtt_us.set(1500);
  workers.w1.peer("b").rtt_us.set(2500);  // the slowest worker's
  workers.w1.peer("quiet").rtt_us.set(9000);
  auto render = [&](const char* limit) {
    metrics::ProcessMetrics process;  // a process's first scrape
    auto config = parse_config(std::string(kTwoListenerConfig) + "metrics: {peer_series: " + limit + "}\n");
    return render_metrics_text(sample_status(), config.get(), workers.list(), process);
  };
  std::string text = render("1");
  INFO(text);
  // b (1524 bytes) keeps its own; quiet (7) and host-c (0) are summed.
  CHECK(sample_value(text, R"(rdmagw_peer_sent_bytes_total{peer="b"})") == "1024");
  CHECK(sample_value(text, R"m(rdmagw_peer_sent_bytes_total{peer="(other)"})m") == "7");
  CHECK(sample_value(text, R"m(rdmagw_reconnects_total{peer="(other)"})m") == "7");
  CHECK(text.find("peer=\"quiet\"") == std::string::npos);
  CHECK(text.find("peer=\"host-c\"") == std::string::npos);
  CHECK(sample_value(text, R"(rdmagw_peer_session_rtt_seconds{peer="b"})") == "0.0025");
  CHECK(sample_value(text, R"m(rdmagw_peer_session_rtt_seconds{peer="(other)"})m") == "0.009");
  // 0: no peer of its own.
  text = render("0");
  CHECK(text.find("peer=\"b\"") == std::string::npos);
  CHECK(sample_value(text, R"m(rdmagw_peer_sent_bytes_total{peer="(other)"})m") == "1031");
  // Enough for all: each its own, no (other).
  text = render("100");
  CHECK(sample_value(text, R"(rdmagw_peer_sent_bytes_total{peer="quiet"})") == "7");
  CHECK(text.find("peer=\"(other)\"") == std::string::npos);
}

TEST_CASE("metrics: a peer keeps its place (own series or (other)) from scrape to scrape, so (other) never falls",
          "[admin][metrics]") {
  TwoWorkers workers;
  workers.w0.peer("quiet").bytes_sent.add(7);
  metrics::ProcessMetrics process;  // one process, scraped again and again
  auto config = parse_config(std::string(kTwoListenerConfig) + "metrics: {peer_series: 1}\n");
  std::string text = render_metrics_text(sample_status(), config.get(), workers.list(), process);
  CHECK(sample_value(text, R"(rdmagw_peer_sent_bytes_total{peer="b"})") == "1024");
  CHECK(sample_value(text, R"m(rdmagw_peer_sent_bytes_total{peer="(other)"})m") == "7");
  // quiet becomes the busiest: it stays in (other), which only grows.
  workers.w1.peer("quiet").bytes_sent.add(1'000'000);
  text = render_metrics_text(sample_status(), config.get(), workers.list(), process);
  INFO(text);
  CHECK(sample_value(text, R"(rdmagw_peer_sent_bytes_total{peer="b"})") == "1024");
  CHECK(sample_value(text, R"m(rdmagw_peer_sent_bytes_total{peer="(other)"})m") == "1000007");
  CHECK(text.find("peer=\"quiet\"") == std::string::npos);
  // Lowered to 0: b joins (other) for good, which grows again.
  auto none = parse_config(std::string(kTwoListenerConfig) + "metrics: {peer_series: 0}\n");
  text = render_metrics_text(sample_status(), none.get(), workers.list(), process);
  CHECK(sample_value(text, R"m(rdmagw_peer_sent_bytes_total{peer="(other)"})m") == "1001031");
  text = render_metrics_text(sample_status(), config.get(), workers.list(), process);
  CHECK(text.find("peer=\"b\"") == std::string::npos);
}

TEST_CASE("metrics: histograms are cumulative, +Inf equals _count, _sum in seconds", "[admin][metrics]") {
  TwoWorkers workers;
  metrics::ProcessMetrics process;
  const std::string text = render_metrics_text(Status{}, nullptr, workers.list(), process);
  INFO(text);
  const std::string name = "rdmagw_stream_open_seconds";
  CHECK(sample_value(text, name + R"(_bucket{le="0.00005"})") == "2");  // 40 us and 50 us
  CHECK(sample_value(text, name + R"(_bucket{le="0.0025"})") == "2");
  CHECK(sample_value(text, name + R"(_bucket{le="0.005"})") == "3");
  CHECK(sample_value(text, name + R"(_bucket{le="10"})") == "3");
  CHECK(sample_value(text, name + R"(_bucket{le="+Inf"})") == "4");
  CHECK(sample_value(text, name + "_count") == "4");
  CHECK(sample_value(text, name + "_sum") == "20.00309");

  // Bounds ascend and counts never decrease.
  std::istringstream in(text);
  std::string line;
  double last_bound = -1;
  long last_count = -1;
  int buckets = 0;
  while (std::getline(in, line)) {
    if (line.rfind(name + "_bucket{le=\"", 0) != 0) continue;
    std::string le = line.substr(name.size() + 12, line.find('"', name.size() + 12) - (name.size() + 12));
    double bound = le == "+Inf" ? INFINITY : std::stod(le);
    long count = std::stol(line.substr(line.rfind(' ') + 1));
    CHECK(bound > last_bound);
    CHECK(count >= last_count);
    last_bound = bound;
    last_count = count;
    ++buckets;
  }
  CHECK(buckets == static_cast<int>(metrics::kLatencyBucketsUs.size()) + 1);

  CHECK(sample_value(text, R"(rdmagw_session_rtt_seconds_bucket{le="0.0001"})") == "1");
  CHECK(sample_value(text, "rdmagw_session_rtt_seconds_sum") == "0.0001");
  CHECK(sample_value(text, R"(rdmagw_target_connect_seconds_bucket{le="+Inf"})") == "0");
  CHECK(sample_value(text, "rdmagw_target_connect_seconds_sum") == "0");
}

TEST_CASE("metrics: +Inf equals _count while a worker keeps observing", "[admin][metrics]") {
  metrics::WorkerMetrics w;
  metrics::ProcessMetrics process;
  std::atomic<bool> done{false};
  std::thread worker([&] {
    for (uint64_t i = 0; !done.load(std::memory_order_relaxed) && i < 50'000'000; ++i) {
      w.stream_open.observe_us(i % 20'000'000);
      w.listener("l" + std::to_string(i % 50)).accepted.add();  // new entries while the admin reads
    }
  });
  for (int scrape = 0; scrape < 50; ++scrape) {
    const std::string text = render_metrics_text(Status{}, nullptr, {&w}, process);
    INFO("scrape " << scrape);
    CHECK(sample_value(text, R"(rdmagw_stream_open_seconds_bucket{le="+Inf"})") ==
          sample_value(text, "rdmagw_stream_open_seconds_count"));
  }
  done = true;
  worker.join();
}

TEST_CASE("metrics: label values are escaped and valid UTF-8", "[admin][metrics]") {
  metrics::WorkerMetrics w;
  w.peer("we\"ird\\na\nme\xFF").bytes_sent.add(1);
  metrics::ProcessMetrics process;
  const std::string text = render_metrics_text(Status{}, nullptr, {&w}, process);
  CHECK(sample_value(text, "rdmagw_peer_sent_bytes_total{peer=\"we\\\"ird\\\\na\\nme\xEF\xBF\xBD\"}") == "1");
}

TEST_CASE("metrics: promtool accepts the output", "[admin][metrics][promtool]") {
  if (!have_program("promtool")) {
    WARN("promtool not installed (Debian package prometheus); not checked");
    return;
  }
  TwoWorkers workers;
  workers.w0.peer("we\"ird\\name").bytes_sent.add(1);
  metrics::ProcessMetrics process;
  auto config = parse_config(kTwoListenerConfig);
  for (const Config* c : {config.get(), static_cast<const Config*>(nullptr)}) {
    const std::string text = render_metrics_text(sample_status(), c, c ? workers.list() : WorkerMetricsList{}, process);
    std::string output;
    int rc = run_with_input("promtool check metrics", text, &output);
    INFO("metrics:\n" << text << "\npromtool:\n" << output);
    CHECK(rc == 0);
    CHECK(output.empty());  // no lint complaints either
  }
}

TEST_CASE("stats: process, listeners, peers, streams, latency", "[admin][stats]") {
  TwoWorkers workers;
  metrics::ProcessMetrics process;
  process.config_reloads.add(1);
  auto config = parse_config(kTwoListenerConfig);
  const std::string json = render_stats_json(sample_status(), config.get(), workers.list(), process);
  INFO(json);
  require_valid_json(json);

  CHECK_THAT(json,
             Catch::StartsWith(
                 R"({"version":"0.1.0","commit":"0123456789ab","node":"host-a","uptime_seconds":12.5,"ready":true,)"
                 R"("draining":false,"workers":2,"transport":"rdma,tcp",)"
                 R"("transport_reason":"RDMA device available",)"
                 R"("io_uring":"defer_taskrun,multishot_accept",)"));
  CHECK_THAT(json, Catch::Contains(R"("config":{"file":"/etc/rdmagw/rdmagw.yaml","generation":2,"reloads":1,)"
                                   R"("reload_failures":0,"last_reload":{"ok":true,"unix_time":1795000000.25,)"
                                   R"("changes":["listener web added"],"errors":[]}})"));
  // Configured listeners in configuration order, then the removed one.
  CHECK_THAT(json, Catch::Contains(
                       R"("listeners":[)"
                       R"({"name":"redis","listen":"tcp:127.0.0.1:6380","configured":true,"accepted":7,"active":3,)"
                       R"("bytes_received":100,"bytes_sent":200},)"
                       R"({"name":"outbound","listen":"transparent:127.0.0.1:15001","configured":true,)"
                       R"("accepted":0,"active":0,"bytes_received":0,"bytes_sent":0},)"
                       R"({"name":"gone","listen":"","configured":false,"accepted":9,"active":0,)"
                       R"("bytes_received":0,"bytes_sent":0}])"));
  CHECK_THAT(json, Catch::Contains(
                       R"("peers":[{"name":"b","sessions_tcp":1,"sessions_rdma":1,"streams_opened":0,)"
                       R"("bytes_sent":1024,"bytes_received":500,"queued_bytes":42,"credit_stalls":0,"reconnects":0},)"
                       R"({"name":"host-c","sessions_tcp":0,"sessions_rdma":0,"streams_opened":0,)"
                       R"("bytes_sent":0,"bytes_received":0,"queued_bytes":0,"credit_stalls":0,"reconnects":5}])"));
  // Each worker's share: worker 0 has 2 client streams and 1 target stream.
  CHECK_THAT(
      json,
      Catch::Contains(R"("per_worker":[)"
                      R"({"worker":0,"sessions_tcp":1,"sessions_rdma":0,"streams_active":3,)"
                      R"("bytes_sent":1000,"bytes_received":300,"buffer_bytes_in_use":4096,"buffer_bytes_posted":8192,)"
                      R"("buffer_bytes_resident":)" +
                      std::to_string(2 * workers.slab.buffer_size()) +
                      "},"
                      R"({"worker":1,"sessions_tcp":0,"sessions_rdma":1,"streams_active":2,)"
                      R"("bytes_sent":24,"bytes_received":200,"buffer_bytes_in_use":0,"buffer_bytes_posted":0,)"
                      R"("buffer_bytes_resident":0}],)"));
  // active: 3 client side (listeners) + 2 target side.
  CHECK_THAT(json, Catch::Contains(R"("streams":{"opened_outbound":10,"opened_inbound":2,"active":5,)"
                                   R"("failed":{"no-session":0,"not-allowed":2,"target-refused":0,)"
                                   R"("target-unreachable":0,"peer-gone":0,"reset":0,"resource":0,)"
                                   R"("protocol":0,"shutdown":0,"rejected":1,"limit":0,"idle":0}})"));
  CHECK_THAT(json, Catch::Contains(R"("rdma":{"send_completions":11,"recv_completions":12})"));
  CHECK_THAT(json, Catch::EndsWith(R"("latency":{"stream_open":{"count":4,"sum_seconds":20.00309},)"
                                   R"("target_connect":{"count":0,"sum_seconds":0},)"
                                   R"("session_rtt":{"count":1,"sum_seconds":0.0001}}})"));
}

TEST_CASE("stats: without a configuration every listener is unconfigured", "[admin][stats]") {
  TwoWorkers workers;
  metrics::ProcessMetrics process;
  const std::string json = render_stats_json(Status{}, nullptr, workers.list(), process);
  require_valid_json(json);
  CHECK_THAT(json, Catch::Contains(R"({"name":"gone","listen":"","configured":false,)"));
  CHECK_THAT(json, Catch::Contains(R"({"name":"redis","listen":"","configured":false,)"));
}

TEST_CASE("peers: sessions, rdma only on RDMA sessions", "[admin][peers]") {
  PeerInfo p;
  p.name = "b";
  p.configured = true;
  p.address = "10.0.0.2";
  p.tcp_port = 7471;
  p.rdma_port = 7472;
  p.transport = "rdma";
  p.transport_reason = "RDMA device available";
  p.state = "up";
  p.connect = "always";
  SessionInfo s;
  s.role = "dialer";
  s.transport = "tcp";
  s.state = "open";
  s.remote_address = "10.0.0.2:7471";
  s.peer_node = "host-b";
  p.sessions.push_back(s);
  s.worker = 1;
  s.transport = "rdma";
  s.has_rdma = true;
  s.qp_state = "RTS";
  s.send_credits = 120;
  s.peer_recv_depth = 128;
  s.pending_returns = 3;
  s.sends_in_flight = 1;
  s.completions = 512;
  p.sessions.push_back(s);
  PeerInfo inbound;
  inbound.name = "host-z";
  inbound.state = "up";
  PeerInfo found;
  found.name = "10.0.0.9";
  found.discovered = true;
  found.connect = "on_demand";
  found.address = "10.0.0.9";
  found.tcp_port = 7471;
  found.rdma_port = 7472;
  found.transport = "tcp";
  found.state = "idle";
  found.last_close = "local-close: idle for 300000 ms (tunnel.session_idle_ms)";

  const std::string json = render_peers_json({p, inbound, found});
  INFO(json);
  require_valid_json(json);
  CHECK(
      json ==
      R"({"peers":[{"name":"b","configured":true,"discovered":false,"connect":"always","address":"10.0.0.2","tcp_port":7471,"rdma_port":7472,)"
      R"("transport":"rdma","transport_reason":"RDMA device available","state":"up","last_error":"",)"
      R"("waiting_streams":0,"last_close":"","sessions":[)"
      R"({"worker":0,"role":"dialer","transport":"tcp","state":"open","remote_address":"10.0.0.2:7471",)"
      R"("peer_node":"host-b","rtt_us":-1,"age_ms":0,"streams":0,"streams_opened":0,"idle_ms":-1,"bytes_sent":0,)"
      R"("bytes_received":0,"queued_bytes":0,"credit_stalls":0,"resumable":false,"resumes":0,"resent_bytes":0,"spliced_bytes":0},)"
      R"({"worker":1,"role":"dialer","transport":"rdma","state":"open","remote_address":"10.0.0.2:7471",)"
      R"("peer_node":"host-b","rtt_us":-1,"age_ms":0,"streams":0,"streams_opened":0,"idle_ms":-1,"bytes_sent":0,)"
      R"("bytes_received":0,"queued_bytes":0,"credit_stalls":0,"resumable":false,"resumes":0,"resent_bytes":0,"spliced_bytes":0,)"
      R"("rdma":{"qp_state":"RTS","send_credits":120,)"
      R"("peer_recv_depth":128,"pending_returns":3,"sends_in_flight":1,"completions":512}}]},)"
      R"({"name":"host-z","configured":false,"discovered":false,"address":"","tcp_port":0,"rdma_port":0,"transport":"",)"
      R"("transport_reason":"","state":"up","last_error":"","waiting_streams":0,"last_close":"","sessions":[]},)"
      R"({"name":"10.0.0.9","configured":false,"discovered":true,"connect":"on_demand","address":"10.0.0.9",)"
      R"("tcp_port":7471,"rdma_port":7472,"transport":"tcp","transport_reason":"","state":"idle","last_error":"",)"
      R"x("waiting_streams":0,"last_close":"local-close: idle for 300000 ms (tunnel.session_idle_ms)","sessions":[]}]})x");
}

TEST_CASE("streams: total, offset and limit", "[admin][streams]") {
  std::vector<StreamInfo> streams(5);
  for (uint32_t i = 0; i < streams.size(); ++i) {
    streams[i].stream_id = i + 1;
    streams[i].side = "client";
    streams[i].state = "open";
  }
  const std::string page = render_streams_json(streams, 1, 2);
  require_valid_json(page);
  CHECK_THAT(page, Catch::StartsWith(
                       R"({"total":5,"offset":1,"limit":2,"streams":[{"worker":0,"side":"client",)"
                       R"("listener":"","peer":"","target":"","stream_id":2,"age_ms":0,"connection":"","client":"",)"
                       R"("bytes_from_app":0,"bytes_to_app":0,"state":"open","queued_to_app":0,"send_credit":0,)"
                       R"("waiting_for":"","local_leg":"tcp"},{)"));
  CHECK_THAT(page, Catch::Contains(R"("stream_id":3)"));
  CHECK_THAT(page, !Catch::Contains(R"("stream_id":4)"));
  CHECK(render_streams_json(streams, 4, 100).find(R"("stream_id":5)") != std::string::npos);
  CHECK(render_streams_json(streams, 9, 100) == R"({"total":5,"offset":9,"limit":100,"streams":[]})");
  CHECK(render_streams_json(streams, 0, 0) == R"({"total":5,"offset":0,"limit":0,"streams":[]})");
  CHECK(render_streams_json(streams, SIZE_MAX, SIZE_MAX).ends_with(R"("streams":[]})"));
}

TEST_CASE("config: the YAML schema as JSON, defaults filled in", "[admin][config]") {
  auto config = parse_config(kTwoListenerConfig);
  const std::string json = render_config_json(*config, 3);
  INFO(json);
  require_valid_json(json);
  // The numeric keys of config/number_keys.h, each in its section with the
  // value parsed (a default here); taken out, the rest is as written below.
  auto doc = nlohmann::ordered_json::parse(json);
  for (const config_keys::NumberKey& k : config_keys::kNumberKeys) {
    nlohmann::ordered_json* section = &doc;
    std::stringstream path{std::string(k.section)};
    for (std::string part; std::getline(path, part, '.');) section = &(*section)[part];
    INFO(config_keys::number_key_path(k));
    REQUIRE(section->contains(std::string(k.name)));
    CHECK((*section)[std::string(k.name)].get<uint64_t>() == k.get(*config));
    section->erase(std::string(k.name));
  }
  CHECK(
      doc.dump() ==
      R"({"node":"host-a","admin":"127.0.0.1:9901","workers":2,)"
      R"("tunnel":{"address":"127.0.0.1","tcp_port":7471,"rdma_port":7472,"transport":"auto","tcp_splice":false,)"
      R"("peer_cidrs":[],"rdma":{"max_pinned":67108864},"limits":{},"auth":{"mode":"none","encrypt":false}},)"
      R"("peers":[{"name":"b","address":"10.0.0.2","tcp_port":7471,"rdma_port":7472,"connect":"on_demand"}],)"
      R"("listeners":[{"name":"redis","listen":"tcp:127.0.0.1:6380","peer":"b","target":"tcp:127.0.0.1:6379",)"
      R"("max_connections":0,"accepts_per_second":0,"idle_timeout_ms":0},)"
      R"({"name":"outbound","listen":"transparent:127.0.0.1:15001","routes":[)"
      R"({"match":"10.1.0.0/16:6379","action":"tunnel","peer":"b"},)"
      R"({"match":"10.2.0.5/32:8000-8100","action":"tunnel","peer":"b","target":"tcp:127.0.0.1:8080"},)"
      R"({"match":"0.0.0.0/0","action":"passthrough"}],"max_connections":0,"accepts_per_second":0,"idle_timeout_ms":0}],)"
      R"("targets":["tcp:127.0.0.1:6379","unix:/run/redis.sock"],)"
      R"("access_log":{"enabled":true,"format":"kv"},"metrics":{},)"
      R"("local_legs":{"redirect":false,"cgroup":"","cgroup_fs":""},)"
      R"("shutdown_timeout_ms":10000,"log_level":"info","generation":3})");
}

// The key paths a JSON document holds, in config_keys::all_paths()'s form
// ("tunnel.rdma.slab_size", "peers[].name"): a key inside a list's object
// counts when any element holds it.
void collect_paths(const nlohmann::json& j, const std::string& prefix, std::set<std::string>* out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      std::string path = prefix.empty() ? key : prefix + "." + key;
      out->insert(path);
      collect_paths(value, path, out);
    }
  } else if (j.is_array()) {
    for (const auto& item : j) collect_paths(item, prefix + "[]", out);
  }
}

TEST_CASE("config: /config holds every key of the configuration (secrets as paths)", "[admin][config]") {
  // Between them, two files that set every key that has no default: one
  // with psk keys, one with certificates.
  const std::string common = R"(node: host-a
admin_token_file: /etc/rdmagw/admin-token
worker_cpus: [0, 1]
tunnel:
  address: 10.0.0.1
  peer_cidrs: [{cidr: 10.0.0.0/8, tcp_port: 7471, rdma_port: 7472}]
  rdma: {device: erdma_0}
  limits: {handshakes: 500}
peers: [{name: b, address: 10.0.0.2, tcp_port: 7471}]
listeners:
  - {name: redis, listen: "tcp:10.0.0.1:6380", peer: b, target: "tcp:127.0.0.1:6379", clients: [10.0.0.0/24]}
  - {name: sock, listen: "unix:/run/rdmagw/r.sock", peer: b, target: "tcp:127.0.0.1:6379", socket_mode: "0660"}
  - name: outbound
    listen: "transparent:127.0.0.1:15001"
    routes: [{match: 10.1.0.0/16, peer: b, target: "tcp:127.0.0.1:80"}, {match: 0.0.0.0/0, action: passthrough}]
targets: ["tcp:127.0.0.1:6379", {target: "tcp:127.0.0.1:6380", peers: [10.0.0.2/32], proxy_protocol: v2}]
access_log: {path: /var/log/rdmagw/access.log, format: json}
services: {file: /run/rdmagw-k8s/services.json}
local_legs: {redirect: true, cgroup: pod, cgroup_fs: /host/cgroup}
)";
  std::set<std::string> paths;
  for (const char* auth : {"  auth: {mode: psk, key_files: [/etc/rdmagw/keys/current], encrypt: true}\n",
                           "  auth: {mode: cert, ca_files: [/ca.pem], cert_file: /node.pem, key_file: /node.key}\n"}) {
    std::string text = common;
    text.insert(text.find("  peer_cidrs"), auth);
    auto config = parse_config(text);
    const std::string json = render_config_json(*config, 1);
    INFO(json);
    collect_paths(nlohmann::json::parse(json), "", &paths);
    CHECK(json.find("BEGIN") == std::string::npos);  // paths, never contents
  }
  for (const std::string& key : config_keys::all_paths()) {
    INFO("the key " << key << " is not in /config");
    CHECK(paths.count(key) == 1);
  }
}

TEST_CASE("reload, drain and error answers", "[admin]") {
  ReloadResult ok;
  ok.ok = true;
  ok.changes = {"listener web added", "peer c removed"};
  CHECK(render_reload_json(ok, 3) == R"({"ok":true,"generation":3,"changes":["listener web added","peer c removed"]})");
  ReloadResult bad;
  bad.errors = {"rdmagw.yaml:7:13: listeners[1].listen: bad"};
  CHECK(render_reload_json(bad, 3) == R"({"ok":false,"errors":["rdmagw.yaml:7:13: listeners[1].listen: bad"]})");
  CHECK(render_drain_json(4) == R"({"ok":true,"draining":true,"streams_open":4})");
  CHECK(render_error_json("worker 1 did not \"answer\"") == R"({"error":"worker 1 did not \"answer\""})");
}
