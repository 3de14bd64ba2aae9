// SPDX-License-Identifier: Apache-2.0
#pragma once
// A stream's origin (tunnel::StreamOrigin, carried in its OPEN) from and to
// what the local layer has: socket addresses, and text for logs and
// GET /streams.
#include <sys/socket.h>

#include <string>

#include "common/connection_id.h"
#include "proxy/tunnel/frame.h"

namespace rdmagw::local {

// An IPv4 or IPv6 socket address (an IPv4-mapped IPv6 one as IPv4); family
// 0 for anything else (a Unix socket's client).
tunnel::OriginAddress origin_address(const sockaddr* address, socklen_t length);
// "10.0.0.5:40512", "[fd00::5]:40512"; "" for family 0.
std::string origin_address_text(const tunnel::OriginAddress& address);
inline ConnectionId connection_of(const tunnel::StreamOrigin& origin) { return ConnectionId{origin.connection}; }

}  // namespace rdmagw::local
