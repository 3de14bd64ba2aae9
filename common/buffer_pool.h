// SPDX-License-Identifier: Apache-2.0
#pragma once
// A per-worker slab of fixed-size buffers. The slab is one anonymous mapping
// reserved up front (so the RDMA transport can register it once as a single
// memory region); pages become resident only when a buffer is first used, so
// RSS follows the peak number of buffers in use, not the slab size.
// A pool that is not registered for RDMA can also give the pages of buffers
// that stayed unused back to the kernel (trim()), so that RSS comes down
// after a burst; its buffers then start on page boundaries, so that each
// buffer's pages are its own. A registered slab never does: the device
// holds its pages.
// Single-threaded: each worker owns its pool.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdmagw {

class BufferPool {
 public:
  // buffer_size is rounded up to 64 bytes so buffers start on cache lines,
  // or to the page size if `trimmable`.
  BufferPool(size_t buffer_size, size_t buffer_count, bool trimmable = false);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // Returns nullptr when every buffer is in use: callers treat that as
  // backpressure (stop reading), never as a reason to allocate.
  uint8_t* acquire();
  void release(uint8_t* buffer);

  size_t buffer_size() const { return buffer_size_; }
  size_t in_use() const { return next_fresh_ - free_.size(); }
  size_t capacity() const { return buffer_count_; }
  uint8_t* base() const { return base_; }
  size_t slab_bytes() const { return buffer_size_ * buffer_count_; }
  // The prefix of the slab whose pages can be resident: the buffers handed
  // out at least once (they are handed out in address order), or the whole
  // slab if the pool is not trimmable (RDMA registers it, which pins every
  // page). What resident_bytes() needs to look at: not gigabytes of slab
  // that were never touched.
  size_t residency_extent() const { return trimmable_ ? buffer_size_ * next_fresh_ : slab_bytes(); }

  // Gives back (MADV_DONTNEED) the pages of free buffers that stayed free
  // since the previous call, but for the `keep` used most recently. Called
  // now and then (a worker: every second); a no-op unless trimmable. Returns
  // how many buffers it gave back.
  size_t trim(size_t keep);

  // Bytes of the slab at [base, base + bytes) resident in memory now
  // (mincore): buffers written since they were last given back, or a whole
  // registered slab (registration pins it). Only reads the page tables, so
  // any thread may ask while the owner works; 0 if the range is not mapped.
  static size_t resident_bytes(const uint8_t* base, size_t bytes);

 private:
  size_t buffer_size_;
  size_t buffer_count_;
  uint8_t* base_ = nullptr;
  size_t next_fresh_ = 0;       // buffers below this index have been handed out at least once
  std::vector<uint8_t*> free_;  // LIFO: a recently used buffer is likely still in cache
  bool trimmable_;
  size_t low_water_ = 0;  // fewest free buffers since the last trim(): free_[0, low_water_) stayed free
  size_t trimmed_ = 0;    // free_[0, trimmed_) were given back already
};

}  // namespace rdmagw
