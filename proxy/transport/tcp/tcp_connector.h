// SPDX-License-Identifier: Apache-2.0
#pragma once
// The TCP transport's two ends of the tunnel seam (tunnel/transport.h): a
// Connector that dials the peer's tcp_port, and a TransportListener that
// accepts on ours (one SO_REUSEPORT socket per worker).
#include <string>

#include "common/buffer_pool.h"
#include "common/unique_fd.h"
#include "proxy/io/acceptor.h"
#include "proxy/io/event_loop.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::transport {

class TcpConnector final : public tunnel::Connector {
 public:
  // `max_data`: our buffer size, the largest DATA payload we accept.
  // `splice`: tunnel.tcp_splice (tcp_transport.h).
  // `source`: the address every dial connects from (port 0), or none to let
  // the route choose (the worker gives tunnel.address in mode cert).
  TcpConnector(EventLoop& loop, BufferPool& pool, uint32_t max_data, bool splice,
               std::optional<Endpoint> source = std::nullopt)
      : loop_(loop), pool_(pool), max_data_(max_data), splice_(splice), source_(std::move(source)) {}
  tunnel::TransportKind kind() const override { return tunnel::TransportKind::kTcp; }
  std::unique_ptr<tunnel::Dial> dial(const Endpoint& peer, uint32_t timeout_ms, const tunnel::SessionToken* session,
                                     tunnel::DialObserver* observer, std::string* error) override;

 private:
  EventLoop& loop_;
  BufferPool& pool_;
  uint32_t max_data_;
  bool splice_;
  std::optional<Endpoint> source_;
};

class TcpTransportListener final : public tunnel::TransportListener {
 public:
  // Does not own `listen_fd` (the runtime opened it for this worker).
  // `gate`: each accepted connection needs a handshake slot from it.
  TcpTransportListener(EventLoop& loop, BufferPool& pool, int listen_fd, uint32_t max_data, bool splice,
                       tunnel::HandshakeGate gate);
  ~TcpTransportListener() override;
  tunnel::TransportKind kind() const override { return tunnel::TransportKind::kTcp; }
  void start(tunnel::InboundObserver* observer) override;
  void stop() override;
  void tick() override;

 private:
  void on_accept(UniqueFd fd);

  EventLoop& loop_;
  BufferPool& pool_;
  uint32_t max_data_;
  bool splice_;
  tunnel::HandshakeGate gate_;
  IoPtr<Acceptor> acceptor_;
  tunnel::InboundObserver* observer_ = nullptr;
};

}  // namespace rdmagw::transport
