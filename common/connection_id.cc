// SPDX-License-Identifier: Apache-2.0
#include "common/connection_id.h"

#include <sys/random.h>

#include <atomic>
#include <chrono>
#include <cstring>

namespace rdmagw {

namespace {

uint64_t draw_process_prefix() {
  uint64_t prefix = 0;
  if (::getrandom(&prefix, sizeof(prefix), 0) != static_cast<ssize_t>(sizeof(prefix))) {
    // No entropy to be had (it does not fail on a running Linux): the clock
    // still tells two processes apart but for a start in the same tick.
    prefix = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  }
  return prefix;
}

void put_u64(uint8_t* out, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<uint8_t>(v);
}

}  // namespace

bool ConnectionId::empty() const {
  for (uint8_t b : bytes)
    if (b) return false;
  return true;
}

std::string ConnectionId::text() const {
  if (empty()) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

ConnectionId next_connection_id() {
  static const uint64_t prefix = draw_process_prefix();
  static std::atomic<uint64_t> counter{0};
  ConnectionId id;
  put_u64(id.bytes.data(), prefix);
  put_u64(id.bytes.data() + 8, counter.fetch_add(1, std::memory_order_relaxed) + 1);
  return id;
}

}  // namespace rdmagw
