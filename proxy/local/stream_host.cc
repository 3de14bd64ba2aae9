// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/stream_host.h"

#include <vector>

namespace rdmagw::local {

LocalConnection::LocalConnection(StreamHost& host) : IoObject(host.loop), host_(host) {
  ++host_.live;
  next_ = host_.first;
  if (next_) next_->prev_ = this;
  host_.first = this;
}

LocalConnection::~LocalConnection() {
  --host_.live;
  if (prev_)
    prev_->next_ = next_;
  else
    host_.first = next_;
  if (next_) next_->prev_ = prev_;
}

void LocalConnection::follow(ListenerTerms terms) {
  slot_ = std::move(terms.slot);
  idle_timeout_ms_ = terms.idle_timeout_ms;
}

ListenerTerms LocalConnection::take_terms() {
  ListenerTerms terms{std::move(slot_), idle_timeout_ms_};
  idle_timeout_ms_ = 0;
  return terms;
}

void LocalConnection::check_idle(std::chrono::steady_clock::time_point now) {
  if (idle_timeout_ms_ == 0 || ending()) return;
  if (!carrying()) {
    idle_since_ = {};  // the clock starts once it carries bytes
    return;
  }
  uint64_t moved = bytes_moved();
  if (moved != idle_bytes_ || idle_since_ == std::chrono::steady_clock::time_point{}) {
    idle_bytes_ = moved;
    idle_since_ = now;
    return;
  }
  if (now - idle_since_ >= std::chrono::milliseconds(idle_timeout_ms_)) end_idle();
}

void StreamHost::check_idle(std::chrono::steady_clock::time_point now) {
  // As reset_all: ending one frees nothing at once.
  for (LocalConnection* c = first; c; c = c->next_in_host()) c->check_idle(now);
}

void StreamHost::reset_all(std::string_view reason) {
  // Resetting never frees a connection at once (IoObject), so the list can
  // be walked as it is.
  for (LocalConnection* c = first; c; c = c->next_in_host())
    if (!c->ending()) c->reset_now(reason);
}

}  // namespace rdmagw::local
