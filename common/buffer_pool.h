#pragma once
// A per-worker slab of fixed-size buffers. The slab is one anonymous mapping
// reserved up front (so the RDMA transport can register it once as a single
// memory region); pages become resident only when a buffer is first used, so
// RSS follows the peak number of buffers in use, not the slab size.
// Single-threaded: each worker owns its pool.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdmagw {

class BufferPool {
 public:
  // buffer_size is rounded up to 64 bytes so buffers start on cache lines.
  BufferPool(size_t buffer_size, size_t buffer_count);
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

 private:
  size_t buffer_size_;
  size_t buffer_count_;
  uint8_t* base_ = nullptr;
  size_t next_fresh_ = 0;        // buffers below this index have been handed out at least once
  std::vector<uint8_t*> free_;   // LIFO: a recently used buffer is likely still in cache
};

}  // namespace rdmagw
