// SPDX-License-Identifier: Apache-2.0
#include "common/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "common/connection_id.h"
#include "common/local_addresses.h"

using rdmagw::ConnectionId;
using rdmagw::Endpoint;
using rdmagw::make_tcp_endpoint;
using rdmagw::next_connection_id;
using rdmagw::parse_endpoint;
using rdmagw::parse_host_port;

namespace {

uint16_t port_of(const Endpoint& ep) {
  if (ep.addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ep.addr)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&ep.addr)->sin6_port);
}

// Parses text that must be rejected and returns the error message.
std::string rejected(const std::string& text) {
  std::string err;
  auto ep = parse_endpoint(text, &err);
  INFO("endpoint text: " << text);
  CHECK_FALSE(ep.has_value());
  CHECK_FALSE(err.empty());
  return err;
}

}  // namespace

TEST_CASE("parse_endpoint: tcp IPv4", "[address]") {
  std::string err;
  auto ep = parse_endpoint("tcp:127.0.0.1:6379", &err);
  REQUIRE(ep.has_value());
  CHECK(err.empty());
  CHECK(ep->kind == Endpoint::Kind::kTcp);
  CHECK(ep->addr.ss_family == AF_INET);
  CHECK(ep->addr_len == sizeof(sockaddr_in));
  CHECK(port_of(*ep) == 6379);
  auto* in = reinterpret_cast<const sockaddr_in*>(&ep->addr);
  CHECK(ntohl(in->sin_addr.s_addr) == 0x7f000001u);
  CHECK(ep->to_string() == "tcp:127.0.0.1:6379");
}

TEST_CASE("parse_endpoint: tcp IPv6 in brackets, canonicalised", "[address]") {
  std::string err;
  auto ep = parse_endpoint("tcp:[::1]:8080", &err);
  REQUIRE(ep.has_value());
  CHECK(ep->kind == Endpoint::Kind::kTcp);
  CHECK(ep->addr.ss_family == AF_INET6);
  CHECK(ep->addr_len == sizeof(sockaddr_in6));
  CHECK(port_of(*ep) == 8080);
  CHECK(ep->to_string() == "tcp:[::1]:8080");

  auto longhand = parse_endpoint("tcp:[0:0:0:0:0:0:0:1]:8080", &err);
  REQUIRE(longhand.has_value());
  CHECK(longhand->to_string() == "tcp:[::1]:8080");
  CHECK(*longhand == *ep);

  auto full = parse_endpoint("tcp:[2001:DB8::a]:1", &err);
  REQUIRE(full.has_value());
  CHECK(full->to_string() == "tcp:[2001:db8::a]:1");
}

TEST_CASE("parse_endpoint: unix socket path", "[address]") {
  std::string err;
  auto ep = parse_endpoint("unix:/run/redis/redis.sock", &err);
  REQUIRE(ep.has_value());
  CHECK(ep->kind == Endpoint::Kind::kUnix);
  CHECK(ep->addr.ss_family == AF_UNIX);
  CHECK(std::string(reinterpret_cast<const sockaddr_un*>(&ep->addr)->sun_path) == "/run/redis/redis.sock");
  CHECK(ep->addr_len == offsetof(sockaddr_un, sun_path) + std::strlen("/run/redis/redis.sock") + 1);
  CHECK(ep->to_string() == "unix:/run/redis/redis.sock");
}

TEST_CASE("parse_endpoint: port boundaries", "[address]") {
  std::string err;
  auto low = parse_endpoint("tcp:10.0.0.1:1", &err);
  REQUIRE(low.has_value());
  CHECK(port_of(*low) == 1);
  auto high = parse_endpoint("tcp:10.0.0.1:65535", &err);
  REQUIRE(high.has_value());
  CHECK(port_of(*high) == 65535);
}

TEST_CASE("parse_endpoint: rejects malformed endpoints with a reason", "[address]") {
  CHECK_THAT(rejected("tcp:localhost:80"), Catch::Contains("'localhost' is not a numeric"));
  CHECK_THAT(rejected("tcp:256.1.1.1:80"), Catch::Contains("not a numeric IPv4 or IPv6"));
  CHECK_THAT(rejected("tcp:1.2.3:80"), Catch::Contains("not a numeric"));
  CHECK_THAT(rejected("tcp:127.0.0.1"), Catch::Contains("must look like IP:PORT"));
  CHECK_THAT(rejected("tcp:127.0.0.1:"), Catch::Contains("is not a number"));
  CHECK_THAT(rejected("tcp:127.0.0.1:0"), Catch::Contains("out of range 1-65535"));
  CHECK_THAT(rejected("tcp:127.0.0.1:65536"), Catch::Contains("out of range 1-65535"));
  CHECK_THAT(rejected("tcp:127.0.0.1:-1"), Catch::Contains("is not a number"));
  CHECK_THAT(rejected("tcp:127.0.0.1:80x"), Catch::Contains("'80x' is not a number"));
  CHECK_THAT(rejected("tcp:::1:80"), Catch::Contains("must be in brackets"));
  CHECK_THAT(rejected("tcp:[::1]80"), Catch::Contains("[IPv6]:PORT"));
  CHECK_THAT(rejected("tcp:[::1]"), Catch::Contains("[IPv6]:PORT"));
  CHECK_THAT(rejected("tcp:[::g]:80"), Catch::Contains("not a numeric"));
  CHECK_THAT(rejected("udp:127.0.0.1:53"), Catch::Contains("must start with tcp: or unix:"));
  CHECK_THAT(rejected("127.0.0.1:80"), Catch::Contains("must start with tcp: or unix:"));
  CHECK_THAT(rejected(""), Catch::Contains("must start with tcp: or unix:"));
  CHECK_THAT(rejected("unix:"), Catch::Contains("empty"));
  CHECK_THAT(rejected("unix:run/x.sock"), Catch::Contains("must be absolute"));
  CHECK_THAT(rejected("unix:/" + std::string(200, 'x')), Catch::Contains("longer than"));
}

