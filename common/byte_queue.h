// SPDX-License-Identifier: Apache-2.0
#pragma once
// A FIFO of bytes held in BufferPool buffers, for one direction of one
// connection. Bytes enter either by adopting a filled buffer (zero copy: a
// socket recv landed there) or by copying small pieces into the tail buffer.
// The front can be exposed as iovecs for a gathered send; consume() marks
// bytes sent. Appending never touches bytes already exposed, so a send can
// be in flight while more is queued.
//
// A retaining queue (set_retain) keeps sent bytes until release_to() says
// the receiver has them, and rewind_to() makes sent bytes unsent again: the
// send log of a resumable session (docs/protocol.md, "Resumption"). Offsets
// there are absolute: the count of bytes ever queued before a given byte.
// Without retention, consume() releases at once.
//
// An empty queue holds nothing: no heap (a std::deque would allocate about
// 600 bytes even empty, per idle stream) and, unless it keeps its last
// buffer for later small appends (keep_last_buffer, for a session's frame
// queue), no pool buffer.
#include <sys/uio.h>

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/buffer_pool.h"

namespace rdmagw {

class ByteQueue {
 public:
  explicit ByteQueue(BufferPool* pool, bool keep_last_buffer = true) : pool_(pool), keep_last_(keep_last_buffer) {}
  ~ByteQueue() { clear(); }
  ByteQueue(const ByteQueue&) = delete;
  ByteQueue& operator=(const ByteQueue&) = delete;

  // Bytes not sent yet.
  size_t size() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }

  // Takes ownership of `buffer`, whose bytes [begin, end) are queued.
  void adopt(uint8_t* buffer, uint32_t begin, uint32_t end);
  // Copies `len` bytes in; false (and nothing queued) if the pool ran dry.
  bool append(const void* data, size_t len);
  // Reserves `len` contiguous bytes at the tail (len <= buffer size) and
  // returns where to write them; nullptr if the pool ran dry.
  uint8_t* append_contiguous(size_t len);

  // Fills up to `max` iovecs from the first unsent byte; returns how many.
  int front_iovecs(iovec* iov, int max) const { return iovecs_at(0, iov, max); }
  // Same, starting `offset` bytes in (bytes before it are already in flight).
  int iovecs_at(size_t offset, iovec* iov, int max) const;
  // `n` bytes left (were sent): released, or kept if retaining.
  void consume(size_t n);
  void clear();

  // --- retention (the send log) -----------------------------------------------
  // Only while empty.
  void set_retain(bool retain) { retain_ = retain; }
  bool retaining() const { return retain_; }
  // Sent bytes kept for a resend.
  size_t retained() const { return retained_; }
  // Absolute offsets: of the first byte kept, of the first unsent byte, and
  // just past the last byte queued.
  uint64_t base_offset() const { return base_; }
  uint64_t sent_offset() const { return base_ + retained_; }
  uint64_t end_offset() const { return base_ + retained_ + bytes_; }
  // Releases the kept bytes before `offset` (base_offset <= offset <= sent_offset).
  void release_to(uint64_t offset);
  // Makes every byte from `offset` on unsent (again), and every byte before
  // it sent (base_offset <= offset <= end_offset): the resend starts there.
  // Kept bytes stay until release_to().
  void rewind_to(uint64_t offset);

  // --- a takeover moves the queue to another process --------------------------
  // Appends every byte held (kept, then unsent) to `out`, in order.
  void copy_out(std::vector<uint8_t>* out) const;
  // Only while empty: the absolute offset of the next byte queued.
  void set_base(uint64_t offset) {
    assert(segments_.empty() || end_offset() == base_);
    base_ = offset;
  }

 private:
  struct Segment {
    uint8_t* buffer;
    uint32_t begin;
    uint32_t end;
  };
  // Segments in order: a vector whose front is at first_, so that popping
  // the front is cheap and an empty list owns no memory worth counting.
  class SegmentList {
   public:
    bool empty() const { return first_ == v_.size(); }
    size_t size() const { return v_.size() - first_; }
    Segment& operator[](size_t i) { return v_[first_ + i]; }
    const Segment& operator[](size_t i) const { return v_[first_ + i]; }
    Segment& front() { return v_[first_]; }
    Segment& back() { return v_.back(); }
    const Segment& back() const { return v_.back(); }
    void push_back(const Segment& s) { v_.push_back(s); }
    void pop_front();
    void clear();
    auto begin() const { return v_.begin() + static_cast<std::ptrdiff_t>(first_); }
    auto end() const { return v_.end(); }

   private:
    std::vector<Segment> v_;
    size_t first_ = 0;
  };
  // The tail segment, ready to take more bytes: keeps the send cursor on
  // the first unsent byte if it pointed past the end.
  Segment& open_tail();

  BufferPool* pool_;
  SegmentList segments_;  // kept bytes, then unsent bytes
  size_t bytes_ = 0;      // unsent
  size_t retained_ = 0;   // sent, kept
  uint64_t base_ = 0;     // absolute offset of the first kept byte
  // The first unsent byte: segment index, and the bytes of that segment
  // (from its begin) already sent.
  size_t head_ = 0;
  uint32_t head_skip_ = 0;
  bool retain_ = false;
  bool keep_last_;
};

}  // namespace rdmagw
