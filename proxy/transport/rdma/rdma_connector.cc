// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/rdma/rdma_connector.h"

#include <algorithm>
#include <new>
#include <optional>

#include "common/log.h"
#include "proxy/transport/rdma/connect_params.h"

namespace rdmagw::transport {

namespace {

// Owns the transport while RDMA CM sets it up; hands it to the observer
// once ESTABLISHED. Dropping the dial closes a transport still in setup.
class RdmaDial final : public tunnel::Dial, private RdmaTransport::Observer {
 public:
  explicit RdmaDial(tunnel::DialObserver* observer) : observer_(observer) {}
  ~RdmaDial() override {
    if (transport_) {
      transport_->abandon();
      transport_->close(tunnel::CloseMode::kAbort);
    }
  }
  RdmaTransport::Observer* as_observer() { return this; }
  void adopt(IoPtr<RdmaTransport> transport) { transport_ = std::move(transport); }

 private:
  // The observer may destroy this dial inside either call: nothing is
  // touched after it.
  void on_rdma_established(RdmaTransport*) override { observer_->on_dialed(std::move(transport_)); }
  void on_rdma_failed(RdmaTransport* transport, std::string_view reason) override {
    bool rejected = transport->rejected();
    transport_.reset();  // it closes itself after this returns
    observer_->on_dial_failed(reason, rejected);
  }

  tunnel::DialObserver* observer_;
  IoPtr<RdmaTransport> transport_;
};

}  // namespace

std::unique_ptr<tunnel::Dial> RdmaConnector::dial(const Endpoint& peer, uint32_t timeout_ms,
                                                  const tunnel::SessionToken* session, tunnel::DialObserver* observer,
                                                  std::string* error) {
  auto dial = std::make_unique<RdmaDial>(observer);
  auto transport = RdmaTransport::dial(loop_, ctx_, peer, max_data_, timeout_ms, session, dial->as_observer(), error,
                                       source_ ? &*source_ : nullptr);
  if (!transport) return nullptr;
  dial->adopt(std::move(transport));
  return dial;
}

RdmaTransportListener::~RdmaTransportListener() { stop(); }

bool RdmaTransportListener::listen(const Endpoint& at, std::string* error) {
  listen_at_ = at;
  listener_ = make_io<RdmaListener>(
      loop_, [this](rdma_cm_id* id, const uint8_t* data, size_t len) { on_connect_request(id, data, len); });
  return listener_->listen(at, error);
}

void RdmaTransportListener::listen_or_retry(const Endpoint& at) {
  std::string error;
  if (listen(at, &error)) return;
  listener_->stop();
  listener_.reset();
  relisten_ = true;
  listen_failing_ = true;
  log::warn("rdma_listen_failed").kv("address", at.to_string()).kv("reason", error);
}

void RdmaTransportListener::tick() {
  if (listener_ && listener_->device_lost()) {
    listener_->stop();
    listener_.reset();
    relisten_ = true;
  }
  if (!relisten_ || !observer_ || loop_.now() < next_listen_try_) return;
  next_listen_try_ = loop_.now() + std::chrono::seconds(1);
  forget_removed_devices();
  std::string error;
  if (listen(*listen_at_, &error)) {
    log::info("rdma_listening_again").kv("address", listen_at_->to_string());
    relisten_ = false;
    listen_failing_ = false;
    return;
  }
  listener_->stop();
  listener_.reset();
  if (!listen_failing_) log::warn("rdma_listen_failed").kv("address", listen_at_->to_string()).kv("reason", error);
  listen_failing_ = true;
}

void RdmaTransportListener::stop() {
  observer_ = nullptr;
  if (listener_) {
    listener_->stop();
    listener_.reset();
  }
  for (auto& t : pending_) {
    t->abandon();
    t->close(tunnel::CloseMode::kAbort);
  }
  pending_.clear();
}

void RdmaTransportListener::on_connect_request(rdma_cm_id* id, const uint8_t* data, size_t len) {
  std::string error;
  std::optional<IncomingConnect> connect = IncomingConnect::take(id, &error);
  if (!connect) {
    log::warn("rdma_accept_failed").kv("reason", error);
    return;
  }
  // Refused (rejected by `connect`) before a QP or a buffer is spent on it.
  sockaddr* peer = rdma_get_peer_addr(connect->id());
  std::optional<tunnel::HandshakeSlot> slot = gate_.enter(sockaddr_to_string(peer, sizeof(sockaddr_storage)), "rdma");
  if (!slot) return;
  connect->hold(std::move(*slot));
  // Another worker may have to take it: the one holding the session it
  // resumes, or the next in turn for a new one.
  if (observer_ && placement_) {
    ConnectParams params;
    const char* reason = "";
    bool valid = decode_connect_params(data, len, &params, &reason);
    const tunnel::SessionToken* session = valid && params.session ? &*params.session : nullptr;
    if (placement_(session, *connect, std::span<const uint8_t>(data, len))) return;
  }
  accept_request(std::move(*connect), data, len);
}

void RdmaTransportListener::accept_request(IncomingConnect connect, const uint8_t* data, size_t len) {
  if (!observer_) return;  // stopped: `connect` rejects it
  if (ctx_.at_transport_limit()) {
    // tunnel.rdma.max_pinned: rejected, whatever it is for (the dialer's
    // auto mode goes to TCP). A session's move to RDMA carries its token as
    // a resume does, so the token cannot tell them apart; a resume usually
    // finds room anyway, its lost transport having freed its place.
    if (metrics::WorkerMetrics* m = ctx_.metrics()) m->rdma_budget_rejected.add();
    uint64_t suppressed = 0;
    if (reject_log_.allow(loop_.now(), &suppressed)) {
      log::Line line = log::warn("rdma_connect_rejected");
      line.kv("remote", sockaddr_to_string(rdma_get_peer_addr(connect.id()), sizeof(sockaddr_storage)))
          .kv("reason", "tunnel.rdma.max_pinned reached (" + std::to_string(ctx_.transports()) +
                            " RDMA sessions on this worker)");
      if (suppressed) line.kv("suppressed", suppressed);
    }
    return;  // `connect` rejects it
  }
  std::string error;
  IoPtr<RdmaTransport> transport;
  try {
    transport = RdmaTransport::accept(loop_, ctx_, std::move(connect), data, len, max_data_, this, &error);
  } catch (const std::bad_alloc&) {
    error = "out of memory";  // this request is rejected; every other connection goes on
  }
  if (!transport) {
    log::warn("rdma_accept_failed").kv("reason", error);
    return;
  }
  pending_.push_back(std::move(transport));
}

IoPtr<RdmaTransport> RdmaTransportListener::take_pending(RdmaTransport* transport) {
  auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& t) { return t.get() == transport; });
  if (it == pending_.end()) return nullptr;
  IoPtr<RdmaTransport> out = std::move(*it);
  pending_.erase(it);
  return out;
}

void RdmaTransportListener::on_rdma_established(RdmaTransport* transport) {
  IoPtr<RdmaTransport> t = take_pending(transport);
  if (!t) return;
  if (observer_)
    observer_->on_inbound(std::move(t));
  else
    t->close(tunnel::CloseMode::kAbort);
}

void RdmaTransportListener::on_rdma_failed(RdmaTransport* transport, std::string_view reason) {
  log::warn("rdma_accept_failed").kv("remote", transport->remote_address()).kv("reason", reason);
  take_pending(transport);  // dropped: it closes itself after this returns
}

}  // namespace rdmagw::transport