TEST_CASE("parse_host_port: admin-style addresses", "[address]") {
  std::string err;
  auto v4 = parse_host_port("127.0.0.1:9901", &err);
  REQUIRE(v4.has_value());
  CHECK(v4->to_string() == "tcp:127.0.0.1:9901");
  auto v6 = parse_host_port("[::]:9901", &err);
  REQUIRE(v6.has_value());
  CHECK(v6->addr.ss_family == AF_INET6);
  CHECK(v6->to_string() == "tcp:[::]:9901");

  CHECK_FALSE(parse_host_port("9901", &err).has_value());
  CHECK_THAT(err, Catch::Contains("IP:PORT"));
  CHECK_FALSE(parse_host_port("tcp:127.0.0.1:9901", &err).has_value());
  CHECK_FALSE(parse_host_port("::1:9901", &err).has_value());
  CHECK_THAT(err, Catch::Contains("brackets"));
}

TEST_CASE("make_tcp_endpoint: numeric IPs only", "[address]") {
  std::string err;
  auto v4 = make_tcp_endpoint("192.168.1.20", 7471, &err);
  REQUIRE(v4.has_value());
  CHECK(v4->to_string() == "tcp:192.168.1.20:7471");
  auto v6 = make_tcp_endpoint("fe80::1", 7471, &err);
  REQUIRE(v6.has_value());
  CHECK(v6->to_string() == "tcp:[fe80::1]:7471");
  auto bracketed = make_tcp_endpoint("[::1]", 7471, &err);
  REQUIRE(bracketed.has_value());
  CHECK(bracketed->to_string() == "tcp:[::1]:7471");
  CHECK_FALSE(make_tcp_endpoint("host-b", 7471, &err).has_value());
  CHECK(err == "'host-b' is not a numeric IPv4 or IPv6 address");
}

TEST_CASE("Endpoint equality compares the canonical form", "[address]") {
  std::string err;
  auto a = parse_endpoint("tcp:127.0.0.1:80", &err);
  auto b = parse_endpoint("tcp:127.0.0.1:80", &err);
  auto c = parse_endpoint("tcp:127.0.0.1:81", &err);
  auto d = parse_endpoint("unix:/tmp/a", &err);
  auto e = parse_endpoint("unix:/tmp/b", &err);
  REQUIRE((a && b && c && d && e));
  CHECK(*a == *b);
  CHECK_FALSE(*a == *c);
  CHECK_FALSE(*d == *e);
  CHECK_FALSE(*a == *d);
}

TEST_CASE("peer_address: a connected socket's peer, 'unknown' without one", "[address]") {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  CHECK(rdmagw::peer_address(client) == "127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  CHECK(rdmagw::peer_address(listener) == "unknown");  // listening: no peer
  ::close(client);
  ::close(listener);

  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  CHECK(rdmagw::peer_address(pair[0]) == "unix:");  // unnamed
  ::close(pair[0]);
  ::close(pair[1]);
}

// The addresses tcp:self:PORT admits: loopback, and what the interfaces hold.
TEST_CASE("LocalAddresses: loopback and this host's interface addresses, nothing else", "[address]") {
  rdmagw::LocalAddresses local;
  std::string error;
  CHECK(local.contains(*rdmagw::parse_endpoint("tcp:127.0.0.1:6379", &error)));
  CHECK(local.contains(*rdmagw::parse_endpoint("tcp:127.0.0.53:1", &error)));
  CHECK_FALSE(local.contains(*rdmagw::parse_endpoint("tcp:192.0.2.77:6379", &error)));  // TEST-NET-1
  CHECK_FALSE(local.contains(*rdmagw::parse_endpoint("tcp:[::ffff:192.0.2.77]:6379", &error)));
  CHECK_FALSE(local.contains(*rdmagw::parse_endpoint("unix:/run/x.sock", &error)));
  // Every IPv4 address an interface that is up holds counts.
  ifaddrs* list = nullptr;
  REQUIRE(getifaddrs(&list) == 0);
  int seen = 0;
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
    CHECK(local.contains(*rdmagw::parse_endpoint(std::string("tcp:") + text + ":80", &error)));
    // The same address in IPv6 form reaches the same socket: it is local.
    CHECK(local.contains(*rdmagw::parse_endpoint(std::string("tcp:[::ffff:") + text + "]:80", &error)));
    ++seen;
  }
  freeifaddrs(list);
  CHECK(seen > 0);
}

TEST_CASE("connection ids: each new, 32 hex digits, one process prefix, a counter", "[address]") {
  ConnectionId a = next_connection_id(), b = next_connection_id();
  CHECK_FALSE(a.empty());
  CHECK(a.text().size() == 32);
  CHECK(a.text().find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a.text() != b.text());
  CHECK(a.text().substr(0, 16) == b.text().substr(0, 16));  // this process's random half
  CHECK(std::stoull(b.text().substr(16), nullptr, 16) == std::stoull(a.text().substr(16), nullptr, 16) + 1);
  CHECK(ConnectionId{}.empty());
  CHECK(ConnectionId{}.text().empty());
}
