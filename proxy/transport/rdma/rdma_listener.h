// SPDX-License-Identifier: Apache-2.0
#pragma once
// The passive side of RDMA CM: listens on tunnel.address:rdma_port and hands
// each connection request (its cm_id and private data) to a handler, which
// turns it into an RdmaTransport on its own event channel.
#include <rdma/rdma_cma.h>

#include <functional>
#include <string>

#include "common/address.h"
#include "proxy/io/event_loop.h"

namespace rdmagw::transport {

class RdmaListener final : public IoObject {
 public:
  using Handler = std::function<void(rdma_cm_id* id, const uint8_t* private_data, size_t len)>;
  RdmaListener(EventLoop& loop, Handler handler) : IoObject(loop), handler_(std::move(handler)) {
    op_ = IoOp::bind<&RdmaListener::on_ready>(this);
  }

  bool listen(const Endpoint& at, std::string* error);
  // Stops listening; the owner then lets go (freed once the poll completes).
  void stop();
  // Its device went away (RDMA_CM_EVENT_DEVICE_REMOVAL): it listens no more
  // and has let go of the device; the owner listens again with a new one.
  bool device_lost() const { return device_lost_; }

 private:
  ~RdmaListener() override;
  void arm();
  void on_ready(int res, uint32_t flags);

  Handler handler_;
  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  IoOp op_;
  bool armed_ = false;
  bool stopped_ = false;
  bool device_lost_ = false;
};

}  // namespace rdmagw::transport
