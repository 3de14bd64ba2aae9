// SPDX-License-Identifier: Apache-2.0
// rdmagwctl: admin addresses, HTTP response framing and the command line.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tools/rdmagwctl/cli_options.h"
#include "tools/rdmagwctl/http_client.h"
#include "tools/rdmagwctl/http_response.h"

using rdmagw::ctl::HostPort;
using rdmagw::ctl::HttpResponse;
using rdmagw::ctl::parse_host_port;
using rdmagw::ctl::parse_http_response;
using rdmagw::ctl::ParseStatus;

TEST_CASE("admin address: HOST:PORT and [IPv6]:PORT", "[rdmagwctl][http]") {
  HostPort hp;
  std::string error;
  REQUIRE(parse_host_port("127.0.0.1:9901", &hp, &error));
  CHECK(hp.host == "127.0.0.1");
  CHECK(hp.port == "9901");
  CHECK(hp.display() == "127.0.0.1:9901");
  REQUIRE(parse_host_port("[::1]:9901", &hp, &error));
  CHECK(hp.host == "::1");
  CHECK(hp.display() == "[::1]:9901");
  REQUIRE(parse_host_port("http://localhost:80/", &hp, &error));
  CHECK(hp.host == "localhost");
  CHECK(hp.port == "80");

  for (const char* bad :
       {"", "127.0.0.1", "127.0.0.1:", ":9901", "::1:9901", "[::1]9901", "[::1", "h:0", "h:65536", "h:12x", "h:-1"}) {
    INFO(bad);
    CHECK_FALSE(parse_host_port(bad, &hp, &error));
    CHECK(error.find("bad admin address") == 0);
  }
}

TEST_CASE("http response: Content-Length", "[rdmagwctl][http]") {
  HttpResponse r;
  std::string error;
  std::string raw = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}";
  for (size_t n = 0; n < raw.size(); ++n) {
    INFO("prefix " << n);
    CHECK(parse_http_response(raw.substr(0, n), false, &r, &error) == ParseStatus::kIncomplete);
  }
  REQUIRE(parse_http_response(raw, false, &r, &error) == ParseStatus::kComplete);
  CHECK(r.status == 200);
  CHECK(r.reason == "OK");
  CHECK(r.body == "{\"a\":1}");
  REQUIRE(r.header("CONTENT-TYPE"));
  CHECK(*r.header("Content-Type") == "application/json");
  CHECK(r.header("Allow") == nullptr);

  CHECK(parse_http_response(raw.substr(0, raw.size() - 2), true, &r, &error) == ParseStatus::kInvalid);
  CHECK(error == "connection closed after 5 of 7 body bytes");
}

TEST_CASE("http response: only Content-Length framing, as rdmagw's admin server sends", "[rdmagwctl][http]") {
  HttpResponse r;
  std::string error;
  std::string closed = "HTTP/1.0 404 Not Found\nAllow: GET\n\nno such path\n";
  CHECK(parse_http_response(closed, true, &r, &error) == ParseStatus::kInvalid);
  CHECK(error == "no Content-Length in the answer (rdmagw's admin server always sends one)");
  std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n0\r\n\r\n";
  CHECK(parse_http_response(chunked, false, &r, &error) == ParseStatus::kInvalid);
  CHECK(error == "Transfer-Encoding 'chunked' in the answer (rdmagw's admin server sends Content-Length)");
  // A bare LF ends lines too, and an empty body has Content-Length 0.
  REQUIRE(parse_http_response("HTTP/1.1 200 OK\nContent-Length: 0\n\n", false, &r, &error) == ParseStatus::kComplete);
  CHECK(r.body.empty());
}

TEST_CASE("http response: garbage is invalid, with a reason", "[rdmagwctl][http]") {
  HttpResponse r;
  std::string error;
  CHECK(parse_http_response("SSH-2.0-OpenSSH\r\n", false, &r, &error) == ParseStatus::kInvalid);
  CHECK(error.find("not an HTTP/1.x status line") == 0);
  CHECK(parse_http_response("HTTP/1.1 2x0 OK\r\n", false, &r, &error) == ParseStatus::kInvalid);
  CHECK(parse_http_response("HTTP/1.1 200 OK\r\nno colon\r\n\r\n", false, &r, &error) == ParseStatus::kInvalid);
  CHECK(parse_http_response("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false, &r, &error) ==
        ParseStatus::kInvalid);
  CHECK(parse_http_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false, &r, &error) ==
        ParseStatus::kInvalid);
  CHECK(parse_http_response("", true, &r, &error) == ParseStatus::kInvalid);
  CHECK(error == "connection closed without an answer");
  CHECK(parse_http_response("HTTP/1.1 200 OK\r\n", true, &r, &error) == ParseStatus::kInvalid);
}

