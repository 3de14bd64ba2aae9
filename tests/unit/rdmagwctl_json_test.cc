// SPDX-License-Identifier: Apache-2.0
// rdmagwctl: the JSON reader and writer, tables and human units, and the
// views over the documented admin answers (docs/admin.md).
#include <catch2/catch.hpp>
#include <string>

#include "tools/rdmagwctl/json.h"
#include "tools/rdmagwctl/table.h"
#include "tools/rdmagwctl/views.h"

using rdmagw::ctl::Align;
using rdmagw::ctl::JsonError;
using rdmagw::ctl::JsonValue;
using rdmagw::ctl::parse_json;
using rdmagw::ctl::Table;
using rdmagw::ctl::to_json;

namespace {

JsonValue parse_ok(const std::string& text) {
  JsonError error;
  auto v = parse_json(text, &error);
  INFO("input: " << text << "\nerror: " << error.to_string());
  REQUIRE(v.has_value());
  return *v;
}

JsonError parse_bad(const std::string& text) {
  JsonError error;
  auto v = parse_json(text, &error);
  INFO("input: " << text);
  REQUIRE_FALSE(v.has_value());
  return error;
}

}  // namespace

TEST_CASE("json: scalars", "[rdmagwctl][json]") {
  CHECK(parse_ok("null").is_null());
  CHECK(parse_ok("true").as_bool());
  CHECK_FALSE(parse_ok("false").as_bool());
  CHECK(parse_ok(" \t\r\n 7 \n").as_int64() == 7);
  CHECK(parse_ok("\"hi\"").as_string() == "hi");
}

TEST_CASE("json: numbers keep their text, and int64 when integral", "[rdmagwctl][json]") {
  JsonValue v = parse_ok("12.5");
  CHECK(v.as_double() == 12.5);
  CHECK_FALSE(v.as_int64().has_value());
  CHECK(v.number_text() == "12.5");

  CHECK(parse_ok("-0").as_int64() == 0);
  CHECK(parse_ok("1e3").as_int64() == 1000);
  CHECK(parse_ok("2.0").as_int64() == 2);
  CHECK(parse_ok("1795000000.1").as_double() == Approx(1795000000.1));
  // int64 limits are exact, beyond them only the double remains.
  CHECK(parse_ok("9223372036854775807").as_int64() == INT64_MAX);
  CHECK(parse_ok("-9223372036854775808").as_int64() == INT64_MIN);
  JsonValue big = parse_ok("18446744073709551616");
  CHECK_FALSE(big.as_int64().has_value());
  CHECK(big.as_double() == Approx(1.8446744073709552e19));
  CHECK(to_json(big) == "18446744073709551616");
  CHECK(to_json(parse_ok("1.50E+2")) == "1.50E+2");
}

TEST_CASE("json: string escapes, \\u and surrogate pairs to UTF-8", "[rdmagwctl][json]") {
  CHECK(parse_ok(R"("a\"b\\c\/d\b\f\n\r\t")").as_string() == "a\"b\\c/d\b\f\n\r\t");
  CHECK(parse_ok(R"("\u0041\u00e9\u20AC")").as_string() == "A\xC3\xA9\xE2\x82\xAC");
  CHECK(parse_ok(R"("\ud83d\ude00")").as_string() == "\xF0\x9F\x98\x80");  // U+1F600
  CHECK(parse_ok(R"("\u0000")").as_string() == std::string(1, '\0'));
  CHECK(parse_ok("\"caf\xC3\xA9\"").as_string() == "caf\xC3\xA9");  // raw UTF-8 passes
}

TEST_CASE("json: nesting, order of keys, lookups", "[rdmagwctl][json]") {
  JsonValue v = parse_ok(R"({"z": 1, "a": {"list": [1, [2, [3]], {"k": null}]}, "m": "x", "z": 2})");
  REQUIRE(v.is_object());
  REQUIRE(v.members().size() == 4);
  CHECK(v.members()[0].key == "z");
  CHECK(v.members()[1].key == "a");
  CHECK(v.members()[2].key == "m");
  CHECK(v.int_or("z") == 1);  // the first of duplicate keys
  const auto& list = v.object_at("a").array_at("list");
  REQUIRE(list.size() == 3);
  CHECK(list[1].items()[1].items()[0].as_int64() == 3);
  CHECK(list[2].find("k")->is_null());
  CHECK(v.string_or("m") == "x");
  CHECK(v.string_or("missing", "fallback") == "fallback");
  CHECK(v.int_or("m", -1) == -1);  // wrong type: the fallback
  JsonValue n = parse_ok(R"({"half": 2.5, "huge": 1e300, "tiny": -1e300})");
  CHECK(n.int_or("half") == 2);
  CHECK(n.int_or("huge") == INT64_MAX);
  CHECK(n.int_or("tiny") == INT64_MIN);
  CHECK(v.object_at("m").members().empty());
  CHECK(parse_ok("[]").items().empty());
  CHECK(parse_ok("{}").members().empty());

  std::string deep(200, '[');
  deep += std::string(200, ']');
  CHECK(parse_ok(deep).is_array());
}

