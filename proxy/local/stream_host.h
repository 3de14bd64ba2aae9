#pragma once
// What every local stream of a worker shares: its loop, its buffers, limits
// and counters. One per worker; never shared across threads.
#include <cstdint>

#include "common/buffer_pool.h"
#include "proxy/runtime/event_loop.h"

namespace rdmagw::local {

struct StreamHost {
  EventLoop& loop;
  BufferPool& pool;
  uint32_t payload_size;        // bytes read from a socket per DATA frame
  uint32_t connect_timeout_ms;  // for connections to targets
  uint64_t live_streams = 0;    // streams not yet fully closed (drain waits for 0)
};

}  // namespace rdmagw::local
