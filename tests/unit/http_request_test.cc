// SPDX-License-Identifier: Apache-2.0
// The admin endpoint's HTTP request parser (proxy/admin/http_request.h):
// what it takes, where it waits for more, and what it refuses with which status.
#include "proxy/admin/http_request.h"

#include <catch2/catch.hpp>
#include <string>

using namespace rdmagw::admin;
using Status = HttpParse::Status;

namespace {
HttpParse parse(const std::string& bytes, HttpRequest* out = nullptr) {
  HttpRequest ignored;
  return parse_http_request(bytes, out ? out : &ignored);
}
int refusal(const std::string& bytes) {
  HttpParse p = parse(bytes);
  INFO(bytes);
  REQUIRE(p.status == Status::kError);
  return p.error_status;
}
}  // namespace

TEST_CASE("http request: a GET with headers, path and query") {
  HttpRequest r;
  std::string text =
      "GET /streams?limit=5&peer=b HTTP/1.1\r\nHost: 127.0.0.1:9901\r\nauthorization:  Bearer abc \r\n"
      "X-Other: 1\r\n\r\nGET /live";
  HttpParse p = parse(text, &r);
  REQUIRE(p.status == Status::kRequest);
  CHECK(p.consumed == text.size() - 9);  // the next request stays buffered
  CHECK(r.method == "GET");
  CHECK(r.path == "/streams");
  CHECK(r.query == "limit=5&peer=b");
  CHECK(r.host == "127.0.0.1:9901");
  CHECK(r.authorization == "Bearer abc");
  CHECK_FALSE(r.origin);
  CHECK(r.keep_alive);
}

TEST_CASE("http request: waits for the whole head and body") {
  std::string text = "POST /drain HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody";
  for (size_t n = 0; n < text.size(); ++n) CHECK(parse(text.substr(0, n)).status == Status::kNeedMore);
  HttpRequest r;
  HttpParse p = parse(text, &r);
  REQUIRE(p.status == Status::kRequest);
  CHECK(p.consumed == text.size());
  CHECK(r.body_length == 4);
}

TEST_CASE("http request: keep-alive by version and Connection") {
  HttpRequest r;
  REQUIRE(parse("GET / HTTP/1.0\r\n\r\n", &r).status == Status::kRequest);
  CHECK_FALSE(r.keep_alive);
  REQUIRE(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r).status == Status::kRequest);
  CHECK(r.keep_alive);
  REQUIRE(parse("GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n", &r).status == Status::kRequest);
  CHECK_FALSE(r.keep_alive);
}

TEST_CASE("http request: limits and malformed requests are refused with their status") {
  CHECK(refusal("GET / HTTP/1.1\r\nX: " + std::string(kMaxHeadBytes, 'a') + "\r\n\r\n") == 431);
  CHECK(refusal(std::string(kMaxHeadBytes + 1, 'a')) == 431);  // no end of head in sight
  std::string many = "GET / HTTP/1.1\r\n";
  for (size_t i = 0; i <= kMaxHeaders; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
  CHECK(refusal(many + "\r\n") == 431);
  CHECK(refusal("POST / HTTP/1.1\r\nContent-Length: 4097\r\n\r\n") == 413);
  CHECK(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") == 501);
  CHECK(refusal("GET / HTTP/2.0\r\n\r\n") == 505);
  const char* bad[] = {
      "GET /\r\n\r\n",
      "GET  / HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1 x\r\n\r\n",
      "G(T / HTTP/1.1\r\n\r\n",
      "GET http://evil/ HTTP/1.1\r\n\r\n",
      "GET /a\x01 HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "GET / HTTP/1.1\r\nAuthorization: a\r\nauthorization: b\r\n\r\n",
      "GET / HTTP/1.1\r\nOrigin: a\r\nOrigin: a\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
      "GET / HTTP/1.1\r\nNo colon\r\n\r\n",
      "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
      "GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
      "GET / HTTP/1.1\r\nX: a\x1b[31m\r\n\r\n",
  };
  for (const char* b : bad) CHECK(refusal(b) == 400);
}
