// SPDX-License-Identifier: Apache-2.0
#pragma once
// The PROXY protocol version 2 header a target entry with
// `proxy_protocol: v2` gets first on each connection (docs/deploy.md,
// "Client addresses"): the application's address as the stream's origin
// says it, so that a server behind rdmagw (nginx, HAProxy, Envoy, ...)
// logs and filters by the real client instead of rdmagw's loopback end.
#include <sys/socket.h>

#include <string>

#include "proxy/tunnel/frame.h"

namespace rdmagw::local {

// The header's bytes. With the client known (IPv4 or IPv6): PROXY, TCP, the
// client as source, and as destination the origin's destination (a
// transparent listener's) or else `target` (where this side connects),
// whichever has the client's family (else the unspecified address, port 0).
// Without one (an older peer, a Unix-socket client): LOCAL, no addresses,
// which tells the server to use the connection's own.
std::string proxy_v2_header(const tunnel::StreamOrigin* origin, const sockaddr* target, socklen_t target_length);

}  // namespace rdmagw::local
