// SPDX-License-Identifier: Apache-2.0
// The access log's lines (proxy/local/access_log.h): JSON that any parser
// reads whatever a peer chose to name things, kv lines quoted like the
// process log's, the file's reopen after a move, the rate bound.
#include "proxy/local/access_log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "proxy/local/stream_origin.h"
#include "test_support.h"

using namespace rdmagw;
using namespace rdmagw::local;
using rdmagw::test::TempDir;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

AccessRecord record() {
  AccessRecord r;
  r.direction = "inbound";
  r.connection = "9f1c0a7e52d3b4410000000000000007";
  r.client = "192.0.2.7:53122";
  r.destination = "10.96.0.10:6379";
  r.remote = "rdma:10.0.0.1:40512";
  r.peer = "host-\"a\"\n";  // a peer's node name: any bytes
  r.transport = "rdma";
  r.target = "tcp:127.0.0.1:6379";
  r.bytes_from_app = 7;
  r.bytes_to_app = 31;
  r.start = "2026-11-27T07:41:05.017Z";
  r.duration_us = 2500;
  r.connect_us = 2400;  // it failed after 2.4 ms; no first byte
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
        R"("connection":"9f1c0a7e52d3b4410000000000000007","start":"2026-11-27T07:41:05.017Z",)"
        R"("client":"192.0.2.7:53122",)"
        R"("destination":"10.96.0.10:6379","remote":"rdma:10.0.0.1:40512",)"
        R"("peer":"host-\"a\"\n","transport":"rdma","target":"tcp:127.0.0.1:6379",)"
        R"("bytes_from_app":7,"bytes_to_app":31,"duration_ms":2,"duration_us":2500,"connect_us":2400,)"
        R"("end":"reset","by":"target",)"
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
  TempDir dir("rdmagw-access");
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
  CHECK(first.find(" node=host-a worker=1 event=access direction=inbound connection=9f1c0a7e52d3b4410000000000000007 "
                   "start=2026-11-27T07:41:05.017Z client=192.0.2.7:53122 destination=10.96.0.10:6379 "
                   "remote=rdma:10.0.0.1:40512 "
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

TEST_CASE("stream origins: socket addresses to what the OPEN carries, and to text", "[address]") {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(40512);
  inet_pton(AF_INET, "192.0.2.7", &v4.sin_addr);
  rdmagw::tunnel::OriginAddress a = rdmagw::local::origin_address(reinterpret_cast<sockaddr*>(&v4), sizeof(v4));
  CHECK(a.family == 4);
  CHECK(rdmagw::local::origin_address_text(a) == "192.0.2.7:40512");
  sockaddr_in6 mapped{};
  mapped.sin6_family = AF_INET6;
  mapped.sin6_port = htons(1);
  inet_pton(AF_INET6, "::ffff:192.0.2.8", &mapped.sin6_addr);
  a = rdmagw::local::origin_address(reinterpret_cast<sockaddr*>(&mapped), sizeof(mapped));
  CHECK(a.family == 4);  // as IPv4, as a PROXY header or a log would want it
  CHECK(rdmagw::local::origin_address_text(a) == "192.0.2.8:1");
  sockaddr_in6 v6 = mapped;
  inet_pton(AF_INET6, "fd00::5", &v6.sin6_addr);
  a = rdmagw::local::origin_address(reinterpret_cast<sockaddr*>(&v6), sizeof(v6));
  CHECK(a.family == 6);
  CHECK(rdmagw::local::origin_address_text(a) == "[fd00::5]:1");
  sockaddr_un unix_address{};
  unix_address.sun_family = AF_UNIX;
  a = rdmagw::local::origin_address(reinterpret_cast<sockaddr*>(&unix_address), sizeof(unix_address));
  CHECK(a.family == 0);
  CHECK(rdmagw::local::origin_address_text(a).empty());
}