TEST_CASE("json: invalid input names the offset", "[rdmagwctl][json]") {
  struct Case {
    const char* text;
    size_t offset;
    const char* words;
  };
  const Case cases[] = {
      {"", 0, "expected a value"},
      {"   ", 3, "end of input"},
      {"{\"a\" 1}", 5, "expected ':'"},
      {"{\"a\":1,}", 7, "expected a string key"},
      {"[1,]", 3, "expected a value"},
      {"[1 2]", 3, "expected ',' or ']'"},
      {"{\"a\":1 \"b\":2}", 7, "expected ',' or '}'"},
      {"{'a':1}", 1, "expected a string key"},
      {"01", 1, "leading zero"},
      {"1.", 2, "digit after '.'"},
      {"1e", 2, "exponent"},
      {"-", 1, "expected a digit"},
      {"+1", 0, "expected a value"},
      {"1e999", 0, "out of range"},
      {"tru", 0, "literal"},
      {"nul", 0, "literal"},
      {"true false", 5, "after the value"},
      {"\"abc", 0, "unterminated string"},
      {"\"a\nb\"", 2, "control character"},
      {"\"\\x\"", 1, "invalid escape"},
      {"\"\\u12G4\"", 5, "hex digit"},
      {"\"\\u12\"", 3, "truncated \\u escape"},
      {"\"\\ud83d\"", 1, "high surrogate"},
      {"\"\\ud83d\\u0041\"", 7, "non-low surrogate"},
      {"\"\\ude00\"", 1, "lone low surrogate"},
      {"\"\xC3\"", 1, "UTF-8"},
      {"\"\xC0\xAF\"", 1, "UTF-8"},      // overlong '/'
      {"\"\xED\xA0\x80\"", 1, "UTF-8"},  // an encoded surrogate
      {"\"\xFF\"", 1, "UTF-8"},
      {"[1]]", 3, "after the value"},
      {"NaN", 0, "expected a value"},
  };
  for (const auto& c : cases) {
    JsonError error = parse_bad(c.text);
    INFO("input: " << c.text << "\nerror: " << error.to_string());
    CHECK(error.offset == c.offset);
    CHECK(error.message.find(c.words) != std::string::npos);
  }
  CHECK(parse_bad("{\"a\" 1}").to_string() == "offset 5: expected ':' after an object key, found '1'");

  std::string too_deep(300, '[');
  too_deep += std::string(300, ']');
  CHECK(parse_bad(too_deep).message.find("nesting") != std::string::npos);
}

TEST_CASE("json: writing back, pretty and compact", "[rdmagwctl][json]") {
  JsonValue v = parse_ok(R"({"a":[1,2.50,{}],"b":{"c":"x\ny\u0001\"é"},"d":[],"e":null,"f":true})");
  CHECK(to_json(v, 0) == R"({"a":[1,2.50,{}],"b":{"c":"x\ny\u0001\"é"},"d":[],"e":null,"f":true})");
  CHECK(to_json(v) ==
        "{\n"
        "  \"a\": [\n"
        "    1,\n"
        "    2.50,\n"
        "    {}\n"
        "  ],\n"
        "  \"b\": {\n"
        "    \"c\": \"x\\ny\\u0001\\\"é\"\n"
        "  },\n"
        "  \"d\": [],\n"
        "  \"e\": null,\n"
        "  \"f\": true\n"
        "}");
  // What is written parses back to the same text.
  CHECK(to_json(parse_ok(to_json(v))) == to_json(v));
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

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

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
  JsonValue page = parse_ok(R"({"total": 7, "offset": 5, "limit": 2, "streams": [
    {"worker": 0, "side": "client", "listener": "redis", "peer": "b", "target": "tcp:127.0.0.1:6379",
     "stream_id": 1, "age_ms": 1200, "bytes_from_app": 100, "bytes_to_app": 2000, "state": "open",
     "waiting_for": "app-data"},
    {"worker": 1, "side": "target", "listener": "", "peer": "host-a", "target": "tcp:127.0.0.1:6379",
     "stream_id": 0, "age_ms": 5, "bytes_from_app": 0, "bytes_to_app": 0, "state": "connecting"}]})");
  std::string out = rdmagw::ctl::render_streams(page.array_at("streams"), 5, 7);
  INFO(out);
  CHECK(out ==
        "SIDE    LISTENER  PEER    TARGET              ID   AGE  FROM APP   TO APP  STATE       WAITING FOR\n"
        "client  redis     b       tcp:127.0.0.1:6379   1  1.2s     100 B  2.0 KiB  open        app-data\n"
        "target  -         host-a  tcp:127.0.0.1:6379   -   5ms       0 B      0 B  connecting  -\n"
        "showing 6-7 of 7\n");
  CHECK(rdmagw::ctl::render_streams({}, 0, 0) == "no active streams\n");
  CHECK(rdmagw::ctl::render_streams({}, 10, 3) == "showing none of 3 (offset 10 is past the end)\n");
}

TEST_CASE("views: top rates come from counter deltas", "[rdmagwctl][views]") {
  JsonValue before = parse_ok(R"({"node": "a", "uptime_seconds": 10, "ready": true, "transport": "tcp",
    "streams": {"active": 1},
    "listeners": [{"name": "web", "active": 1, "accepted": 10, "bytes_received": 1000, "bytes_sent": 0}],
    "peers": [{"name": "b", "sessions_tcp": 2, "sessions_rdma": 0, "streams_opened": 4, "bytes_sent": 0,
               "bytes_received": 0}]})");
  JsonValue after = parse_ok(R"({"node": "a", "uptime_seconds": 12, "ready": true, "transport": "tcp",
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
