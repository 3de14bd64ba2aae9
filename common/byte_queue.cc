// SPDX-License-Identifier: Apache-2.0
#include "common/byte_queue.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace rdmagw {

void ByteQueue::SegmentList::pop_front() {
  if (++first_ == v_.size()) {
    clear();
  } else if (first_ >= 16 && first_ * 2 >= v_.size()) {
    v_.erase(v_.begin(), v_.begin() + static_cast<std::ptrdiff_t>(first_));
    first_ = 0;
  }
}

void ByteQueue::SegmentList::clear() {
  // A queue that once held a long run of segments gives that memory back.
  if (v_.capacity() > 16)
    std::vector<Segment>().swap(v_);
  else
    v_.clear();
  first_ = 0;
}

ByteQueue::Segment& ByteQueue::open_tail() {
  Segment& tail = segments_.back();
  if (head_ == segments_.size()) {
    // Every byte so far was sent: the next ones start in this tail.
    head_ = segments_.size() - 1;
    head_skip_ = tail.end - tail.begin;
  }
  return tail;
}

void ByteQueue::adopt(uint8_t* buffer, uint32_t begin, uint32_t end) {
  segments_.push_back({buffer, begin, end});
  bytes_ += end - begin;
}

uint8_t* ByteQueue::append_contiguous(size_t len) {
  size_t cap = pool_->buffer_size();
  if (len > cap) return nullptr;
  if (segments_.empty() || cap - segments_.back().end < len) {
    uint8_t* b = pool_->acquire();
    if (!b) return nullptr;
    segments_.push_back({b, 0, 0});
  }
  Segment& tail = open_tail();
  uint8_t* out = tail.buffer + tail.end;
  tail.end += static_cast<uint32_t>(len);
  bytes_ += len;
  return out;
}

bool ByteQueue::append(const void* data, size_t len) {
  const uint8_t* src = static_cast<const uint8_t*>(data);
  size_t cap = pool_->buffer_size();
  // Check capacity first so that a failed append leaves the queue unchanged.
  size_t tail_room = segments_.empty() ? 0 : cap - segments_.back().end;
  if (len > tail_room) {
    size_t needed = (len - tail_room + cap - 1) / cap;
    if (pool_->capacity() - pool_->in_use() < needed) return false;
  }
  while (len > 0) {
    if (segments_.empty() || segments_.back().end == cap) {
      segments_.push_back({pool_->acquire(), 0, 0});
    }
    Segment& tail = open_tail();
    size_t n = std::min(len, cap - tail.end);
    std::memcpy(tail.buffer + tail.end, src, n);
    tail.end += static_cast<uint32_t>(n);
    bytes_ += n;
    src += n;
    len -= n;
  }
  return true;
}

int ByteQueue::iovecs_at(size_t offset, iovec* iov, int max) const {
  int n = 0;
  offset += head_skip_;
  for (size_t i = head_; i < segments_.size() && n < max; ++i) {
    const Segment& s = segments_[i];
    size_t len = s.end - s.begin;
    if (offset >= len) {
      offset -= len;
      continue;
    }
    iov[n].iov_base = s.buffer + s.begin + offset;
    iov[n].iov_len = len - offset;
    offset = 0;
    ++n;
  }
  return n;
}

void ByteQueue::consume(size_t n) {
  assert(n <= bytes_);
  bytes_ -= n;
  retained_ += n;
  while (n > 0) {
    const Segment& s = segments_[head_];
    size_t left = s.end - s.begin - head_skip_;
    if (n < left) {
      head_skip_ += static_cast<uint32_t>(n);
      break;
    }
    n -= left;
    ++head_;
    head_skip_ = 0;
  }
  if (!retain_) release_to(sent_offset());
}

void ByteQueue::release_to(uint64_t offset) {
  assert(offset >= base_ && offset <= sent_offset());
  size_t n = static_cast<size_t>(offset - base_);
  retained_ -= n;
  base_ = offset;
  while (n > 0) {
    Segment& s = segments_.front();
    size_t len = s.end - s.begin;
    if (n < len) {
      s.begin += static_cast<uint32_t>(n);
      if (head_ == 0) head_skip_ -= static_cast<uint32_t>(n);
      return;
    }
    n -= len;
    // Keep the last buffer once everything in it went: later appends can
    // still use its free room.
    if (keep_last_ && segments_.size() == 1 && s.end < pool_->buffer_size() && n == 0) {
      s.begin = s.end = 0;
      head_ = 0;
      head_skip_ = 0;
      return;
    }
    pool_->release(s.buffer);
    segments_.pop_front();
    if (head_ > 0)
      --head_;
    else
      head_skip_ = 0;
  }
}

void ByteQueue::rewind_to(uint64_t offset) {
  assert(offset >= base_ && offset <= end_offset());
  bytes_ += retained_;
  retained_ = 0;
  head_ = 0;
  head_skip_ = 0;
  consume(static_cast<size_t>(offset - base_));
}

void ByteQueue::copy_out(std::vector<uint8_t>* out) const {
  for (const Segment& s : segments_) out->insert(out->end(), s.buffer + s.begin, s.buffer + s.end);
}

void ByteQueue::clear() {
  for (const Segment& s : segments_) pool_->release(s.buffer);
  segments_.clear();
  base_ += retained_ + bytes_;
  bytes_ = retained_ = 0;
  head_ = 0;
  head_skip_ = 0;
}

}  // namespace rdmagw
