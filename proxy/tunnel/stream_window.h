// SPDX-License-Identifier: Apache-2.0
#pragma once
// Credit-based flow control, used for each stream and for the session as a
// whole (the session window is the per-session memory budget).
//
// The receiver lets the sender have `size` bytes in flight. Bytes count as
// returned only once they were written to the local socket (or dropped), so a
// window update doubles as a delivery acknowledgement. Invariant on the
// receiving side: remaining + buffered + pending_grant == size.
#include <algorithm>
#include <cstdint>

namespace rdmagw::tunnel {

// What the sending side may still send.
class SendCredit {
 public:
  explicit SendCredit(uint64_t initial = 0) : available_(initial) {}
  uint64_t available() const { return available_; }
  // Takes up to `want` bytes of credit; returns what was taken.
  uint64_t take(uint64_t want) {
    uint64_t n = std::min(want, available_);
    available_ -= n;
    return n;
  }
  // Gives back credit taken but not used (a short read).
  void refund(uint64_t n) { available_ += n; }
  // A WINDOW increment from the receiver. False if it would exceed `limit`
  // (a peer granting more than any window can hold is broken).
  bool grant(uint64_t n, uint64_t limit) {
    if (n == 0 || available_ + n > limit) return false;
    available_ += n;
    return true;
  }

 private:
  uint64_t available_;
};

// What the receiving side has promised the sender.
class ReceiveWindow {
 public:
  explicit ReceiveWindow(uint64_t size = 0) : size_(size), remaining_(size) {}
  // A window carried over by a takeover (remaining + pending <= size).
  ReceiveWindow(uint64_t size, uint64_t remaining, uint64_t pending)
      : size_(size), remaining_(remaining), pending_grant_(pending) {}
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return remaining_; }
  uint64_t pending_grant() const { return pending_grant_; }
  uint64_t buffered() const { return size_ - remaining_ - pending_grant_; }

  // Bytes arrived. False means the sender overran the window: a protocol error.
  bool on_receive(uint64_t n) {
    if (n > remaining_) return false;
    remaining_ -= n;
    return true;
  }
  // Bytes left this side (written to the socket, or dropped).
  void on_delivered(uint64_t n) { pending_grant_ += n; }

  // Returns the increment to send now, or 0 while the pending amount is still
  // small: updates go out once a quarter of the window is free, which keeps a
  // bulk sender streaming without a WINDOW frame per DATA frame.
  // Also sends one when the sender is down to its last quarter: otherwise
  // slow consumers holding most of a session window would stop every stream.
  uint64_t take_grant() {
    if (pending_grant_ == 0) return 0;
    if (pending_grant_ < size_ / 4 && remaining_ > size_ / 4) return 0;
    return take_all();
  }
  uint64_t take_all() {
    uint64_t n = pending_grant_;
    pending_grant_ = 0;
    remaining_ += n;
    return n;
  }

 private:
  uint64_t size_;
  uint64_t remaining_;
  uint64_t pending_grant_ = 0;
};

}  // namespace rdmagw::tunnel
