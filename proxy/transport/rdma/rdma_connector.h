// SPDX-License-Identifier: Apache-2.0
#pragma once
// The RDMA transport's two ends of the tunnel seam (tunnel/transport.h): a
// Connector that dials the peer's rdma_port through RDMA CM, and a
// TransportListener that accepts on ours. Both hand over an RdmaTransport
// only once it is ESTABLISHED.
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/log_limiter.h"
#include "proxy/io/event_loop.h"
#include "proxy/transport/rdma/rdma_context.h"
#include "proxy/transport/rdma/rdma_listener.h"
#include "proxy/transport/rdma/rdma_transport.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::transport {

class RdmaConnector final : public tunnel::Connector {
 public:
  // `source`: the address every dial connects from, or none to let the
  // route choose (the worker gives tunnel.address in mode cert).
  RdmaConnector(EventLoop& loop, RdmaContext& ctx, uint32_t max_data, std::optional<Endpoint> source = std::nullopt)
      : loop_(loop), ctx_(ctx), max_data_(max_data), source_(std::move(source)) {}
  tunnel::TransportKind kind() const override { return tunnel::TransportKind::kRdma; }
  std::unique_ptr<tunnel::Dial> dial(const Endpoint& peer, uint32_t timeout_ms, const tunnel::SessionToken* session,
                                     tunnel::DialObserver* observer, std::string* error) override;

 private:
  EventLoop& loop_;
  RdmaContext& ctx_;
  uint32_t max_data_;
  std::optional<Endpoint> source_;
};

class RdmaTransportListener final : public tunnel::TransportListener, private RdmaTransport::Observer {
 public:
  // `gate`: each connect request needs a handshake slot from it.
  RdmaTransportListener(EventLoop& loop, RdmaContext& ctx, uint32_t max_data, tunnel::HandshakeGate gate)
      : loop_(loop), ctx_(ctx), max_data_(max_data), gate_(std::move(gate)) {}
  ~RdmaTransportListener() override;
  // Binds and listens on `at` (tunnel.address:rdma_port).
  bool listen(const Endpoint& at, std::string* error);
  // As listen(), for a listener that must come back (an undrain): a failure
  // (the port taken meanwhile) is logged and tried again once a second, as
  // after the device went away.
  void listen_or_retry(const Endpoint& at);
  // Decides which worker accepts a connect request: returns true when it
  // took the request (moved from `connect`, with its private data) to
  // another worker, which accepts it there with accept_request(). `session`
  // is the session the dialer resumes, if it named one. Only the listening
  // worker has one.
  using Placement = std::function<bool(const tunnel::SessionToken* session, IncomingConnect& connect,
                                       std::span<const uint8_t> private_data)>;
  void set_placement(Placement placement) { placement_ = std::move(placement); }
  // Accepts a connect request on this worker: every request on the
  // listening one, or one another worker's placement handed here (this
  // listener then never listen()s). Rejected once stopped.
  void accept_request(IncomingConnect connect, const uint8_t* data, size_t len);
  tunnel::TransportKind kind() const override { return tunnel::TransportKind::kRdma; }
  void start(tunnel::InboundObserver* observer) override { observer_ = observer; }
  void stop() override;
  // A listener whose device went away listens again, once a second, until
  // the address is on an RDMA device again.
  void tick() override;

 private:
  void on_connect_request(rdma_cm_id* id, const uint8_t* data, size_t len);
  void on_rdma_established(RdmaTransport* transport) override;
  void on_rdma_failed(RdmaTransport* transport, std::string_view reason) override;
  IoPtr<RdmaTransport> take_pending(RdmaTransport* transport);

  EventLoop& loop_;
  RdmaContext& ctx_;
  uint32_t max_data_;
  tunnel::HandshakeGate gate_;
  log::LogLimiter reject_log_{1, 5};  // rejections past tunnel.rdma.max_pinned
  IoPtr<RdmaListener> listener_;
  std::optional<Endpoint> listen_at_;
  Clock::time_point next_listen_try_;
  bool relisten_ = false;        // the device went away: listen again, once a second
  bool listen_failing_ = false;  // the last try failed (logged once)
  tunnel::InboundObserver* observer_ = nullptr;
  Placement placement_;
  std::vector<IoPtr<RdmaTransport>> pending_;  // accepted, not yet ESTABLISHED
};

}  // namespace rdmagw::transport
