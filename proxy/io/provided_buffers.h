// SPDX-License-Identifier: Apache-2.0
#pragma once
// Receive buffers handed to the kernel ahead of time (an io_uring provided
// buffer ring, kernel 5.19+), so that a socket receive waiting for data holds
// no buffer: the kernel picks one from the ring only when bytes arrive. An
// idle connection then costs no buffer memory, whatever the buffer size, and
// never pins a registered (RDMA) buffer.
//
// The ring holds a fixed number of buffers taken from the worker's pool. A
// completion that used one (IORING_CQE_F_BUFFER) hands it to the caller, and
// its slot is refilled from the pool at once. When the pool is dry the slot
// stays empty until refill() finds buffers again; a receive issued while
// every slot is empty completes with -ENOBUFS, and the caller falls back to
// waiting for readiness and reading into a pool buffer itself (the path every
// receive takes on kernels without buffer rings).
#include <liburing.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/buffer_pool.h"
#include "proxy/io/event_loop.h"

namespace rdmagw {

class ProvidedBuffers {
 public:
  // Kernel buffer ring group id used for socket receives.
  static constexpr uint16_t kGroup = 1;

  // Registers a ring of up to `entries` buffers of `pool` (rounded down to a
  // power of two). The kernel writes at `offset` into each buffer, at most
  // `length` bytes. Returns false, with *why set, when the kernel has no
  // buffer rings (before 5.19, or RDMAGW_IO_URING=baseline) or the pool is
  // too small to spare them; the object then stays inactive.
  bool init(EventLoop& loop, BufferPool& pool, unsigned entries, uint32_t offset, uint32_t length, std::string* why);
  ProvidedBuffers() = default;
  ~ProvidedBuffers();
  ProvidedBuffers(const ProvidedBuffers&) = delete;
  ProvidedBuffers& operator=(const ProvidedBuffers&) = delete;

  bool active() const { return ring_ != nullptr; }
  // Buffers lent to the kernel now (slots holding one).
  size_t posted() const { return active() ? by_id_.size() - empty_.size() : 0; }
  // Marks `sqe` (a recv) to take its buffer from the ring.
  void select_for(io_uring_sqe* sqe) const;
  // The buffer a completion used, now the caller's (return it to the pool);
  // nullptr when the completion carried none. Refills the slot.
  uint8_t* take(uint32_t cqe_flags);
  // Tops up slots left empty while the pool was dry.
  void refill();
  unsigned entries() const { return static_cast<unsigned>(by_id_.size()); }
  unsigned empty_slots() const { return static_cast<unsigned>(empty_.size()); }

 private:
  void provide(uint16_t id, uint8_t* buffer);

  EventLoop* loop_ = nullptr;
  BufferPool* pool_ = nullptr;
  io_uring_buf_ring* ring_ = nullptr;
  size_t ring_bytes_ = 0;
  uint32_t offset_ = 0;
  uint32_t length_ = 0;
  std::vector<uint8_t*> by_id_;  // buffer id -> buffer (nullptr: slot empty)
  std::vector<uint16_t> empty_;  // ids whose slot waits for a buffer
};

}  // namespace rdmagw
