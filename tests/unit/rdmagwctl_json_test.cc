// SPDX-License-Identifier: Apache-2.0
// rdmagwctl: the JSON reader and writer, tables and human units, and the
// views over the documented admin answers (docs/admin.md).
#include <catch2/catch.hpp>
#include <string>

#include "test_support.h"
#include "tools/rdmagwctl/json.h"
#include "tools/rdmagwctl/table.h"
#include "tools/rdmagwctl/views.h"

using rdmagw::ctl::Align;
using rdmagw::ctl::Json;
using rdmagw::ctl::parse_json;
using rdmagw::ctl::Table;
using rdmagw::ctl::to_json;
using namespace rdmagw::ctl;
using rdmagw::test::contains;

namespace {

Json parse_ok(const std::string& text) {
  std::string error;
  auto v = parse_json(text, &error);
  INFO("input: " << text << "\nerror: " << error);
  REQUIRE(v.has_value());
  return *v;
}

std::string parse_bad(const std::string& text) {
  std::string error;
  auto v = parse_json(text, &error);
  INFO("input: " << text);
  REQUIRE_FALSE(v.has_value());
  return error;
}

}  // namespace

// The parser is nlohmann-json's; these check what rdmagwctl adds around it.

TEST_CASE("json: integers exact where they can be", "[rdmagwctl][json]") {
  CHECK(int_value(parse_ok(" \t\r\n 7 \n")) == 7);
  CHECK_FALSE(int_value(parse_ok("12.5")).has_value());
  CHECK(int_value(parse_ok("-0")) == 0);
  CHECK(int_value(parse_ok("1e3")) == 1000);
  CHECK(int_value(parse_ok("2.0")) == 2);
  CHECK(int_value(parse_ok("9223372036854775807")) == INT64_MAX);
  CHECK(int_value(parse_ok("-9223372036854775808")) == INT64_MIN);
  CHECK_FALSE(int_value(parse_ok("18446744073709551615")).has_value());  // a uint64 beyond int64
  CHECK_FALSE(int_value(parse_ok("\"7\"")).has_value());
}

TEST_CASE("json: order of keys, lenient lookups", "[rdmagwctl][json]") {
  Json v = parse_ok(R"({"z": 1, "a": {"list": [1, [2, [3]], {"k": null}]}, "m": "x"})");
  REQUIRE(v.is_object());
  std::vector<std::string> keys;
  for (const auto& m : v.items()) keys.push_back(m.key());
  CHECK(keys == std::vector<std::string>{"z", "a", "m"});  // the server's order, not sorted
  const Json& list = array_at(object_at(v, "a"), "list");
  REQUIRE(list.size() == 3);
  CHECK(int_value(list[1][1][0]) == 3);
  CHECK(find(list[2], "k")->is_null());
  CHECK(find(list[2], "nope") == nullptr);
  CHECK(find(list, "k") == nullptr);  // not an object
  CHECK(string_or(v, "m") == "x");
  CHECK(string_or(v, "missing", "fallback") == "fallback");
  CHECK(string_or(v, "z", "fallback") == "fallback");  // wrong type: the fallback
  CHECK(int_or(v, "m", -1) == -1);
  CHECK(bool_or(v, "m", true));
  CHECK(number_or(v, "z") == 1.0);
  Json n = parse_ok(R"({"half": 2.5, "huge": 1e300, "tiny": -1e300, "yes": true})");
  CHECK(int_or(n, "half") == 2);
  CHECK(int_or(n, "huge") == INT64_MAX);
  CHECK(int_or(n, "tiny") == INT64_MIN);
  CHECK(bool_or(n, "yes"));
  CHECK(object_at(v, "m").empty());  // a string where an object was expected
  CHECK(array_at(v, "a").empty());
  CHECK(string_value(parse_ok("\"hi\"")) == "hi");
  CHECK(string_value(parse_ok("1")).empty());
}