namespace {

struct Parsed {
  bool ok;
  rdmagw::ctl::CliOptions options;
  std::string error;
};

Parsed cli(std::vector<std::string> args, const char* env = nullptr) {
  Parsed p;
  p.ok = rdmagw::ctl::parse_cli(args, env, &p.options, &p.error);
  return p;
}

}  // namespace

TEST_CASE("command line: commands, options anywhere, defaults", "[rdmagwctl][cli]") {
  using rdmagw::ctl::Command;
  Parsed p = cli({"status"});
  REQUIRE(p.ok);
  CHECK(p.options.command == Command::kStatus);
  CHECK(p.options.admin.display() == "127.0.0.1:9901");
  CHECK(p.options.timeout_seconds == 5);
  CHECK_FALSE(p.options.json);

  p = cli({"--json", "streams", "--limit=5", "--offset", "10", "--admin", "[::1]:1234", "--timeout", "0.5"});
  REQUIRE(p.ok);
  CHECK(p.options.command == Command::kStreams);
  CHECK(p.options.json);
  CHECK(p.options.streams.limit == 5);
  CHECK(p.options.streams.offset == 10);
  CHECK(p.options.admin.display() == "[::1]:1234");
  CHECK(p.options.timeout_seconds == 0.5);

  p = cli({"peers"}, "10.1.1.1:9");
  REQUIRE(p.ok);
  CHECK(p.options.admin.display() == "10.1.1.1:9");
  p = cli({"peers", "--admin", "127.0.0.2:7"}, "10.1.1.1:9");  // the flag wins
  REQUIRE(p.ok);
  CHECK(p.options.admin.display() == "127.0.0.2:7");

  p = cli({"top", "--count", "2", "--interval", "0.2"});
  REQUIRE(p.ok);
  CHECK(p.options.top.count == 2);
  CHECK(p.options.top.interval_seconds == 0.2);

  p = cli({"drain", "--wait", "--wait-timeout", "3"});
  REQUIRE(p.ok);
  CHECK(p.options.drain.wait);
  CHECK(p.options.drain.wait_timeout_seconds == 3);

  p = cli({"check", "x.yaml"}, "not an address");  // check never uses the endpoint
  REQUIRE(p.ok);
  CHECK(p.options.config_file == "x.yaml");

  CHECK(cli({"status", "--help"}).options.command == Command::kHelp);
  CHECK(cli({"-V"}).options.command == Command::kVersion);
}

TEST_CASE("command line: usage errors say what is wrong", "[rdmagwctl][cli]") {
  struct Case {
    std::vector<std::string> args;
    const char* words;
  };
  const Case cases[] = {
      {{}, "no command"},
      {{"stats"}, "unknown command 'stats'"},
      {{"status", "--bogus"}, "unknown option '--bogus'"},
      {{"status", "extra"}, "unexpected argument 'extra'"},
      {{"status", "--limit", "3"}, "--limit does not apply to 'status'"},
      {{"top", "--json"}, "--json does not apply to 'top'"},
      {{"streams", "--limit", "0"}, "--limit needs a whole number from 1 to 10000"},
      {{"streams", "--limit", "10001"}, "--limit needs"},
      {{"streams", "--offset", "-1"}, "--offset needs"},
      {{"top", "--interval", "0"}, "--interval needs a positive number"},
      {{"status", "--timeout"}, "--timeout needs a value"},
      {{"status", "--json=yes"}, "--json takes no value"},
      {{"check"}, "check needs a CONFIG file"},
      {{"check", "a", "b"}, "check takes one CONFIG file"},
      {{"status", "--admin", "::1:9901"}, "brackets"},
  };
  for (const auto& c : cases) {
    Parsed p = cli(c.args);
    INFO("error: " << p.error);
    CHECK_FALSE(p.ok);
    CHECK(p.error.find(c.words) != std::string::npos);
  }
  Parsed p = cli({"status"}, "nonsense");
  CHECK_FALSE(p.ok);
  CHECK(p.error.find("(from RDMAGW_ADMIN)") != std::string::npos);
}
