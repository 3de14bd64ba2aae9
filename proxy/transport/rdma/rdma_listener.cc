// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/rdma/rdma_listener.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace rdmagw::transport {

RdmaListener::~RdmaListener() {
  if (id_) rdma_destroy_id(id_);
  if (channel_) rdma_destroy_event_channel(channel_);
}

bool RdmaListener::listen(const Endpoint& at, std::string* error) {
  channel_ = rdma_create_event_channel();
  if (!channel_) {
    *error = std::string("rdma_create_event_channel: ") + strerror(errno);
    return false;
  }
  int flags = fcntl(channel_->fd, F_GETFL);
  fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK);
  if (rdma_create_id(channel_, &id_, this, RDMA_PS_TCP) != 0) {
    *error = std::string("rdma_create_id: ") + strerror(errno);
    return false;
  }
  sockaddr_storage addr = at.addr;
  if (rdma_bind_addr(id_, reinterpret_cast<sockaddr*>(&addr)) != 0) {
    *error = "rdma_bind_addr " + at.to_string() + ": " + strerror(errno) +
             " (is tunnel.address on an RDMA device, and tunnel.rdma_port free?)";
    return false;
  }
  if (rdma_listen(id_, 1024) != 0) {
    *error = std::string("rdma_listen: ") + strerror(errno);
    return false;
  }
  arm();
  return true;
}

void RdmaListener::arm() {
  if (armed_ || stopped_) return;
  io_uring_sqe* s = loop().sqe(&op_);
  io_uring_prep_poll_add(s, channel_->fd, POLLIN);
  armed_ = true;
}

void RdmaListener::stop() {
  stopped_ = true;
  if (armed_) loop().cancel(&op_);
}

void RdmaListener::on_ready(int, uint32_t) {
  armed_ = false;
  for (int i = 0; i < 64 && !stopped_; ++i) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(channel_, &ev) != 0) break;
    if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL && ev->id == id_) {
      rdma_ack_cm_event(ev);
      // The kernel waits for this id to go before the device can.
      rdma_destroy_id(id_);
      id_ = nullptr;
      device_lost_ = true;
      stopped_ = true;
      log::warn("rdma_listener_lost").kv("reason", "RDMA device removed").kv("next", "listening again once it is back");
      break;
    }
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_cm_id* id = ev->id;
      uint8_t data[64] = {};
      size_t len = std::min<size_t>(ev->param.conn.private_data_len, sizeof(data));
      if (ev->param.conn.private_data && len) std::memcpy(data, ev->param.conn.private_data, len);
      rdma_ack_cm_event(ev);
      handler_(id, data, len);
    } else {
      log::debug("rdma_listener_event").kv("event", rdma_event_str(ev->event));
      rdma_ack_cm_event(ev);
    }
  }
  arm();
}

}  // namespace rdmagw::transport
