// SPDX-License-Identifier: Apache-2.0
#pragma once
// What one transport sends: its own handshake frames (HELLO, SESSION) first,
// then the session's frames, taken from the session's queue. That queue
// belongs to the session and outlives any one transport: a resumable session
// keeps its sent frames there until the peer acknowledges them and resends
// them over the next transport (docs/protocol.md, "Resumption"). Transports
// share it (shared_ptr) so that a send still in flight on a transport that
// was closed never reads freed buffers; a closed transport no longer sends
// from it or consumes it.
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <memory>

#include "common/byte_queue.h"

namespace rdmagw::tunnel {

class Outbound {
 public:
  explicit Outbound(BufferPool* pool) : handshake_(pool) {}

  // Frames of this transport only: they are never resent on another.
  ByteQueue& handshake() { return handshake_; }
  // The session's frames, sent after the handshake's.
  void attach(std::shared_ptr<ByteQueue> frames) { frames_ = std::move(frames); }

  size_t size() const { return handshake_.size() + (frames_ ? frames_->size() : 0); }
  bool empty() const { return size() == 0; }
  // Fills up to `max` iovecs from `offset` unsent bytes in; returns how many.
  int iovecs_at(size_t offset, iovec* iov, int max) const {
    int n = 0;
    size_t first = handshake_.size();
    if (offset < first) {
      n = handshake_.iovecs_at(offset, iov, max);
      offset = 0;
    } else {
      offset -= first;
    }
    if (frames_ && n < max) n += frames_->iovecs_at(offset, iov + n, max - n);
    return n;
  }
  // `n` bytes were sent.
  void consume(size_t n) {
    size_t first = std::min(n, handshake_.size());
    if (first > 0) handshake_.consume(first);
    if (n > first) frames_->consume(n - first);
  }

 private:
  ByteQueue handshake_;
  std::shared_ptr<ByteQueue> frames_;
};

}  // namespace rdmagw::tunnel
