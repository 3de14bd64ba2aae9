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

void StreamHost::reset_all(std::string_view reason) {
  // Resetting never frees a connection at once (IoObject), so the list can
  // be walked as it is.
  for (LocalConnection* c = first; c; c = c->next_in_host())
    if (!c->ending()) c->reset_now(reason);
}

}  // namespace rdmagw::local
