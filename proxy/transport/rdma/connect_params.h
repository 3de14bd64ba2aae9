// SPDX-License-Identifier: Apache-2.0
#pragma once
// What two rdmagw processes tell each other in RDMA CM private data when
// they connect (little-endian):
//
//   magic "RGW1" u32 | recv_depth u32 | buffer_size u32          12 bytes, both ways
//   flags u32 | token.instance u64 | token.nonce u64             a dialer that names a session
//
// flags bit 0: a session token follows; the listener hands the connection to
// the worker holding that session (docs/protocol.md, "Transports"). 32 bytes
// fit the 56 that RDMA CM leaves over IB and RoCE; iWARP allows more. A
// listener that knows nothing of the extension ignores the extra bytes.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "proxy/tunnel/frame.h"

namespace rdmagw::transport {

inline constexpr size_t kConnectParamsSize = 12;
inline constexpr size_t kConnectParamsMaxSize = 32;

struct ConnectParams {
  uint32_t recv_depth = 0;   // receives the sender keeps posted: the other side's credits
  uint32_t buffer_size = 0;  // the size of each of them
  std::optional<tunnel::SessionToken> session;
};

// Writes `params` to `out` (kConnectParamsMaxSize bytes of room); returns the length.
size_t encode_connect_params(uint8_t* out, const ConnectParams& params);
// False, with *reason, for anything that is not an rdmagw peer's parameters
// within the transport's limits.
bool decode_connect_params(const void* data, size_t len, ConnectParams* out, const char** reason);

}  // namespace rdmagw::transport
