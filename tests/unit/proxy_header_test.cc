// SPDX-License-Identifier: Apache-2.0
// The PROXY protocol v2 header (proxy/local/proxy_header.h), byte by byte
// as the specification lays it out: signature, version and command, family,
// length in network order, then the addresses and ports.
#include "proxy/local/proxy_header.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <string>

using namespace rdmagw;

namespace {

const std::string kSignature("\r\n\r\n\0\r\nQUIT\n", 12);

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

sockaddr_in ipv4(const char* address, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, address, &a.sin_addr);
  return a;
}

}  // namespace

TEST_CASE("PROXY v2: an IPv4 client and its original destination") {
  tunnel::StreamOrigin origin;
  origin.client = {4, {192, 0, 2, 7}, 40512};
  origin.destination = {4, {10, 96, 0, 10}, 6379};
  sockaddr_in target = ipv4("127.0.0.1", 8080);
  std::string h = local::proxy_v2_header(&origin, reinterpret_cast<sockaddr*>(&target), sizeof(target));
  CHECK(h == kSignature + bytes({0x21, 0x11, 0, 12, 192, 0, 2, 7, 10, 96, 0, 10, 40512 >> 8, 40512 & 0xff, 6379 >> 8,
                                 6379 & 0xff}));
}

TEST_CASE("PROXY v2: without an original destination, the target is the destination") {
  tunnel::StreamOrigin origin;
  origin.client = {4, {192, 0, 2, 7}, 40512};
  sockaddr_in target = ipv4("127.0.0.1", 8080);
  std::string h = local::proxy_v2_header(&origin, reinterpret_cast<sockaddr*>(&target), sizeof(target));
  CHECK(h.substr(16, 8) == bytes({192, 0, 2, 7, 127, 0, 0, 1}));
  CHECK(h.substr(24) == bytes({40512 >> 8, 40512 & 0xff, 8080 >> 8, 8080 & 0xff}));
}

TEST_CASE("PROXY v2: an IPv6 client; a destination of the other family becomes ::, port 0") {
  tunnel::StreamOrigin origin;
  origin.client = {6, {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, 1};
  sockaddr_in target = ipv4("127.0.0.1", 8080);
  std::string h = local::proxy_v2_header(&origin, reinterpret_cast<sockaddr*>(&target), sizeof(target));
  REQUIRE(h.size() == 16 + 36);
  CHECK(h.substr(12, 4) == bytes({0x21, 0x21, 0, 36}));
  CHECK(h.substr(16, 16) == bytes({0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}));
  CHECK(h.substr(32, 16) == std::string(16, '\0'));
  CHECK(h.substr(48) == bytes({0, 1, 0, 0}));
}

TEST_CASE("PROXY v2: no client known (an older peer, a Unix-socket client) is LOCAL") {
  sockaddr_in target = ipv4("127.0.0.1", 8080);
  const std::string local = kSignature + bytes({0x20, 0x00, 0, 0});
  CHECK(local::proxy_v2_header(nullptr, reinterpret_cast<sockaddr*>(&target), sizeof(target)) == local);
  tunnel::StreamOrigin unknown;
  unknown.connection.fill(1);
  CHECK(local::proxy_v2_header(&unknown, reinterpret_cast<sockaddr*>(&target), sizeof(target)) == local);
}
