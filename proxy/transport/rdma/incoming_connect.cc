// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/rdma/incoming_connect.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

namespace rdmagw::transport {

std::optional<IncomingConnect> IncomingConnect::take(rdma_cm_id* id, std::string* error) {
  rdma_event_channel* channel = rdma_create_event_channel();
  if (!channel) {
    *error = std::string("rdma_create_event_channel: ") + strerror(errno);
  } else {
    int flags = fcntl(channel->fd, F_GETFL);
    if (flags < 0 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) != 0)
      *error = std::string("fcntl(O_NONBLOCK) on an RDMA CM channel: ") + strerror(errno);
    else if (rdma_migrate_id(id, channel) != 0)
      *error = std::string("rdma_migrate_id: ") + strerror(errno);
    else
      return IncomingConnect(id, channel);
  }
  // Still on the listener's channel here: rejected and destroyed there.
  rdma_reject(id, nullptr, 0);
  rdma_destroy_id(id);
  if (channel) rdma_destroy_event_channel(channel);
  return std::nullopt;
}

IncomingConnect::~IncomingConnect() {
  if (id_) {
    rdma_reject(id_, nullptr, 0);
    rdma_destroy_id(id_);
  }
  if (channel_) rdma_destroy_event_channel(channel_);
}

}  // namespace rdmagw::transport
