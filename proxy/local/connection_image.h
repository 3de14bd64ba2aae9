// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a takeover moves to the new process for each application connection
// (docs/operations.md, "Takeover"): its sockets (passed with SCM_RIGHTS;
// here, indexes into HandoverImages::fds) and every byte it held, so that
// the new process carries on where the old one stopped. Plain data;
// proxy/runtime/takeover_image.cc encodes it.
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "proxy/tunnel/session_image.h"

namespace rdmagw::tunnel {
class Session;
}

namespace rdmagw::local {

// A stream's loopback leg past TCP (RedirectedLeg); its flows' state lives
// in the maps, which a takeover hands over beside the image.
inline constexpr size_t kRedirectedLegKeySize = 2 * sizeof(sockaddr_storage);
struct RedirectedLegImage {
  bool present = false;
  std::vector<uint8_t> key;  // the connection's two addresses as admitted (RedirectKey's bytes: kRedirectedLegKeySize)
  int32_t slot = -1;         // the read flow's counter; -1: that flow stays on TCP
  bool sender = false;       // the send flow was admitted
  bool by_tcp = false;       // ... and goes by TCP until the application has read what it holds
};

// A tunnel stream (LocalStream).
struct LocalStreamImage {
  uint32_t fd = 0;
  int32_t session = -1;  // index of its session in the worker's image; -1: none (waiting, or done with the tunnel)
  bool target_side = false;
  bool opened = false;
  bool connecting = false;
  bool read_closed = false;
  bool remote_fin = false;
  bool write_shut = false;
  std::string listener, peer, target;
  uint64_t bytes_up = 0, bytes_down = 0, age_ms = 0;
  std::vector<uint8_t> to_socket;  // from the peer, not yet written to the socket
  std::vector<uint8_t> parked;     // read from the socket, not yet sent (no session credit)
  tunnel::StreamTunnelImage tunnel;
  RedirectedLegImage leg;  // image version 3 on
  // Image version 4 on: where it comes from (tunnel::encode_origin's bytes;
  // empty: unknown), and the access log's texts of it.
  std::vector<uint8_t> origin;
  std::string client, destination, remote;
  std::vector<uint8_t> proxy_header;  // still connecting: the PROXY header it sends first (empty: none)
  // Its phases for the access line, in microseconds plus one (0: not reached).
  uint64_t session_wait_us = 0, connect_us = 0, first_byte_us = 0;
};

// A passthrough connection (DirectPipe).
struct PipeImage {
  uint32_t client_fd = 0;
  uint32_t server_fd = 0;
  bool connecting = false;
  std::string listener, destination;
  std::vector<uint8_t> up, down;  // received, not yet passed on
  bool up_ended = false, down_ended = false;
  // Image version 4 on: its age, and its phases in microseconds plus one
  // (0: not reached), for its access line.
  uint64_t age_ms = 0, connect_us = 0, first_byte_us = 0;
};

struct HandoverImages {
  std::vector<LocalStreamImage> streams;
  std::vector<PipeImage> pipes;
  std::vector<int> fds;  // borrowed from the connections, which keep them open
};

// Where each session of the worker is in its image.
using SessionIndex = std::unordered_map<const tunnel::Session*, int32_t>;

}  // namespace rdmagw::local