TEST_CASE("json: invalid input names the offset; deep nesting is refused", "[rdmagwctl][json]") {
  CHECK(parse_bad("{\"a\" 1}").starts_with("offset 6: "));
  CHECK(parse_bad("").starts_with("offset "));
  CHECK(parse_bad("[1]]").starts_with("offset "));
  CHECK(parse_bad("\"\xC3\"").starts_with("offset "));  // not UTF-8
  CHECK(parse_bad("NaN").starts_with("offset "));
  CHECK(parse_bad("44.44e4444").find("number overflow") != std::string::npos);  // found by tests/fuzz

  std::string deep(kMaxJsonDepth, '[');
  deep += std::string(kMaxJsonDepth, ']');
  CHECK(parse_ok(deep).is_array());
  std::string too_deep(kMaxJsonDepth + 1, '[');
  too_deep += std::string(kMaxJsonDepth + 1, ']');
  CHECK(parse_bad(too_deep) == "nested deeper than 64 levels");
  // Brackets inside strings do not count.
  CHECK(parse_ok("\"" + std::string(1000, '[') + "\"").is_string());
}

TEST_CASE("json: writing back, pretty and compact", "[rdmagwctl][json]") {
  Json v = parse_ok(R"({"a":[1,2.5,{}],"b":{"c":"x\ny\u0001\"é"},"d":[],"e":null,"f":true})");
  CHECK(to_json(v, 0) == R"({"a":[1,2.5,{}],"b":{"c":"x\ny\u0001\"é"},"d":[],"e":null,"f":true})");
  CHECK(to_json(v) ==
        "{\n"
        "  \"a\": [\n"
        "    1,\n"
        "    2.5,\n"
        "    {}\n"
        "  ],\n"
        "  \"b\": {\n"
        "    \"c\": \"x\\ny\\u0001\\\"é\"\n"
        "  },\n"
        "  \"d\": [],\n"
        "  \"e\": null,\n"
        "  \"f\": true\n"
        "}");
  CHECK(to_json(parse_ok(to_json(v))) == to_json(v));
  CHECK(to_json(parse_ok("18446744073709551615")) == "18446744073709551615");
  // Bytes that are not UTF-8 (a string rdmagwctl made itself) print, replaced.
  CHECK(json_quote("a\xFF"
                   "b") ==
        "\"a\xEF\xBF\xBD"
        "b\"");
  CHECK(json_quote("tab\there") == R"("tab\there")");
}

TEST_CASE("table: columns aligned, no trailing spaces", "[rdmagwctl][table]") {
  Table t({{"NAME"}, {"COUNT", Align::kRight}, {"NOTE"}});
  t.add_row({"redis", "5", ""});
  t.add_row({"a", "12345", "long note"});
  t.add_row({"caf\xC3\xA9"});  // missing cells print empty; é is one column
  CHECK(t.row_count() == 3);
  CHECK(t.render() ==
        "NAME   COUNT  NOTE\n"
        "redis      5\n"
        "a      12345  long note\n"
        "caf\xC3\xA9\n");
}

