// SPDX-License-Identifier: Apache-2.0
#include "common/buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <string>
#include <system_error>

namespace rdmagw {

namespace {
size_t page_size() {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<size_t>(p) : 4096;
}
}  // namespace

BufferPool::BufferPool(size_t buffer_size, size_t buffer_count, bool trimmable)
    : buffer_size_(trimmable ? (buffer_size + page_size() - 1) / page_size() * page_size()
                             : (buffer_size + 63) & ~size_t{63}),
      buffer_count_(buffer_count),
      trimmable_(trimmable) {
  void* p = mmap(nullptr, slab_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw std::system_error(errno, std::generic_category(),
                            "cannot reserve " + std::to_string(slab_bytes() >> 20) + " MiB for the buffer slab (mmap)");
  base_ = static_cast<uint8_t*>(p);
  // Trimming gives pages back a buffer at a time; a transparent huge page
  // would be split by the first trim, and would make an idle buffer's
  // neighbours resident with it. (Advice only: nothing to do if refused.)
  if (trimmable_) madvise(base_, slab_bytes(), MADV_NOHUGEPAGE);
  free_.reserve(buffer_count_);
}

BufferPool::~BufferPool() {
  if (base_) munmap(base_, slab_bytes());
}

uint8_t* BufferPool::acquire() {
  if (!free_.empty()) {
    uint8_t* b = free_.back();
    free_.pop_back();
    low_water_ = std::min(low_water_, free_.size());
    trimmed_ = std::min(trimmed_, free_.size());
    return b;
  }
  if (next_fresh_ < buffer_count_) return base_ + buffer_size_ * next_fresh_++;
  return nullptr;
}

void BufferPool::release(uint8_t* buffer) {
  assert(buffer >= base_ && buffer < base_ + slab_bytes());
  assert((buffer - base_) % buffer_size_ == 0);
  free_.push_back(buffer);
}

size_t BufferPool::trim(size_t keep) {
  size_t given = 0;
  if (trimmable_) {
    size_t end = low_water_ > keep ? low_water_ - keep : 0;
    for (size_t i = trimmed_; i < end; ++i, ++given) madvise(free_[i], buffer_size_, MADV_DONTNEED);
    trimmed_ = std::max(trimmed_, end);
  }
  low_water_ = free_.size();
  return given;
}

size_t BufferPool::resident_bytes(const uint8_t* base, size_t bytes) {
  if (!base || bytes == 0) return 0;
  const size_t page = page_size();
  // In pieces, so the vector stays small whatever the slab's size.
  constexpr size_t kPagesPerCall = 4096;
  unsigned char vec[kPagesPerCall];
  size_t pages = (bytes + page - 1) / page, resident = 0;
  for (size_t done = 0; done < pages;) {
    size_t n = std::min(kPagesPerCall, pages - done);
    // Fails (ENOMEM) only if the slab is unmapped meanwhile (its worker is
    // stopping): then none of it is resident any more.
    if (mincore(const_cast<uint8_t*>(base) + done * page, n * page, vec) != 0) return 0;
    for (size_t i = 0; i < n; ++i) resident += vec[i] & 1;
    done += n;
  }
  return resident * page;
}

}  // namespace rdmagw
