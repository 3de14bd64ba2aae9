// SPDX-License-Identifier: Apache-2.0
// rdmagwctl prints no raw control byte: every string of an admin answer may
// come from outside the host (a peer's node name, pod names), so each view
// shows control bytes, C1 controls and bytes that are not UTF-8 as escapes,
// and --json escapes DEL and C1 as \u too (terminal_text.h).
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "common/utf8.h"
#include "test_support.h"
#include "tools/rdmagwctl/json.h"
#include "tools/rdmagwctl/table.h"
#include "tools/rdmagwctl/terminal_text.h"
#include "tools/rdmagwctl/views.h"

using namespace rdmagw::ctl;
using rdmagw::test::contains;

namespace {

// A name that retitles the terminal (OSC 0 ... BEL), clears the screen
// (CSI 2J), returns the cursor (CR) and starts a new line (LF), with DEL,
// CSI as a C1 control in UTF-8 (U+009B), two bytes that are not UTF-8, a
// backslash and a printable non-ASCII letter.
const std::string kHostile =
    "x\x1b]0;pwned\x07\x1b[2J\rfake\nline\x7f\xc2\x9b"
    "31m\xff\xfe"
    "back\\slash caf\xc3\xa9";
// The same, as rdmagwctl must show it.
const std::string kShown = R"(x\x1b]0;pwned\x07\x1b[2J\rfake\nline\x7f\u009b31m\xff\xfeback\\slash caf)"
                           "\xc3\xa9";

Json parse_ok(const std::string& text) {
  std::string error;
  auto v = parse_json(text, &error);
  INFO("input: " << text << "\nerror: " << error);
  REQUIRE(v.has_value());
  return *v;
}

// Nothing a terminal acts on: no C0 control but the line ends, no DEL, only
// well-formed UTF-8 and in it no C1 control. `newlines` says whether '\n'
// (the views' own line ends) is allowed.
void require_terminal_safe(const std::string& out, bool newlines = true) {
  INFO(out);
  for (size_t i = 0; i < out.size();) {
    const auto c = static_cast<uint8_t>(out[i]);
    INFO("byte " << i << ": " << static_cast<int>(c));
    if (c < 0x80) {
      if (c == '\n') REQUIRE(newlines);
      if (c != '\n') REQUIRE(c >= 0x20);
      REQUIRE(c != 0x7F);
      ++i;
      continue;
    }
    size_t length = rdmagw::utf8_sequence_length(out, i);
    REQUIRE(length > 0);
    REQUIRE_FALSE((c == 0xC2 && static_cast<uint8_t>(out[i + 1]) <= 0x9F));
    i += length;
  }
}

// The column where `needle` starts on the line that contains it.
size_t column_of(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  REQUIRE(at != std::string::npos);
  size_t line_start = text.rfind('\n', at);
  return line_start == std::string::npos ? at : at - line_start - 1;
}

}  // namespace

