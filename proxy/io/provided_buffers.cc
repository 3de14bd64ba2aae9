// SPDX-License-Identifier: Apache-2.0
#include "proxy/io/provided_buffers.h"

#include <sys/mman.h>

#include <cassert>
#include <cstring>

namespace rdmagw {

bool ProvidedBuffers::init(EventLoop& loop, BufferPool& pool, unsigned entries, uint32_t offset, uint32_t length,
                           std::string* why) {
  if (baseline_io_uring_forced()) {
    *why = "RDMAGW_IO_URING=baseline";
    return false;
  }
  // A power of two, and never more than an eighth of the pool: the rest
  // stays for the tunnel's own receives and for streams' queued bytes.
  unsigned n = 1;
  while (n * 2 <= entries && n * 2 <= pool.capacity() / 8 && n * 2 <= 32768) n *= 2;
  if (n < 8) {
    *why = "the buffer pool is too small to lend buffers to the kernel";
    return false;
  }
  size_t bytes = n * sizeof(io_uring_buf);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    *why = std::string("mmap: ") + strerror(errno);
    return false;
  }
  auto* ring = static_cast<io_uring_buf_ring*>(mem);
  io_uring_buf_ring_init(ring);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uintptr_t>(mem);
  reg.ring_entries = n;
  reg.bgid = kGroup;
  int rc = loop.register_buffer_ring(&reg);
  if (rc != 0) {
    munmap(mem, bytes);
    *why = std::string("io_uring_register_buf_ring: ") + strerror(-rc) + " (kernel older than 5.19?)";
    return false;
  }
  loop_ = &loop;
  pool_ = &pool;
  ring_ = ring;
  ring_bytes_ = bytes;
  offset_ = offset;
  length_ = length;
  by_id_.assign(n, nullptr);
  empty_.reserve(n);
  for (unsigned id = n; id-- > 0;) empty_.push_back(static_cast<uint16_t>(id));
  refill();
  return true;
}

ProvidedBuffers::~ProvidedBuffers() {
  if (!ring_) return;
  // Unregistered first, so the kernel picks none of these buffers again
  // (a no-op once the loop has ended its ring).
  loop_->unregister_buffer_ring(kGroup);
  for (uint8_t* buffer : by_id_)
    if (buffer) pool_->release(buffer);
  munmap(ring_, ring_bytes_);
}

void ProvidedBuffers::select_for(io_uring_sqe* sqe) const {
  assert(ring_);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = kGroup;
}

void ProvidedBuffers::provide(uint16_t id, uint8_t* buffer) {
  by_id_[id] = buffer;
  io_uring_buf_ring_add(ring_, buffer + offset_, length_, id, io_uring_buf_ring_mask(entries()), 0);
  io_uring_buf_ring_advance(ring_, 1);
}

uint8_t* ProvidedBuffers::take(uint32_t cqe_flags) {
  if (!ring_ || !(cqe_flags & IORING_CQE_F_BUFFER)) return nullptr;
  auto id = static_cast<uint16_t>(cqe_flags >> IORING_CQE_BUFFER_SHIFT);
  assert(id < by_id_.size() && by_id_[id]);
  uint8_t* buffer = by_id_[id];
  by_id_[id] = nullptr;
  if (uint8_t* fresh = pool_->acquire())
    provide(id, fresh);
  else
    empty_.push_back(id);
  return buffer;
}

void ProvidedBuffers::refill() {
  while (!empty_.empty()) {
    uint8_t* fresh = pool_->acquire();
    if (!fresh) return;
    provide(empty_.back(), fresh);
    empty_.pop_back();
  }
}

}  // namespace rdmagw