TEST_CASE("units: bytes, rates, durations, latencies", "[rdmagwctl][table]") {
  using namespace rdmagw::ctl;
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.0 KiB");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(1258291) == "1.2 MiB");
  CHECK(format_bytes(1048575) == "1.0 MiB");  // 1023.999 KiB rounds up a unit
  CHECK(format_bytes(5ull << 30) == "5.0 GiB");
  CHECK(format_bytes(UINT64_MAX) == "16.0 EiB");
  CHECK(format_byte_rate(0) == "0 B/s");
  CHECK(format_byte_rate(-5) == "0 B/s");
  CHECK(format_byte_rate(1.5 * 1024 * 1024) == "1.5 MiB/s");
  CHECK(format_count_rate(0) == "0/s");
  CHECK(format_count_rate(0.5) == "0.5/s");
  CHECK(format_count_rate(42) == "42/s");
  CHECK(format_count_rate(1500) == "1.5k/s");
  CHECK(format_duration_ms(850) == "850ms");
  CHECK(format_duration_ms(12'500) == "12.5s");
  CHECK(format_duration_ms(59'999) == "59.9s");
  CHECK(format_duration_ms(185'000) == "3m05s");
  CHECK(format_duration_ms(7'380'000) == "2h03m");
  CHECK(format_duration_ms(356'400'000) == "4d03h");
  CHECK(format_duration_seconds(12.5) == "12.5s");
  CHECK(format_duration_seconds(-1) == "0ms");
  CHECK(format_duration_seconds(1e300) == "1000000d00h");
  CHECK(format_latency_us(-1) == "-");
  CHECK(format_latency_us(41) == "41us");
  CHECK(format_latency_us(1250) == "1.25ms");
  CHECK(format_latency_us(1.2e6) == "1.20s");
}

// The examples of docs/admin.md, as the server sends them.
namespace {

const char* kStatsExample = R"({
  "version": "0.1.0", "commit": "0123456789ab", "node": "host-a", "uptime_seconds": 12.5, "ready": true, "draining": false,
  "workers": 2, "transport": "rdma,tcp", "transport_reason": "RDMA device available",
  "io_uring": "defer_taskrun,multishot_accept",
  "config": {"file": "/etc/rdmagw/rdmagw.yaml", "generation": 2, "reloads": 1, "reload_failures": 0,
             "last_reload": {"ok": true, "unix_time": 1795000000.1, "changes": ["listener web added"], "errors": []}},
  "listeners": [
    {"name": "redis", "listen": "tcp:127.0.0.1:6380", "configured": true,
     "accepted": 10, "active": 2, "bytes_received": 4096, "bytes_sent": 8192},
    {"name": "old", "listen": "", "configured": false,
     "accepted": 1, "active": 0, "bytes_received": 0, "bytes_sent": 0}],
  "peers": [
    {"name": "b", "sessions_tcp": 2, "sessions_rdma": 0, "streams_opened": 10,
     "bytes_sent": 4096, "bytes_received": 8192, "credit_stalls": 0, "reconnects": 0}],
  "streams": {"opened_outbound": 10, "opened_inbound": 0, "active": 2,
    "failed": {"no-session": 3, "not-allowed": 0, "target-refused": 0, "target-unreachable": 0,
               "peer-gone": 0, "reset": 1, "resource": 0, "protocol": 0, "shutdown": 0, "rejected": 0}},
  "rdma": {"send_completions": 0, "recv_completions": 0},
  "latency": {"stream_open": {"count": 10, "sum_seconds": 0.004},
              "target_connect": {"count": 0, "sum_seconds": 0},
              "session_rtt": {"count": 3, "sum_seconds": 0.0003}}})";

}  // namespace

TEST_CASE("views: status from the documented /stats", "[rdmagwctl][views]") {
  std::string out = rdmagw::ctl::render_status(parse_ok(kStatsExample));
  INFO(out);
  CHECK(contains(out, "rdmagw 0.1.0 (commit 0123456789ab) on node host-a, up 12.5s, 2 workers\n"));
  CHECK(contains(out, "state      ready\n"));
  CHECK(contains(out, "transport  rdma,tcp (RDMA device available)\n"));
  CHECK(contains(out, "/etc/rdmagw/rdmagw.yaml  generation 2, 1 reload, 0 failed\n"));
  CHECK(contains(out, "last reload ok, 1 change:\n             listener web added\n"));
  CHECK(contains(out, "failures   no-session 3, reset 1\n"));
  CHECK(contains(out, "latency    mean stream open 400us (10), session rtt 100us (3)\n"));
  CHECK(contains(out,
                 "  NAME   LISTEN              ACTIVE  ACCEPTED  BYTES IN  BYTES OUT\n"
                 "  redis  tcp:127.0.0.1:6380       2        10   4.0 KiB    8.0 KiB\n"
                 "  old    (removed)                0         1       0 B        0 B\n"));
  CHECK(contains(out, "  b            2    2     0              10  4.0 KiB   8.0 KiB"));
}

TEST_CASE("views: a failed reload lists its errors", "[rdmagwctl][views]") {
  std::string out = rdmagw::ctl::render_status(parse_ok(R"({"config": {"file": "x.yaml", "generation": 1,
      "reloads": 0, "reload_failures": 1, "last_reload": {"ok": false, "unix_time": 5, "changes": [],
      "errors": ["x.yaml:7:13: listeners[1].listen: bad", "x.yaml:9:3: peers[0]: worse"]}}})"));
  INFO(out);
  CHECK(contains(out,
                 "last reload FAILED (the running config was kept):\n"
                 "             x.yaml:7:13: listeners[1].listen: bad\n"
                 "             x.yaml:9:3: peers[0]: worse\n"));
  CHECK(contains(out, "listeners: none\n"));
}

TEST_CASE("views: no last reload line before the first reload", "[rdmagwctl][views]") {
  std::string out = rdmagw::ctl::render_status(parse_ok(R"({"config": {"file": "x.yaml", "generation": 1,
      "reloads": 0, "reload_failures": 0, "last_reload": {"ok": false, "unix_time": 0, "changes": [], "errors": []}}})"));
  INFO(out);
  CHECK(contains(out, "config     x.yaml  generation 1, 0 reloads, 0 failed\nstreams "));
  CHECK_FALSE(contains(out, "last reload"));
}

TEST_CASE("views: peers, with RDMA columns and a peer without a session", "[rdmagwctl][views]") {
  std::string out = rdmagw::ctl::render_peers(parse_ok(R"({"peers": [
    {"name": "b", "configured": true, "address": "10.0.0.2", "tcp_port": 7471, "rdma_port": 7472,
     "transport": "rdma", "transport_reason": "RDMA device available", "state": "up", "last_error": "",
     "waiting_streams": 0, "sessions": [
       {"worker": 0, "role": "dialer", "transport": "rdma", "state": "open", "remote_address": "10.0.0.2:7472",
        "peer_node": "host-b", "rtt_us": 41, "age_ms": 5000, "streams": 2, "streams_opened": 10,
        "bytes_sent": 4096, "bytes_received": 8192, "queued_bytes": 3072, "credit_stalls": 0, "resumes": 2,
        "resent_bytes": 16384, "rdma": {"qp_state": "RTS", "send_credits": 120, "peer_recv_depth": 128, "pending_returns": 3,
                 "sends_in_flight": 1, "completions": 512}}]},
    {"name": "c", "configured": true, "address": "10.0.0.3", "tcp_port": 7471, "rdma_port": 7472,
     "transport": "tcp", "transport_reason": "configured", "state": "down",
     "last_error": "connect: Connection refused", "waiting_streams": 1, "sessions": []}]})"));
  CHECK(out ==
        "PEER  STATE  TRANSPORT  ROLE    WORKER  REMOTE          RTT  STREAMS     SENT  RECEIVED   QUEUED"
        "  CREDIT STALLS  RESUMES    RESENT  QP   CREDITS  IN FLIGHT  NOTE\n"
        "b     open   rdma       dialer       0  10.0.0.2:7472  41us        2  4.0 KiB   8.0 KiB  3.0 KiB"
        "              0        2  16.0 KiB  RTS  120/128          1  node host-b\n"
        "c     down   tcp        -            -  -                 -        -        -         -        -"
        "              -        -         -  -          -          -  no session; last error: connect: Connection "
        "refused; "
        "transport tcp: configured; "
        "1 stream waiting for a session\n");
  CHECK(rdmagw::ctl::render_peers(parse_ok(R"({"peers": []})")) == "no peers (none configured, none connected)\n");
}

TEST_CASE("views: peers found by destination, idle and on demand", "[rdmagwctl][views]") {
  std::string out = rdmagw::ctl::render_peers(parse_ok(R"x({"peers": [
    {"name": "10.0.5.9", "configured": false, "discovered": true, "connect": "on_demand", "address": "10.0.5.9",
     "tcp_port": 7471, "rdma_port": 7472, "transport": "tcp", "transport_reason": "configured", "state": "up",
     "last_error": "", "waiting_streams": 0, "last_close": "", "sessions": [
       {"worker": 1, "role": "dialer", "transport": "tcp", "state": "open", "remote_address": "10.0.5.9:7471",
        "peer_node": "h9", "rtt_us": 80, "age_ms": 9000, "streams": 0, "streams_opened": 3, "idle_ms": 4200,
        "bytes_sent": 0, "bytes_received": 0, "credit_stalls": 0, "resumes": 0, "resent_bytes": 0}]},
    {"name": "10.0.5.10", "configured": false, "discovered": true, "connect": "on_demand", "address": "10.0.5.10",
     "tcp_port": 7471, "rdma_port": 7472, "transport": "tcp", "transport_reason": "configured", "state": "idle",
     "last_error": "", "waiting_streams": 0, "last_close": "local-close: idle for 1000 ms (tunnel.session_idle_ms)",
     "sessions": []}]})x"));
  INFO(out);
  CHECK(contains(out, "node h9; found by destination; idle 4 s\n"));
  CHECK(contains(out, "10.0.5.10  idle "));
  CHECK(contains(out,
                 "no session (on demand: none needed); last closed: local-close: idle for 1000 ms "
                 "(tunnel.session_idle_ms); transport tcp: configured; found by destination\n"));
}

