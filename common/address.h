// SPDX-License-Identifier: Apache-2.0
#pragma once
// Endpoint strings used in config and on the wire: "tcp:IP:PORT" (IPv6 as
// "tcp:[::1]:PORT") and "unix:PATH". Parsing is strict so that the allowlist
// can compare canonical text.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rdmagw {

struct Endpoint {
  enum class Kind { kTcp, kUnix };
  Kind kind = Kind::kTcp;
  sockaddr_storage addr{};
  socklen_t addr_len = 0;

  // Canonical text form, e.g. "tcp:127.0.0.1:6379" or "unix:/run/x.sock".
  std::string to_string() const;
  bool operator==(const Endpoint& other) const { return to_string() == other.to_string(); }
};

// Parses "tcp:HOST:PORT" or "unix:PATH". HOST must be a numeric IPv4 or
// bracketed IPv6 address. On failure returns nullopt and sets *error.
std::optional<Endpoint> parse_endpoint(std::string_view text, std::string* error);

// Parses a numeric IP address plus port (no scheme) into a TCP endpoint.
std::optional<Endpoint> make_tcp_endpoint(std::string_view ip, uint16_t port, std::string* error);

// Parses "IP:PORT" / "[IPv6]:PORT" (used for the admin bind address).
std::optional<Endpoint> parse_host_port(std::string_view text, std::string* error);

// A TCP endpoint's port (host order); 0 for a Unix one.
uint16_t endpoint_port(const Endpoint& endpoint);

// Whether a TCP endpoint's address is loopback (127.0.0.0/8, ::1, or
// ::ffff:127.x): reachable from this host only.
bool is_loopback(const Endpoint& endpoint);
// The same for a socket's address (false for a family other than IPv4/IPv6).
bool is_loopback_address(const sockaddr_storage& address);

// Formats any socket address as text for logs ("127.0.0.1:5000", "unix:...").
std::string sockaddr_to_string(const sockaddr* sa, socklen_t len);
// An IPv4 or IPv6 socket's address alone, without its port ("10.0.0.5",
// "fd00::5"); empty for another family.
std::string sockaddr_ip_text(const sockaddr* sa);
// The connected socket's peer as sockaddr_to_string writes it; "unknown" when
// getpeername fails (the peer already gone).
std::string peer_address(int fd);

// An IP address as 16 bytes, IPv4 as ::ffff:a.b.c.d, so that both families
// compare (and go into a transcript) alike.
using IpBytes = std::array<uint8_t, 16>;
// False for anything but AF_INET and AF_INET6.
bool ip_bytes_of(const sockaddr* sa, socklen_t len, IpBytes* out);
// "10.0.0.2" or "fd00::1".
std::string ip_bytes_text(const IpBytes& ip);

}  // namespace rdmagw
