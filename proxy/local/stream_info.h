// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the local layer tells about a stream, as a plain struct (GET
// /streams). The admin endpoint renders it. Schema: docs/admin.md.
#include <cstdint>
#include <string>

namespace rdmagw::local {

// One active stream.
struct StreamInfo {
  unsigned worker = 0;
  std::string side;      // "client" (an application connected to a listener) | "target" (the peer opened it)
  std::string listener;  // client side: listener name; target side: ""
  std::string peer;      // peer name (client side) or peer node (target side)
  std::string target;
  uint32_t stream_id = 0;  // 0 while waiting for a session
  // The connection's id, the same on both sidecars ("" if the peer did
  // not say), and the application's address (the target side: the far
  // side's client, as the peer said; "" if unknown).
  std::string connection;
  std::string client;
  uint64_t age_ms = 0;
  uint64_t bytes_from_app = 0;  // read from the local socket, sent into the tunnel
  uint64_t bytes_to_app = 0;    // received from the tunnel, written to the local socket
  std::string state;            // "waiting" | "connecting" | "open" | "half-closed"
  uint64_t queued_to_app = 0;   // received from the tunnel, not yet written to the socket
  uint64_t send_credit = 0;     // bytes it may still send before the peer's next WINDOW
  // What it waits for now: "session" | "target-connect" | "session-credit" |
  // "peer-window" | "app-read" (the socket takes no more) | "app-data" | "".
  std::string waiting_for;
  // Its socket with the local legs redirected (local_legs.redirect):
  // "redirected", "redirected-sending-by-tcp" (the application is behind),
  // else "tcp".
  std::string local_leg = "tcp";
};

// What the local legs' programs counted (local_redirect.h), summed over CPUs.
struct LocalRedirectStats {
  uint64_t sockets_added = 0;
  uint64_t sockets_refused = 0;
  uint64_t messages_redirected = 0;
  uint64_t bytes_redirected = 0;
  uint64_t messages_tcp = 0;
  uint64_t bytes_tcp = 0;
  uint64_t flows_to_tcp = 0;
};

}  // namespace rdmagw::local
