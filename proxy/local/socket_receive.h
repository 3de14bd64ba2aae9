// SPDX-License-Identifier: Apache-2.0
#pragma once
// A receive from an application socket that holds no buffer while it waits
// (docs/architecture.md, "Memory per connection"): with the worker's
// provided buffer ring the kernel picks a buffer when bytes arrive; without
// one (before 5.19), or when the ring ran dry, the receive is a poll, and
// the bytes are read into a pool buffer once the socket is readable. Either
// way the bytes land at kBufferHeadroom in a slab buffer, so that a frame
// header fits in front of them. Used by streams and passthrough pipes; at
// most one receive per object is in flight.
#include <cstdint>

#include "proxy/local/stream_host.h"

namespace rdmagw::local {

class SocketReceive {
 public:
  // Posts a receive of up to `len` bytes (at most the host's payload size)
  // from `fd`; `op` completes it, and its handler calls finish().
  void post(StreamHost& host, IoOp* op, int fd, uint32_t len);
  uint32_t length() const { return len_; }

  // In the completion: the receive's result (bytes, 0 at EOF, -errno) and,
  // in *buffer, the pool buffer the bytes are in (null if none; the caller
  // owns it and returns it to the pool). `read` false (the owner is ending):
  // a poll is not followed by a read. Results the caller acts on:
  //   -ENOBUFS  the ring ran dry: post() again (it waits for readiness)
  //   -ENOMEM   the pool is empty: no buffer for the bytes
  //   -EAGAIN   nothing to read after all: post() again
  int finish(StreamHost& host, int fd, int res, uint32_t flags, bool read, uint8_t** buffer);

 private:
  uint32_t len_ = 0;
  bool by_poll_ = false;   // the posted receive is a poll
  bool ring_dry_ = false;  // the last one found no provided buffer
  bool drained_ = false;   // the last one took less than it asked for: the socket was empty after it
};

}  // namespace rdmagw::local
