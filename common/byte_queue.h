#pragma once
// A FIFO of bytes held in BufferPool buffers, for one direction of one
// connection. Bytes enter either by adopting a filled buffer (zero copy: a
// socket recv landed there) or by copying small pieces into the tail buffer.
// The front can be exposed as iovecs for a gathered send; consume() releases
// buffers once sent. Appending never touches bytes already exposed, so a send
// can be in flight while more is queued.
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>

#include "common/buffer_pool.h"

namespace rdmagw {

class ByteQueue {
 public:
  explicit ByteQueue(BufferPool* pool) : pool_(pool) {}
  ~ByteQueue() { clear(); }
  ByteQueue(const ByteQueue&) = delete;
  ByteQueue& operator=(const ByteQueue&) = delete;

  size_t size() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }

  // Takes ownership of `buffer`, whose bytes [begin, end) are queued.
  void adopt(uint8_t* buffer, uint32_t begin, uint32_t end);
  // Copies `len` bytes in; false (and nothing queued) if the pool ran dry.
  bool append(const void* data, size_t len);
  // Reserves `len` contiguous bytes at the tail (len <= buffer size) and
  // returns where to write them; nullptr if the pool ran dry.
  uint8_t* append_contiguous(size_t len);

  // Fills up to `max` iovecs from the front; returns how many.
  int front_iovecs(iovec* iov, int max) const { return iovecs_at(0, iov, max); }
  // Same, starting `offset` bytes in (bytes before it are already in flight).
  int iovecs_at(size_t offset, iovec* iov, int max) const;
  void consume(size_t n);
  void clear();

 private:
  struct Segment {
    uint8_t* buffer;
    uint32_t begin;
    uint32_t end;
  };
  BufferPool* pool_;
  std::deque<Segment> segments_;
  size_t bytes_ = 0;
};

}  // namespace rdmagw
