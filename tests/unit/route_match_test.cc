// SPDX-License-Identifier: Apache-2.0
#include "common/route_match.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <cstring>

using namespace rdmagw;

namespace {
sockaddr_storage v4(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  inet_pton(AF_INET, ip, &in->sin_addr);
  return ss;
}
sockaddr_storage v6(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  inet_pton(AF_INET6, ip, &in6->sin6_addr);
  return ss;
}
RouteMatch must(const char* text) {
  std::string error;
  auto m = parse_route_match(text, &error);
  INFO(text << ": " << error);
  REQUIRE(m);
  return *m;
}
bool hit(const RouteMatch& m, const sockaddr_storage& ss) { return m.matches(reinterpret_cast<const sockaddr*>(&ss)); }
}  // namespace

TEST_CASE("route match: IPv4 CIDR with a port, a range, or any port") {
  auto m = must("10.1.0.0/16:6379");
  CHECK(hit(m, v4("10.1.200.3", 6379)));
  CHECK_FALSE(hit(m, v4("10.1.200.3", 6380)));
  CHECK_FALSE(hit(m, v4("10.2.0.1", 6379)));
  auto r = must("10.2.0.5:8000-8100");
  CHECK(hit(r, v4("10.2.0.5", 8000)));
  CHECK(hit(r, v4("10.2.0.5", 8100)));
  CHECK_FALSE(hit(r, v4("10.2.0.5", 8101)));
  CHECK_FALSE(hit(r, v4("10.2.0.6", 8050)));
  auto any = must("0.0.0.0/0");
  CHECK(hit(any, v4("192.0.2.1", 1)));
  CHECK_FALSE(hit(any, v6("2001:db8::1", 80)));  // families never cross
  auto odd = must("10.3.0.128/25");
  CHECK(hit(odd, v4("10.3.0.200", 1)));
  CHECK_FALSE(hit(odd, v4("10.3.0.100", 1)));
  CHECK(must("10.1.2.3/16").to_string() == "10.1.0.0/16");  // host bits dropped
}

TEST_CASE("route match: IPv6 in brackets with ports, or bare") {
  auto m = must("[fd00::/64]:6379");
  CHECK(hit(m, v6("fd00::1234", 6379)));
  CHECK_FALSE(hit(m, v6("fd00:0:0:1::1", 6379)));
  CHECK_FALSE(hit(m, v4("10.0.0.1", 6379)));
  auto b = must("fd00::/16");
  CHECK(hit(b, v6("fd00:1::1", 1)));
  CHECK(m.to_string() == "[fd00::/64]:6379");
}

TEST_CASE("route match: bad input is rejected with the reason") {
  std::string error;
  for (const char* bad : {"", "10.1.0.0/33", "10.1.0.0/16:0", "10.1.0.0/16:70000", "10.2.0.5:9000-8000", "10.x.0.0/8",
                          "[fd00::/64", "[fd00::/129]:80", "[fd00::]x"}) {
    error.clear();
    INFO(bad);
    CHECK_FALSE(parse_route_match(bad, &error));
    CHECK_FALSE(error.empty());
  }
}