TEST_CASE("views: streams page and its range line", "[rdmagwctl][views]") {
  Json page = parse_ok(R"({"total": 7, "offset": 5, "limit": 2, "streams": [
    {"worker": 0, "side": "client", "listener": "redis", "peer": "b", "target": "tcp:127.0.0.1:6379",
     "stream_id": 1, "age_ms": 1200, "bytes_from_app": 100, "bytes_to_app": 2000, "state": "open",
     "waiting_for": "app-data", "connection": "9f1c0a7e52d3b4410000000000000007", "client": "127.0.0.1:53122"},
    {"worker": 1, "side": "target", "listener": "", "peer": "host-a", "target": "tcp:127.0.0.1:6379",
     "stream_id": 0, "age_ms": 5, "bytes_from_app": 0, "bytes_to_app": 0, "state": "connecting"}]})");
  std::string out = rdmagw::ctl::render_streams(array_at(page, "streams"), 5, 7);
  INFO(out);
  CHECK(out ==
        "SIDE    LISTENER  PEER    CLIENT           TARGET              ID   AGE  FROM APP   TO APP  STATE       "
        "WAITING FOR  CONNECTION\n"
        "client  redis     b       127.0.0.1:53122  tcp:127.0.0.1:6379   1  1.2s     100 B  2.0 KiB  open        "
        "app-data     9f1c0a7e52d3b4410000000000000007\n"
        "target  -         host-a  -                tcp:127.0.0.1:6379   -   5ms       0 B      0 B  connecting  "
        "-            -\n"
        "showing 6-7 of 7\n");
  CHECK(rdmagw::ctl::render_streams({}, 0, 0) == "no active streams\n");
  CHECK(rdmagw::ctl::render_streams({}, 10, 3) == "showing none of 3 (offset 10 is past the end)\n");
}

