// SPDX-License-Identifier: Apache-2.0
// The access log's lines (proxy/local/access_log.h): JSON that any parser
// reads whatever a peer chose to name things, kv lines quoted like the
// process log's, the file's reopen after a move, the rate bound.
#include "proxy/local/access_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

using namespace rdmagw;
using namespace rdmagw::local;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/rdmagw-access-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    path = tmpl;
  }
  ~TempDir() { std::system(("rm -rf " + path).c_str()); }
};

AccessRecord record() {
  AccessRecord r;
  r.direction = "inbound";
  r.client = "rdma:10.0.0.1:40512";
  r.peer = "host-\"a\"\n";  // a peer's node name: any bytes
  r.transport = "rdma";
  r.target = "tcp:127.0.0.1:6379";
  r.bytes_from_app = 7;
  r.bytes_to_app = 31;
  r.duration_us = 2500;
  r.reset = true;
  r.ended_by = "target";
  r.reason = "connect-failed: Connection refused";
  return r;
}

}  // namespace

TEST_CASE("access log: a JSON line escapes what a peer named, and says every field") {
  std::string line = access_json_line(record(), "2026-11-27T07:41:05.020Z", "host-b", 3, 2);
  CHECK(line ==
        R"({"time":"2026-11-27T07:41:05.020Z","node":"host-b","worker":3,"event":"access","direction":"inbound",)"
        R"("client":"rdma:10.0.0.1:40512","peer":"host-\"a\"\n","transport":"rdma","target":"tcp:127.0.0.1:6379",)"
        R"("bytes_from_app":7,"bytes_to_app":31,"duration_ms":2,"end":"reset","by":"target",)"
        R"("reason":"connect-failed: Connection refused","suppressed":2})"
        "\n");
  AccessRecord clean = record();
  clean.reset = false;
  std::string closed = access_json_line(clean, "t", "n", 0, 0);
  CHECK(closed.find(R"("end":"close"})") != std::string::npos);
  CHECK(closed.find("\"by\"") == std::string::npos);
  CHECK(closed.find("suppressed") == std::string::npos);
}

TEST_CASE("access log: utc_timestamp is ISO 8601 with milliseconds") {
  auto t = std::chrono::system_clock::time_point(std::chrono::milliseconds(1795764065020));
  CHECK(utc_timestamp(t) == "2026-11-27T07:21:05.020Z");
}

TEST_CASE("access log: a file keeps its lines whole, reopens at its path after a move, and bounds the rate") {
  TempDir dir;
  std::string path = dir.path + "/access.log";
  AccessLogFile file;
  std::string error;
  REQUIRE(file.open(path, &error));
  metrics::WorkerMetrics metrics;
  AccessLog log(file, metrics, 1);
  AccessLogConfig config;
  config.path = path;
  config.lines_per_second = 2;
  log.configure(config, "host-a");
  log.write(record());
  log.write(record());
  log.write(record());  // past the burst of 2
  std::string first = read(path);
  CHECK(std::count(first.begin(), first.end(), '\n') == 2);
  CHECK(first.find(" node=host-a worker=1 event=access direction=inbound client=rdma:10.0.0.1:40512 "
                   "peer=\"host-\\\"a\\\"\\n\" transport=rdma") != std::string::npos);
  CHECK(first.find(" end=reset by=target reason=\"connect-failed: Connection refused\"\n") != std::string::npos);
  CHECK(metrics.access_log_lines.value() == 2);
  CHECK(metrics.access_log_suppressed.value() == 1);

  // logrotate moves the file; reopen() writes at the path again.
  REQUIRE(std::rename(path.c_str(), (path + ".1").c_str()) == 0);
  REQUIRE(file.reopen(&error));
  config.json = true;
  config.lines_per_second = 100;  // a new rate: a fresh bucket
  log.configure(config, "host-a");
  log.write(record());
  CHECK(read(path + ".1") == first);
  std::string second = read(path);
  CHECK(second.starts_with("{\"time\":"));
  CHECK(std::count(second.begin(), second.end(), '\n') == 1);

  // A path that cannot be opened: said, and the open file kept.
  CHECK_FALSE(file.open(dir.path + "/no/such/dir/access.log", &error));
  CHECK(error.find("no/such/dir/access.log") != std::string::npos);
  CHECK(file.path() == path);
}