TEST_CASE("terminal text: controls, C1, DEL, bad UTF-8 and backslash are escaped", "[rdmagwctl][terminal]") {
  CHECK(terminal_text("") == "");
  CHECK(terminal_text("plain host-a 10.0.0.2:7471 (x); caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80") ==
        "plain host-a 10.0.0.2:7471 (x); caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
  CHECK(terminal_text("\t\n\r") == R"(\t\n\r)");
  CHECK(terminal_text(std::string("a\0b", 3)) == R"(a\x00b)");
  CHECK(terminal_text("\x01\x07\x08\x1b\x1f\x7f") == R"(\x01\x07\x08\x1b\x1f\x7f)");
  CHECK(terminal_text("\\") == R"(\\)");
  // An escape in the input cannot pass for one of ours.
  CHECK(terminal_text(R"(\x1b)") == R"(\\x1b)");
  CHECK(terminal_text("\x1b") != terminal_text(R"(\x1b)"));
  // C1 controls (U+0080..U+009F); U+00A0 and up are printable.
  CHECK(terminal_text("\xc2\x80") == R"(\u0080)");
  CHECK(terminal_text("\xc2\x9b[2J") == R"(\u009b[2J)");
  CHECK(terminal_text("\xc2\x9f") == R"(\u009f)");
  CHECK(terminal_text("\xc2\xa0") == "\xc2\xa0");
  // Not UTF-8: each such byte alone, then the next byte is looked at afresh.
  CHECK(terminal_text("\xff") == R"(\xff)");
  CHECK(terminal_text("\x80") == R"(\x80)");
  CHECK(terminal_text("\xc3") == R"(\xc3)");                          // truncated
  CHECK(terminal_text("\xc3(") == R"(\xc3()");                        // lead byte without continuation
  CHECK(terminal_text("\xc0\xaf") == R"(\xc0\xaf)");                  // overlong '/'
  CHECK(terminal_text("\xc1\x9b") == R"(\xc1\x9b)");                  // overlong ESC-[ (CSI)
  CHECK(terminal_text("\xe0\x80\x9b") == R"(\xe0\x80\x9b)");          // overlong C1 CSI
  CHECK(terminal_text("\xed\xa0\x80") == R"(\xed\xa0\x80)");          // a UTF-16 surrogate
  CHECK(terminal_text("\xf4\x90\x80\x80") == R"(\xf4\x90\x80\x80)");  // above U+10FFFF
  CHECK(terminal_text("\xe6\x97") == R"(\xe6\x97)");                  // truncated 3-byte sequence
  CHECK(terminal_text(kHostile) == kShown);
  require_terminal_safe(terminal_text(kHostile), false);
  // Every byte value on its own, and every pair, comes out safe.
  for (int a = 0; a < 256; ++a) {
    require_terminal_safe(terminal_text(std::string(1, static_cast<char>(a))), false);
    for (int b = 0x80; b < 0xC0; ++b)
      require_terminal_safe(terminal_text(std::string{static_cast<char>(a), static_cast<char>(b)}), false);
  }
}

TEST_CASE("terminal json: every string and member name escaped, the rest kept", "[rdmagwctl][terminal]") {
  Json answer = Json::object();
  answer["n"] = 7;
  answer["ok"] = true;
  answer["none"] = nullptr;
  answer["list"] = Json::array({kHostile, 1.5});
  answer[kHostile] = Json::object({{"name", kHostile}});
  answer["\\x1b"] = "a";  // escapes the same way as no other name
  answer["\x1b"] = "b";
  Json shown = terminal_json(answer);
  CHECK(shown["n"] == 7);
  CHECK(shown["ok"] == true);
  CHECK(shown["none"].is_null());
  CHECK(shown["list"][0] == kShown);
  CHECK(shown["list"][1] == 1.5);
  REQUIRE(find(shown, kShown) != nullptr);
  CHECK(string_or(*find(shown, kShown), "name") == kShown);
  CHECK(shown.size() == answer.size());
  CHECK(string_or(shown, R"(\\x1b)") == "a");
  CHECK(string_or(shown, R"(\x1b)") == "b");
  // The server's order is kept.
  std::vector<std::string> keys;
  for (const auto& m : shown.items()) keys.push_back(m.key());
  CHECK(keys == std::vector<std::string>{"n", "ok", "none", "list", kShown, R"(\\x1b)", R"(\x1b)"});
}

TEST_CASE("json output: DEL and C1 controls as \\u escapes, like those below 0x20", "[rdmagwctl][terminal][json]") {
  Json v = Json::object({{"name", kHostile}, {"ok", "caf\xc3\xa9 \xc2\xa0"}});
  for (int indent : {0, 2}) {
    std::string out = to_json(v, indent);
    INFO(out);
    require_terminal_safe(out, indent > 0);
    CHECK(contains(out, R"(x\u001b]0;pwned\u0007\u001b[2J\rfake\nline\u007f\u009b31m)"
                        "\xef\xbf\xbd\xef\xbf\xbd"
                        R"(back\\slash caf)"
                        "\xc3\xa9"));
    CHECK(contains(out, "\"caf\xc3\xa9 \xc2\xa0\""));  // printable non-ASCII stays as is
    // Still JSON, and the same text once read back (the bytes that were not
    // UTF-8 are U+FFFD).
    Json back = parse_ok(out);
    std::string expected = kHostile;
    expected.replace(expected.find("\xff\xfe"), 2, "\xef\xbf\xbd\xef\xbf\xbd");
    CHECK(string_or(back, "name") == expected);
  }
  CHECK(json_quote("\x7f\xc2\x80\xc2\x9f") == R"("\u007f\u0080\u009f")");
  CHECK(json_quote("\xc2\xa9") == "\"\xc2\xa9\"");  // U+00A9 is printable
}

TEST_CASE("views: status shows hostile strings escaped", "[rdmagwctl][terminal][views]") {
  Json stats = parse_ok(R"({"version": "0.1.0", "node": "n", "uptime_seconds": 1, "ready": true, "workers": 1,
    "config": {"file": "f", "generation": 2, "reloads": 1, "reload_failures": 0,
               "last_reload": {"ok": true, "unix_time": 5, "changes": ["c"], "errors": []}},
    "listeners": [{"name": "l", "listen": "tcp:127.0.0.1:1", "configured": true, "accepted": 1, "active": 0,
                   "bytes_received": 0, "bytes_sent": 0}],
    "peers": [{"name": "p", "sessions_tcp": 1, "sessions_rdma": 0, "streams_opened": 1, "bytes_sent": 0,
               "bytes_received": 0, "credit_stalls": 0, "reconnects": 0}],
    "streams": {"opened_outbound": 1, "opened_inbound": 0, "active": 0, "failed": {}},
    "latency": {}})");
  for (const char* key : {"version", "commit", "node", "transport", "transport_reason", "io_uring"})
    stats[key] = kHostile;
  stats["config"]["file"] = kHostile;
  stats["config"]["last_reload"]["changes"][0] = kHostile;
  stats["listeners"][0]["name"] = kHostile;
  stats["listeners"][0]["listen"] = kHostile;
  stats["peers"][0]["name"] = kHostile;
  stats["streams"]["failed"][kHostile] = 3;
  stats["latency"][kHostile] = Json::object({{"count", 1}, {"sum_seconds", 0.001}});
  std::string out = render_status(stats);
  require_terminal_safe(out);
  CHECK(contains(out, "rdmagw " + kShown + " (commit " + kShown + ") on node " + kShown + ", up "));
  CHECK(contains(out, "transport  " + kShown + " (" + kShown + ")\n"));
  CHECK(contains(out, "config     " + kShown + "  generation 2"));
  CHECK(contains(out, "             " + kShown + "\n"));
  CHECK(contains(out, "failures   " + kShown + " 3\n"));
  CHECK(contains(out, "  " + kShown + "  " + kShown + "  "));  // the listener row
  CHECK(contains(out, "io_uring   " + kShown + "\n"));
  CHECK(contains(out, "latency    mean " + kShown + " 1.00ms (1)\n"));
  // Widths are those of the escaped text (é is two bytes, one column): the
  // next column lines up after it.
  CHECK(column_of(out, "LISTEN") == 2 + (kShown.size() - 1) + 2);
}