TEST_CASE("views: top rates come from counter deltas", "[rdmagwctl][views]") {
  Json before = parse_ok(R"({"node": "a", "uptime_seconds": 10, "ready": true, "transport": "tcp",
    "streams": {"active": 1},
    "listeners": [{"name": "web", "active": 1, "accepted": 10, "bytes_received": 1000, "bytes_sent": 0}],
    "peers": [{"name": "b", "sessions_tcp": 2, "sessions_rdma": 0, "streams_opened": 4, "bytes_sent": 0,
               "bytes_received": 0}]})");
  Json after = parse_ok(R"({"node": "a", "uptime_seconds": 12, "ready": true, "transport": "tcp",
    "streams": {"active": 3},
    "listeners": [{"name": "new", "active": 0, "accepted": 2, "bytes_received": 0, "bytes_sent": 0},
                  {"name": "web", "active": 3, "accepted": 30, "bytes_received": 2098152, "bytes_sent": 4096}],
    "peers": [{"name": "b", "sessions_tcp": 2, "sessions_rdma": 0, "streams_opened": 24,
               "bytes_sent": 2048, "bytes_received": 0}]})");
  std::string out = rdmagw::ctl::render_top(before, after, 2.0);
  INFO(out);
  CHECK(out ==
        "rdmagw on node a, up 12.0s, ready, transport tcp; streams 3 active\n"
        "\n"
        "LISTENER  ACTIVE  ACCEPTS/S       IN/S      OUT/S  ACCEPTED  BYTES IN  BYTES OUT\n"
        "new            0      1.0/s      0 B/s      0 B/s         2       0 B        0 B\n"
        "web            3       10/s  1.0 MiB/s  2.0 KiB/s        30   2.0 MiB    4.0 KiB\n"
        "\n"
        "PEER  TCP  RDMA  OPENS/S     SENT/S  RECEIVED/S  CREDIT STALLS  RECONNECTS\n"
        "b       2     0     10/s  1.0 KiB/s       0 B/s              0           0\n");
  // A restart (uptime went backwards) counts from zero, not from the old totals.
  std::string restarted = rdmagw::ctl::render_top(after, before, 2.0);
  INFO(restarted);
  CHECK(contains(restarted, "web            1      5.0/s  500 B/s"));
}
