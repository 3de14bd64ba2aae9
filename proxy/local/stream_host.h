#pragma once
// What every local stream of a worker shares: its loop, its buffers, limits,
// counters and the list of live streams (for the admin endpoint). One per
// worker; never shared across threads.
#include <cstdint>

#include "common/buffer_pool.h"
#include "common/metrics.h"
#include "proxy/runtime/event_loop.h"

namespace rdmagw::local {

class LocalStream;

struct StreamHost {
  EventLoop& loop;
  BufferPool& pool;
  metrics::WorkerMetrics& metrics;
  unsigned worker;              // index, for the admin endpoint
  uint32_t payload_size;        // bytes read from a socket per DATA frame
  uint32_t connect_timeout_ms;  // for connections to targets
  uint64_t live_streams = 0;    // streams not yet fully closed (drain waits for 0)
  LocalStream* first_stream = nullptr;  // intrusive list of live LocalStreams
};

}  // namespace rdmagw::local
