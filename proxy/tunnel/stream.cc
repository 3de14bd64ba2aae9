// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/stream.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/splice_pipe.h"

namespace rdmagw::tunnel {

// Streams that have no socket to splice into (tests' fakes) take the bytes
// the ordinary way, a bounded chunk at a time.
Stream::Delivery Stream::on_peer_piped(std::span<const uint8_t> head, int pipe_fd, uint32_t piped) {
  Delivery total;
  auto take = [&](const uint8_t* data, size_t len) {
    if (!total.accepted) return;
    iovec piece{const_cast<uint8_t*>(data), len};
    Delivery d = on_peer_data(std::span<const iovec>(&piece, 1));
    total.accepted = d.accepted;
    total.delivered += d.delivered;
  };
  if (!head.empty()) take(head.data(), head.size());
  uint8_t chunk[4096];
  while (piped > 0 && total.accepted) {
    ssize_t n = ::read(pipe_fd, chunk, std::min<size_t>(piped, sizeof chunk));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      total.accepted = false;  // cannot happen: the transport put them there
      break;
    }
    take(chunk, static_cast<size_t>(n));
    piped -= static_cast<uint32_t>(n);
  }
  if (piped > 0) SplicePipe::discard(pipe_fd, piped);  // refused: the session resets the stream
  return total;
}

}  // namespace rdmagw::tunnel
