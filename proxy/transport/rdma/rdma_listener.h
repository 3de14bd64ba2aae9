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
};

}  // namespace rdmagw::transport
