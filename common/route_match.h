// SPDX-License-Identifier: Apache-2.0
#pragma once
// Matching an original destination (from SO_ORIGINAL_DST) against a route's
// `match`: "CIDR", "CIDR:PORT" or "CIDR:LO-HI" for IPv4 ("10.1.0.0/16:6379",
// "10.2.0.5:8000-8100", "0.0.0.0/0"), and "[CIDR]:PORT" / "CIDR" for IPv6
// ("[fd00::/64]:6379", "fd00::/64"). An address without a prefix is a host.
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rdmagw {

struct RouteMatch {
  int family = AF_INET;
  uint8_t address[16] = {};  // network address, masked
  int prefix = 0;            // bits
  uint16_t port_lo = 0;      // 0..65535: any port
  uint16_t port_hi = 65535;

  bool matches(const sockaddr* sa) const;
  // The two address ranges share an address (ports aside).
  bool overlaps(const RouteMatch& other) const;
  bool any_port() const { return port_lo == 0 && port_hi == 65535; }
  std::string to_string() const;
};

std::optional<RouteMatch> parse_route_match(std::string_view text, std::string* error);

}  // namespace rdmagw
