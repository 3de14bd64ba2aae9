// SPDX-License-Identifier: Apache-2.0
#pragma once
// Receive credits of one RDMA session, kept apart from the verbs so that the
// rules can be tested without a device:
// - a SEND consumes one of the peer's posted receives (a credit);
// - credits come back in the header of the peer's messages;
// - data may only use credits beyond the last kReservedCredits, which are kept
//   for header-only messages that return credits, so that two sides that both
//   ran out can always tell each other about re-posted receives;
// - a header-only update goes out once half our receives wait to be announced.
#include <cstdint>

namespace rdmagw::transport {

inline constexpr uint32_t kReservedCredits = 2;

class RdmaCredits {
 public:
  RdmaCredits() = default;
  // peer_depth: receives the peer keeps posted; own_depth: ours.
  RdmaCredits(uint32_t peer_depth, uint32_t own_depth)
      : send_(peer_depth), peer_depth_(peer_depth), own_depth_(own_depth) {}

  uint32_t available() const { return send_; }
  uint32_t pending_returns() const { return pending_returns_; }

  bool can_send_data() const { return send_ > kReservedCredits; }
  bool should_send_update() const { return pending_returns_ >= own_depth_ / 2 && send_ > 0; }

  // A message is going out: it uses a credit and carries our pending returns.
  uint32_t on_send() {
    --send_;
    uint32_t returned = pending_returns_;
    pending_returns_ = 0;
    return returned;
  }
  // A message arrived carrying `returned` credits. False if that would give
  // us more credits than the peer has receives: the peer is broken.
  bool on_receive(uint32_t returned) {
    if (static_cast<uint64_t>(send_) + returned > peer_depth_) return false;
    send_ += returned;
    return true;
  }
  // We re-posted the receive a message arrived in.
  void on_repost() { ++pending_returns_; }

 private:
  uint32_t send_ = 0;
  uint32_t pending_returns_ = 0;
  uint32_t peer_depth_ = 0;
  uint32_t own_depth_ = 0;
};

}  // namespace rdmagw::transport
