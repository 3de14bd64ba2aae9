// SPDX-License-Identifier: Apache-2.0
#pragma once
// One application connection's id, made by the sidecar that accepted it and
// carried to the peer in the stream's OPEN (docs/protocol.md, "Origin"), so
// that both sidecars' access lines, logs and GET /streams name the
// connection alike. 16 bytes: 8 drawn at random when the process starts
// (a fleet's processes, and a process after its restart, do not share
// them), then a counter of the process's connections. Text: 32 hex digits.
#include <array>
#include <cstdint>
#include <string>

namespace rdmagw {

struct ConnectionId {
  std::array<uint8_t, 16> bytes{};
  bool empty() const;
  std::string text() const;  // "" when empty
  bool operator==(const ConnectionId&) const = default;
};

// A new id; any thread.
ConnectionId next_connection_id();

}  // namespace rdmagw
