// SPDX-License-Identifier: Apache-2.0
#include "common/address.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace rdmagw {

namespace {

bool parse_port(std::string_view text, uint16_t* port, std::string* error) {
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    *error = "port '" + std::string(text) + "' is not a number";
    return false;
  }
  if (value == 0 || value > 65535) {
    *error = "port " + std::string(text) + " is out of range 1-65535";
    return false;
  }
  *port = static_cast<uint16_t>(value);
  return true;
}

}  // namespace

std::optional<Endpoint> make_tcp_endpoint(std::string_view ip, uint16_t port, std::string* error) {
  Endpoint ep;
  ep.kind = Endpoint::Kind::kTcp;
  std::string host(ip);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ep.addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ep.addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    ep.addr_len = sizeof(sockaddr_in);
    return ep;
  }
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    ep.addr_len = sizeof(sockaddr_in6);
    return ep;
  }
  *error = "'" + std::string(ip) + "' is not a numeric IPv4 or IPv6 address";
  return std::nullopt;
}

std::optional<Endpoint> parse_host_port(std::string_view text, std::string* error) {
  size_t colon;
  std::string_view host;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      *error = "'" + std::string(text) + "' must look like [IPv6]:PORT";
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      *error = "'" + std::string(text) + "' must look like IP:PORT";
      return std::nullopt;
    }
    host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos) {
      *error = "IPv6 address in '" + std::string(text) + "' must be in brackets: [IPv6]:PORT";
      return std::nullopt;
    }
  }
  uint16_t port = 0;
  if (!parse_port(text.substr(colon + 1), &port, error)) return std::nullopt;
  return make_tcp_endpoint(host, port, error);
}

std::optional<Endpoint> parse_endpoint(std::string_view text, std::string* error) {
  if (text.starts_with("tcp:")) return parse_host_port(text.substr(4), error);
  if (text.starts_with("unix:")) {
    std::string_view path = text.substr(5);
    Endpoint ep;
    ep.kind = Endpoint::Kind::kUnix;
    auto* un = reinterpret_cast<sockaddr_un*>(&ep.addr);
    if (path.empty()) {
      *error = "unix socket path is empty";
      return std::nullopt;
    }
    if (path.size() >= sizeof(un->sun_path)) {
      *error = "unix socket path is longer than " + std::to_string(sizeof(un->sun_path) - 1) + " bytes";
      return std::nullopt;
    }
    if (path.front() != '/') {
      *error = "unix socket path '" + std::string(path) + "' must be absolute";
      return std::nullopt;
    }
    un->sun_family = AF_UNIX;
    std::memcpy(un->sun_path, path.data(), path.size());
    ep.addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
    return ep;
  }
  *error = "'" + std::string(text) + "' must start with tcp: or unix:";
  return std::nullopt;
}

std::string sockaddr_to_string(const sockaddr* sa, socklen_t len) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  if (sa->sa_family == AF_UNIX) {
    auto* un = reinterpret_cast<const sockaddr_un*>(sa);
    size_t max = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
    return "unix:" + std::string(un->sun_path, strnlen(un->sun_path, max));
  }
  return "unknown";
}

std::string sockaddr_ip_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET)
    return inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf)) ? buf : "";
  if (sa->sa_family == AF_INET6)
    return inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf)) ? buf : "";
  return {};
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown";
  return sockaddr_to_string(reinterpret_cast<sockaddr*>(&ss), len);
}

bool ip_bytes_of(const sockaddr* sa, socklen_t len, IpBytes* out) {
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    out->fill(0);
    (*out)[10] = (*out)[11] = 0xff;
    std::memcpy(out->data() + 12, &in->sin_addr, 4);
    return true;
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    std::memcpy(out->data(), &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
    return true;
  }
  return false;
}

std::string ip_bytes_text(const IpBytes& ip) {
  char buf[INET6_ADDRSTRLEN] = {};
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(ip.data(), kMapped, 12) == 0)
    inet_ntop(AF_INET, ip.data() + 12, buf, sizeof(buf));
  else
    inet_ntop(AF_INET6, ip.data(), buf, sizeof(buf));
  return buf;
}

std::string Endpoint::to_string() const {
  if (kind == Kind::kUnix) return sockaddr_to_string(reinterpret_cast<const sockaddr*>(&addr), addr_len);
  return "tcp:" + sockaddr_to_string(reinterpret_cast<const sockaddr*>(&addr), addr_len);
}

uint16_t endpoint_port(const Endpoint& endpoint) {
  if (endpoint.kind != Endpoint::Kind::kTcp) return 0;
  if (endpoint.addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&endpoint.addr)->sin_port);
  if (endpoint.addr.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&endpoint.addr)->sin6_port);
  return 0;
}

bool is_loopback(const Endpoint& endpoint) {
  return endpoint.kind == Endpoint::Kind::kTcp && is_loopback_address(endpoint.addr);
}

bool is_loopback_address(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace rdmagw