TEST_CASE("views: peers shows a hostile node name escaped, columns aligned", "[rdmagwctl][terminal][views]") {
  Json peers = parse_ok(R"({"peers": [
    {"name": "b", "configured": true, "transport": "tcp", "state": "up", "sessions": [
       {"worker": 0, "role": "dialer", "transport": "tcp", "state": "open", "remote_address": "10.0.0.2:7471",
        "peer_node": "host-b", "rtt_us": 41, "streams": 2}]},
    {"name": "c", "configured": false, "transport": "tcp", "state": "down", "last_error": "e",
     "transport_reason": "r", "last_close": "l", "sessions": []}]})");
  peers["peers"][0]["sessions"][0]["peer_node"] = kHostile;
  peers["peers"][0]["sessions"][0]["state"] = kHostile;
  peers["peers"][1]["name"] = kHostile;
  peers["peers"][1]["last_error"] = kHostile;
  peers["peers"][1]["last_close"] = kHostile;
  peers["peers"][1]["transport_reason"] = kHostile;
  std::string out = render_peers(peers);
  require_terminal_safe(out);
  CHECK(contains(out, "node " + kShown + "\n"));
  CHECK(contains(out, "last closed: " + kShown + "; last error: " + kShown + "; transport tcp: " + kShown));
  // The peer name column is as wide as the escaped name: STATE starts after it.
  CHECK(column_of(out, "STATE") == (kShown.size() - 1) + 2);  // é: two bytes, one column
  CHECK(column_of(out, kShown + "  down") == 0);
}

