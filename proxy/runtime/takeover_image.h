// SPDX-License-Identifier: Apache-2.0
#pragma once
// Everything a takeover moves from the old rdmagw process to the new one
// (docs/operations.md, "Takeover"), and its byte encoding on the takeover
// channel. Sockets travel beside it (SCM_RIGHTS, in order); the image names
// them by their index in that sequence. decode() checks every length and
// every index: what it accepts, the new process can rebuild.
#include <cstdint>
#include <string>
#include <vector>

#include "proxy/local/connection_image.h"
#include "proxy/tunnel/session_image.h"

namespace rdmagw {

struct WorkerImage {
  std::vector<tunnel::SessionImage> sessions;
  local::HandoverImages connections;  // fds: indexes into ProcessImage's sequence once encoded
};

struct ListenerImage {
  std::string endpoint;  // as configured (Endpoint::to_string)
  bool transparent = false;
  std::vector<uint32_t> fds;  // one per worker (TCP) or one shared (unix)
};

// The format this rdmagw writes; it reads this one and the older ones.
// 2: sessions carry the values of their own HELLO.
// 3: streams carry their redirected leg (local_legs.redirect).
// 4: sessions carry their own HELLO's capabilities; streams their origin
//    (connection id, client, destination) and the access log's texts.
inline constexpr uint32_t kTakeoverImageVersion = 4;
inline constexpr uint32_t kOldestTakeoverImageVersion = 1;

struct ProcessImage {
  uint32_t version = kTakeoverImageVersion;  // the format it was read in (decode_process_image)
  uint64_t instance = 0;                     // the old process's instance: tokens stay valid
  std::vector<ListenerImage> listeners;
  std::vector<uint32_t> tunnel_fds;  // the tunnel's listening sockets, by worker
  std::vector<WorkerImage> workers;
  uint32_t fd_count = 0;  // sockets that travel with it
};

// `version`: what an older rdmagw would have written (tests).
std::vector<uint8_t> encode_process_image(const ProcessImage& image, uint32_t version = kTakeoverImageVersion);
// False with *error on anything malformed or out of range.
bool decode_process_image(const uint8_t* data, size_t size, ProcessImage* out, std::string* error);

}  // namespace rdmagw
