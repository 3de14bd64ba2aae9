// SPDX-License-Identifier: Apache-2.0
#pragma once
// A connect request taken off the RDMA listener. Its cm_id is moved at once
// onto an event channel of its own: an id left on the listener's channel
// would go with that channel (the kernel destroys every id on a channel when
// it closes, which a device removal makes the listener do) while the request
// still waits for the worker that accepts it, and librdmacm would then act on
// a freed channel. Owned until a transport adopts it; rejected otherwise.
#include <rdma/rdma_cma.h>

#include <optional>
#include <string>
#include <utility>

#include "proxy/tunnel/handshake_budget.h"

namespace rdmagw::transport {

class IncomingConnect {
 public:
  // Moves `id` (fresh off the listener's channel) to a channel of its own.
  // On failure the request is rejected and `id` destroyed.
  static std::optional<IncomingConnect> take(rdma_cm_id* id, std::string* error);

  IncomingConnect(IncomingConnect&& other) noexcept
      : id_(std::exchange(other.id_, nullptr)),
        channel_(std::exchange(other.channel_, nullptr)),
        slot_(std::move(other.slot_)) {}
  IncomingConnect& operator=(IncomingConnect&& other) noexcept {
    if (this != &other) {
      IncomingConnect old(std::move(*this));  // rejects what this held
      id_ = std::exchange(other.id_, nullptr);
      channel_ = std::exchange(other.channel_, nullptr);
      slot_ = std::move(other.slot_);
    }
    return *this;
  }
  IncomingConnect(const IncomingConnect&) = delete;
  ~IncomingConnect();

  rdma_cm_id* id() const { return id_; }
  // For the transport that adopts both (it destroys the id, then the channel).
  rdma_cm_id* release_id() { return std::exchange(id_, nullptr); }
  rdma_event_channel* release_channel() { return std::exchange(channel_, nullptr); }
  // The request's handshake slot travels with it to the worker that accepts
  // it, and on to the transport.
  void hold(tunnel::HandshakeSlot slot) { slot_ = std::move(slot); }
  tunnel::HandshakeSlot release_slot() { return std::move(slot_); }

 private:
  IncomingConnect(rdma_cm_id* id, rdma_event_channel* channel) : id_(id), channel_(channel) {}
  rdma_cm_id* id_;
  rdma_event_channel* channel_;
  tunnel::HandshakeSlot slot_;
};

}  // namespace rdmagw::transport
