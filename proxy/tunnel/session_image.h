// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a takeover moves from the old rdmagw process to the new one for each
// resumable session and each of its streams (docs/operations.md,
// "Takeover"): enough to carry on exactly where the old process stopped.
// The new process holds the session suspended and resumes it with the peer
// like after a transport loss: the peer resends what we had not received,
// we resend what it had not. Plain data; proxy/runtime/takeover_image.cc
// encodes it.
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "proxy/tunnel/frame.h"

namespace rdmagw::tunnel {

// A stream's tunnel half (tunnel::Stream).
struct StreamTunnelImage {
  uint32_t id = 0;
  uint64_t send_available = 0;
  uint64_t receive_size = 0;
  uint64_t receive_remaining = 0;
  uint64_t receive_pending = 0;
  bool fin_sent = false;
  bool fin_received = false;
  bool wants_credit = false;
};

// tunnel.buffer_size's default while takeover images were version 1: what
// a session of such an image announced when the config did not set it.
inline constexpr uint32_t kVersion1DefaultMaxData = 16 * 1024;

struct SessionImage {
  bool dialer = true;
  std::string peer_label;  // the configured peer a dialed session belongs to
  std::string peer_node;
  HelloPayload peer_hello;
  // What this session announced in its own HELLO; the peer holds us to it
  // for the session's life (a resume with other values is refused), so the
  // new process announces the same. 0: not in the image (version 1).
  uint32_t own_max_data = 0;
  uint32_t own_stream_window = 0;
  uint64_t own_session_window = 0;
  uint32_t own_capabilities = 0;  // version 4 on (before: none that matter after the handshake)
  SessionToken token;
  uint64_t received = 0;
  uint64_t ack_sent = 0;
  uint64_t peer_acked = 0;
  uint64_t frames_base = 0;     // absolute offset of frames[0]
  std::vector<uint8_t> frames;  // kept and unsent session frames, in order
  uint32_t next_local_id = 0;
  uint32_t highest_remote_id = 0;
  uint64_t session_send_available = 0;
  uint64_t session_send_reserve = 0;
  uint64_t session_receive_size = 0;
  uint64_t session_receive_remaining = 0;
  uint64_t session_receive_pending = 0;
  bool goaway_sent = false;
  bool goaway_received = false;
  uint8_t transport_kind = 0;  // TransportKind it last used (logs)
  uint64_t age_ms = 0;
  uint64_t frames_in = 0, frames_out = 0, bytes_in = 0, bytes_out = 0;
  uint64_t streams_opened = 0, resumes = 0, resent_bytes = 0;
  std::vector<uint32_t> blocked;  // streams short of session credit, in order
};

// The max_data a session of `image` announced. A version-1 image does not
// say: taken as `tunnel`'s buffer_size when the file sets it (an operator
// who set it kept it), else that version's default.
inline uint32_t announced_max_data(const SessionImage& image, const TunnelConfig& tunnel) {
  if (image.own_max_data) return image.own_max_data;
  return tunnel.buffer_size_given ? tunnel.buffer_size : kVersion1DefaultMaxData;
}

}  // namespace rdmagw::tunnel
