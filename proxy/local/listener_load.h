// SPDX-License-Identifier: Apache-2.0
#pragma once
// What one listener's connections share across the workers
// (listeners[].max_connections, accepts_per_second): how many are open, and
// the bucket the accept rate draws from. A connection holds a ListenerSlot
// from accept to its end, however it ends, and the slot's destructor gives
// the count back. The load outlives the listening sockets (a reload that
// removes the listener leaves its connections running); any thread.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "common/token_bucket.h"

namespace rdmagw::local {

class ListenerLoad {
 public:
  // One more connection, unless `max` (0: no limit) are open already.
  bool try_open(uint32_t max) {
    uint64_t now = open_.load(std::memory_order_relaxed);
    do {
      if (max != 0 && now >= max) return false;
    } while (!open_.compare_exchange_weak(now, now + 1, std::memory_order_relaxed));
    return true;
  }
  // A connection carried on from another process (a takeover): counted, never refused.
  void adopt() { open_.fetch_add(1, std::memory_order_relaxed); }
  void closed() { open_.fetch_sub(1, std::memory_order_release); }
  uint64_t open() const { return open_.load(std::memory_order_relaxed); }
  // An accept now within `per_second` (0: no limit; a burst of as many).
  // The clock is read under the lock: workers' loop times lag by up to a
  // batch each, and a bucket fed times out of order credits the gaps again.
  bool take_accept(uint32_t per_second) {
    if (per_second == 0) return true;
    std::lock_guard<std::mutex> lock(mu_);
    if (rate_ != per_second) {  // first use, or a reload changed it
      rate_ = per_second;
      bucket_ = TokenBucket(per_second, per_second);
    }
    return bucket_.take(TokenBucket::Clock::now());
  }

 private:
  std::atomic<uint64_t> open_{0};
  std::mutex mu_;  // guards the bucket: workers accept on their own threads
  uint32_t rate_ = 0;
  TokenBucket bucket_{0, 0};
};

// One open connection's place in its listener's count.
class ListenerSlot {
 public:
  ListenerSlot() = default;
  explicit ListenerSlot(std::shared_ptr<ListenerLoad> load) : load_(std::move(load)) {}
  ListenerSlot(ListenerSlot&& other) noexcept : load_(std::move(other.load_)) {}
  ListenerSlot& operator=(ListenerSlot&& other) noexcept {
    if (this != &other) {
      release();
      load_ = std::move(other.load_);
    }
    return *this;
  }
  ListenerSlot(const ListenerSlot&) = delete;
  ListenerSlot& operator=(const ListenerSlot&) = delete;
  ~ListenerSlot() { release(); }

 private:
  void release() {
    if (load_) load_->closed();
    load_.reset();
  }
  std::shared_ptr<ListenerLoad> load_;
};

}  // namespace rdmagw::local
