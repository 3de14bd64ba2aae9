// SPDX-License-Identifier: Apache-2.0
#include "common/route_match.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace rdmagw {

namespace {

bool parse_number(std::string_view s, unsigned max, unsigned* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size() && *out <= max;
}

bool parse_ports(std::string_view s, RouteMatch* m, std::string* error) {
  size_t dash = s.find('-');
  unsigned lo = 0, hi = 0;
  if (dash == std::string_view::npos) {
    if (!parse_number(s, 65535, &lo) || lo == 0) {
      *error = "port '" + std::string(s) + "' must be a number 1-65535";
      return false;
    }
    hi = lo;
  } else {
    if (!parse_number(s.substr(0, dash), 65535, &lo) || !parse_number(s.substr(dash + 1), 65535, &hi) || lo == 0) {
      *error = "port range '" + std::string(s) + "' must be LO-HI with ports 1-65535";
      return false;
    }
    if (lo > hi) {
      *error = "port range '" + std::string(s) + "' has LO above HI";
      return false;
    }
  }
  m->port_lo = static_cast<uint16_t>(lo);
  m->port_hi = static_cast<uint16_t>(hi);
  return true;
}

bool parse_cidr(std::string_view s, int family, RouteMatch* m, std::string* error) {
  size_t slash = s.find('/');
  std::string addr(s.substr(0, slash));
  int bits = family == AF_INET ? 32 : 128;
  unsigned prefix = static_cast<unsigned>(bits);
  if (slash != std::string_view::npos && !parse_number(s.substr(slash + 1), static_cast<unsigned>(bits), &prefix)) {
    *error = "prefix length in '" + std::string(s) + "' must be 0-" + std::to_string(bits);
    return false;
  }
  if (inet_pton(family, addr.c_str(), m->address) != 1) {
    *error = "'" + addr + "' is not a numeric " + (family == AF_INET ? "IPv4" : "IPv6") + " address";
    return false;
  }
  m->family = family;
  m->prefix = static_cast<int>(prefix);
  // Keep only the network part, so that matching and printing agree.
  int bytes = bits / 8;
  for (int i = 0; i < bytes; ++i) {
    int keep = std::max(0, std::min(8, m->prefix - i * 8));
    m->address[i] &= static_cast<uint8_t>(keep == 0 ? 0 : 0xFF << (8 - keep));
  }
  return true;
}

}  // namespace

std::optional<RouteMatch> parse_route_match(std::string_view text, std::string* error) {
  RouteMatch m;
  if (text.empty()) {
    *error = "match is empty";
    return std::nullopt;
  }
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) {
      *error = "'" + std::string(text) + "': missing ']'";
      return std::nullopt;
    }
    if (!parse_cidr(text.substr(1, close - 1), AF_INET6, &m, error)) return std::nullopt;
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':' || !parse_ports(rest.substr(1), &m, error)) {
        if (error->empty()) *error = "expected ':PORT' after ']' in '" + std::string(text) + "'";
        return std::nullopt;
      }
    }
    return m;
  }
  if (text.find(':') != text.rfind(':') ||
      (text.find(':') != std::string_view::npos && text.find('.') == std::string_view::npos)) {
    // Bare IPv6 (several colons): no port allowed without brackets.
    if (!parse_cidr(text, AF_INET6, &m, error)) return std::nullopt;
    return m;
  }
  size_t colon = text.find(':');
  if (!parse_cidr(text.substr(0, colon), AF_INET, &m, error)) return std::nullopt;
  if (colon != std::string_view::npos && !parse_ports(text.substr(colon + 1), &m, error)) return std::nullopt;
  return m;
}

bool RouteMatch::matches(const sockaddr* sa) const {
  const uint8_t* addr;
  uint16_t port;
  if (sa->sa_family == AF_INET && family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    addr = reinterpret_cast<const uint8_t*>(&in->sin_addr);
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6 && family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    addr = in6->sin6_addr.s6_addr;
    port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  if (port < port_lo || port > port_hi) return false;
  int full = prefix / 8, rest = prefix % 8;
  if (std::memcmp(addr, address, static_cast<size_t>(full)) != 0) return false;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xFF << (8 - rest));
  return (addr[full] & mask) == address[full];
}

bool RouteMatch::overlaps(const RouteMatch& other) const {
  if (family != other.family) return false;
  // Two prefixes overlap when they agree on the shorter one's bits.
  int bits = std::min(prefix, other.prefix);
  int full = bits / 8, rest = bits % 8;
  if (std::memcmp(address, other.address, static_cast<size_t>(full)) != 0) return false;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xFF << (8 - rest));
  return (address[full] & mask) == (other.address[full] & mask);
}

std::string RouteMatch::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, address, buf, sizeof(buf));
  std::string cidr = std::string(buf) + "/" + std::to_string(prefix);
  std::string ports;
  if (port_lo != 0 || port_hi != 65535)
    ports = port_lo == port_hi ? std::to_string(port_lo) : std::to_string(port_lo) + "-" + std::to_string(port_hi);
  if (family == AF_INET6) return ports.empty() ? cidr : "[" + cidr + "]:" + ports;
  return ports.empty() ? cidr : cidr + ":" + ports;
}

}  // namespace rdmagw