TEST_CASE("views: services shows hostile pod names and API errors escaped", "[rdmagwctl][terminal][views]") {
  Json services = parse_ok(R"({"services": {"file": "/run/s.json", "loaded": true, "services": 1, "endpoints": 1,
      "error": "", "api": {"reachable": false, "since": "2025-01-01T00:00:00Z", "error": "x"}},
    "table": [{"namespace": "default", "name": "redis", "cluster_ips": ["10.96.0.10"],
      "ports": [{"name": "p", "port": 6379, "endpoints": [
        {"address": "10.244.1.5", "port": 6379, "state": "ready", "rdmagw": true, "pod": "redis-0",
         "node": "n1", "streams": 3}]}]}]})");
  services["services"]["file"] = kHostile;
  services["services"]["error"] = kHostile;
  services["services"]["api"]["error"] = kHostile;
  services["services"]["api"]["since"] = kHostile;
  Json& service = services["table"][0];
  service["namespace"] = kHostile;
  service["name"] = kHostile;
  service["cluster_ips"][0] = kHostile;
  service["ports"][0]["name"] = kHostile;
  Json& endpoint = service["ports"][0]["endpoints"][0];
  for (const char* key : {"address", "state", "pod", "node"}) endpoint[key] = kHostile;
  std::string out = render_services(services);
  require_terminal_safe(out);
  CHECK(contains(out, "file " + kShown + ": 1 services, 1 endpoints; last read failed: " + kShown));
  CHECK(contains(out, "API server: UNREACHABLE since " + kShown + " (" + kShown + ")"));
  CHECK(contains(out, kShown + "/" + kShown + "  " + kShown + "  6379 (" + kShown + ")  " + kShown + ":6379  " +
                          kShown + "  yes"));
  CHECK(contains(out, "3  " + kShown + "  " + kShown + "\n"));

  // Behind its node's rdmagw: the node's tunnel address, escaped too.
  endpoint["rdmagw"] = false;
  endpoint["node_rdmagw"] = kHostile;
  endpoint["tunnel"] = "down";
  endpoint["tunnel_error"] = kHostile;
  out = render_services(services);
  require_terminal_safe(out);
  CHECK(contains(out, "node's at " + kShown + ", tunnel down: " + kShown));

  // An IPv6 endpoint in brackets, so that its port stands apart.
  endpoint["address"] = "fd00:10::5";
  out = render_services(services);
  CHECK(contains(out, "[fd00:10::5]:6379"));
}

TEST_CASE("views: streams shows hostile names escaped, columns aligned", "[rdmagwctl][terminal][views]") {
  Json page = parse_ok(R"({"total": 2, "streams": [
    {"side": "client", "listener": "redis", "peer": "b", "target": "tcp:127.0.0.1:6379", "stream_id": 1,
     "age_ms": 1200, "state": "open", "waiting_for": "app-data"},
    {"side": "target", "listener": "", "peer": "host-a", "target": "tcp:127.0.0.1:6379", "stream_id": 2,
     "age_ms": 5, "state": "open"}]})");
  Json& hostile = page["streams"][1];
  for (const char* key : {"side", "listener", "peer", "client", "target", "state", "waiting_for", "connection"})
    hostile[key] = kHostile;
  std::string out = render_streams(array_at(page, "streams"), 0, 2);
  require_terminal_safe(out);
  const size_t width = kShown.size() - 1;  // é is two bytes, one column
  CHECK(column_of(out, "LISTENER") == width + 2);
  CHECK(column_of(out, "redis") == width + 2);
  CHECK(column_of(out, "PEER") == 2 * (width + 2));
  CHECK(contains(out, kShown + "  " + kShown + "  " + kShown + "  " + kShown + "  " + kShown + "   2"));
  CHECK(contains(out, "showing 1-2 of 2\n"));
}

TEST_CASE("views: top shows hostile names escaped, and still matches them up", "[rdmagwctl][terminal][views]") {
  Json before = parse_ok(R"({"node": "a", "uptime_seconds": 10, "ready": true, "transport": "tcp",
    "listeners": [{"name": "web", "active": 1, "accepted": 10}],
    "peers": [{"name": "b", "sessions_tcp": 1, "streams_opened": 4}]})");
  before["listeners"][0]["name"] = kHostile;
  before["peers"][0]["name"] = kHostile;
  Json after = before;
  after["uptime_seconds"] = 12;
  after["listeners"][0]["accepted"] = 30;
  after["peers"][0]["streams_opened"] = 24;
  after["node"] = kHostile;
  after["transport"] = kHostile;
  std::string out = render_top(before, after, 2.0);
  require_terminal_safe(out);
  CHECK(contains(out, "rdmagw on node " + kShown + ", up 12.0s, ready, transport " + kShown + "; streams 0"));
  CHECK(contains(out, kShown + "       1       10/s"));   // the listener's rate: matched by its name
  CHECK(contains(out, kShown + "    1     0     10/s"));  // the peer's
}

TEST_CASE("table: widths of escaped cells", "[rdmagwctl][terminal][table]") {
  Table t({{"NAME"}, {"N", Align::kRight}});
  t.add_row({terminal_text("a\x1b"
                           "b"),
             "1"});
  t.add_row({"x", "22"});
  CHECK(t.render() ==
        "NAME     N\n"
        "a\\x1bb   1\n"
        "x       22\n");
}
