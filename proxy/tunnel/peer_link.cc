#include "proxy/tunnel/peer_link.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/socket_options.h"
#include "proxy/transport/tcp/tcp_transport.h"

namespace rdmagw::tunnel {

PeerLink::PeerLink(EventLoop& loop, BufferPool& pool, const PeerConfig& peer, const SessionSettings& settings,
                   const TunnelConfig& tunnel, SessionGraveyard& graveyard, transport::RdmaContext* rdma)
    : loop_(loop),
      pool_(pool),
      peer_(peer),
      settings_(settings),
      tunnel_(tunnel),
      graveyard_(graveyard),
      rdma_(rdma) {
  connect_op_ = IoOp::bind<&PeerLink::on_connect>(this);
  timeout_op_ = IoOp::bind<&PeerLink::on_connect_timeout>(this);
  settings_.peer_label = peer_.name;
  if (settings_.metrics) counters_ = &settings_.metrics->peer(peer_.name);
}

PeerLink::~PeerLink() {
  // Workers destroy links after their loop ends, or once a retired link is
  // finished(): either way nothing is in flight that could call back.
  // Waiting streams are failed so they close.
  for (auto& w : waiting_) w.stream->abort(ResetCode::kShutdown, "sidecar stopped");
  waiting_.clear();
  if (rdma_dialing_) rdma_dialing_->close();
}

void PeerLink::start() { dial(); }

void PeerLink::dial() {
  if (dialing_ || shutting_down_ || active_) return;
  if (use_rdma()) dial_rdma();
  else dial_tcp();
}

bool PeerLink::use_rdma() const {
  if (!rdma_ || tunnel_.transport == TransportMode::kTcp) return false;
  // auto: RDMA until it has failed three times in a row, then TCP.
  return tunnel_.transport == TransportMode::kRdma || rdma_failures_ < 3;
}

void PeerLink::dial_rdma() {
  std::string error;
  auto ep = make_tcp_endpoint(peer_.address, peer_.rdma_port, &error);
  if (ep) {
    rdma_dialing_ = transport::RdmaTransport::dial(loop_, *rdma_, *ep, settings_.max_data, tunnel_.connect_timeout_ms,
                                                   this, &error);
  }
  if (!rdma_dialing_) {
    rdma_dial_failed(error);
    return;
  }
  dialing_ = true;
}

void PeerLink::on_rdma_established(transport::RdmaTransport* transport) {
  rdma_dialing_ = nullptr;
  dialing_ = false;
  if (shutting_down_) {
    transport->close();
    return;
  }
  rdma_failures_ = 0;
  open_session(transport);
}

void PeerLink::on_rdma_failed(transport::RdmaTransport*, std::string_view reason) {
  rdma_dialing_ = nullptr;
  dialing_ = false;
  rdma_dial_failed(std::string(reason));
}

void PeerLink::rdma_dial_failed(std::string reason) {
  ++rdma_failures_;
  if (tunnel_.transport == TransportMode::kRdma) {
    // rdma never falls back; it says why and retries with backoff.
    connect_failed("rdma: " + reason);
    return;
  }
  log::warn("transport_fallback")
      .kv("peer", peer_.name)
      .kv("from", "rdma")
      .kv("to", "tcp")
      .kv("rdma_failures", rdma_failures_)
      .kv("reason", reason);
  transport_reason_ = "RDMA failed (" + reason + "); falling back";
  if (!shutting_down_) dial_tcp();
}

void PeerLink::open_session(Transport* transport) {
  std::string kind(transport->kind());
  transport_reason_ = kind == "rdma"                               ? "RDMA CM connect succeeded"
                      : tunnel_.transport == TransportMode::kTcp ? "configured"
                      : !rdma_                                    ? "no usable RDMA device here"
                      : transport_reason_.empty()                 ? "RDMA failed; falling back"
                                                                  : transport_reason_;
  if (kind != last_transport_) {
    log::info("transport_selected")
        .kv("peer", peer_.name)
        .kv("transport", kind)
        .kv("mode", tunnel_.transport == TransportMode::kAuto ? "auto"
                    : tunnel_.transport == TransportMode::kRdma ? "rdma" : "tcp")
        .kv("reason", transport_reason_);
    last_transport_ = kind;
  }
  active_ = std::make_unique<Session>(loop_, pool_, Session::Role::kDialer, settings_, transport, this);
  active_->start();
}

void PeerLink::dial_tcp() {
  if (dialing_ || shutting_down_ || active_) return;
  const Endpoint& ep = peer_.tcp_endpoint;
  int fd = ::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    connect_failed(std::string("socket: ") + strerror(errno));
    return;
  }
  dial_fd_.reset(fd);
  dialing_ = true;
  dial_timeout_.tv_sec = tunnel_.connect_timeout_ms / 1000;
  dial_timeout_.tv_nsec = (tunnel_.connect_timeout_ms % 1000) * 1000000LL;
  loop_.reserve(2);
  io_uring_sqe* c = loop_.sqe(&connect_op_);
  io_uring_prep_connect(c, fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.addr_len);
  c->flags |= IOSQE_IO_LINK;
  io_uring_sqe* t = loop_.sqe(&timeout_op_);
  io_uring_prep_link_timeout(t, &dial_timeout_, 0);
  dial_ops_ += 2;
}

void PeerLink::on_connect_timeout(int, uint32_t) { --dial_ops_; }

void PeerLink::on_connect(int res, uint32_t) {
  --dial_ops_;
  dialing_ = false;
  if (res < 0 && shutting_down_) {
    dial_fd_.reset();  // cancelled by begin_shutdown(): not a failure to report
    return;
  }
  if (res < 0) {
    dial_fd_.reset();
    int err = res == -ECANCELED ? ETIMEDOUT : -res;
    connect_failed(std::string("connect ") + peer_.tcp_endpoint.to_string() + ": " + strerror(err));
    return;
  }
  if (shutting_down_) {
    dial_fd_.reset();
    return;
  }
  set_nodelay(dial_fd_.get());
  auto* transport = new transport::TcpTransport(loop_, pool_, std::move(dial_fd_), settings_.max_data,
                                                sockaddr_to_string(reinterpret_cast<const sockaddr*>(&peer_.tcp_endpoint.addr),
                                                                   peer_.tcp_endpoint.addr_len));
  open_session(transport);
}

void PeerLink::connect_failed(std::string reason) {
  ++failures_;
  last_error_ = reason;
  // Log the first failure and then every tenth, so a peer that stays down
  // does not flood the log.
  if (failures_ == 1 || failures_ % 10 == 0) {
    log::warn("peer_connect_failed")
        .kv("peer", peer_.name)
        .kv("transport", use_rdma() ? "rdma" : "tcp")
        .kv("attempt", failures_)
        .kv("reason", reason);
  }
  schedule_retry();
}

void PeerLink::schedule_retry() {
  backoff_ms_ = backoff_ms_ == 0 ? 50 : std::min<uint32_t>(backoff_ms_ * 2, tunnel_.reconnect_max_ms);
  next_dial_ = loop_.now() + std::chrono::milliseconds(backoff_ms_);
}

void PeerLink::submit(PendingStream* stream) {
  if (shutting_down_) {
    stream->abort(ResetCode::kShutdown, "sidecar is shutting down");
    return;
  }
  if (up()) {
    stream->attach(*active_);
    return;
  }
  waiting_.push_back({stream, loop_.now() + std::chrono::milliseconds(tunnel_.connect_timeout_ms)});
  // A stream is waiting: do not sit out the rest of a long backoff.
  if (!dialing_ && !active_) dial();
}

void PeerLink::tick(Clock::time_point now) {
  if (active_) active_->tick(now);
  // Closing a session removes it from draining_: walk a copy.
  std::vector<Session*> draining;
  for (auto& d : draining_) draining.push_back(d.get());
  for (Session* d : draining) {
    d->tick(now);
    // A drained session with no streams left is done.
    if (d->state() != Session::State::kClosed && d->stream_count() == 0) d->close_gracefully("drained");
  }
  while (!waiting_.empty() && waiting_.front().deadline <= now) {
    PendingStream* s = waiting_.front().stream;
    waiting_.pop_front();
    s->abort(ResetCode::kPeerGone, "no session to peer " + peer_.name + " within connect_timeout_ms");
  }
  if (!active_ && !dialing_ && !shutting_down_ && now >= next_dial_) dial();
}

void PeerLink::on_session_open(Session& session) {
  if (&session != active_.get()) return;
  if (was_up_ || failures_ > 0) {
    log::info("peer_up").kv("peer", peer_.name).kv("transport", session.transport_kind()).kv("after_failures", failures_);
  }
  if (was_up_ && counters_) counters_->reconnects.add();
  was_up_ = true;
  last_error_.clear();
  failures_ = 0;
  backoff_ms_ = 0;
  // Attach in arrival order; attaching cannot close the session synchronously
  // except on buffer exhaustion, which the loop below tolerates.
  while (!waiting_.empty() && up()) {
    PendingStream* s = waiting_.front().stream;
    waiting_.pop_front();
    s->attach(*active_);
  }
}

void PeerLink::on_session_closed(Session& session, std::string_view reason) {
  if (&session == active_.get()) {
    graveyard_.push_back(std::move(active_));
    if (!shutting_down_) connect_failed(std::string(reason));
    return;
  }
  for (auto& d : draining_) {
    if (d.get() == &session) {
      graveyard_.push_back(std::move(d));
      break;
    }
  }
  std::erase(draining_, nullptr);
}

void PeerLink::on_goaway(Session& session) {
  if (&session != active_.get()) return;
  // The peer drains this session: finish its streams there, dial anew now.
  draining_.push_back(std::move(active_));
  backoff_ms_ = 0;
  next_dial_ = loop_.now();
  dial();
}

StreamEndpoint* PeerLink::on_stream_open(Session& session, uint32_t id, std::string_view target,
                                         ResetCode* refuse) {
  // Streams flow from the dialer to the acceptor; a peer opening one back on
  // our dialed session is refused.
  log::warn("stream_refused")
      .kv("peer", session.peer_node())
      .kv("stream", id)
      .kv("target", target)
      .kv("reason", "not-allowed")
      .kv("detail", "streams may only be opened by the dialing side");
  *refuse = ResetCode::kNotAllowed;
  return nullptr;
}

void PeerLink::begin_shutdown() {
  shutting_down_ = true;
  if (dialing_ && !rdma_dialing_) loop_.cancel(&connect_op_);
  if (rdma_dialing_) {
    rdma_dialing_->close();
    rdma_dialing_ = nullptr;
    dialing_ = false;
  }
  while (!waiting_.empty()) {
    PendingStream* s = waiting_.front().stream;
    waiting_.pop_front();
    s->abort(ResetCode::kShutdown, "sidecar is shutting down");
  }
  // GOAWAY is the acceptor's word ("open no more here"); the dialer simply
  // opens nothing new and lets its streams finish.
}

void PeerLink::close_all(std::string_view reason) {
  if (active_) active_->close_gracefully(reason);
  std::vector<Session*> draining;
  for (auto& d : draining_) draining.push_back(d.get());
  for (Session* d : draining) d->close_gracefully(reason);
}

}  // namespace rdmagw::tunnel

namespace rdmagw::tunnel {

void PeerLink::retire() {
  retired_ = true;
  begin_shutdown();
  // Its streams finish on it; tick() closes it once it carries none.
  if (active_) draining_.push_back(std::move(active_));
}

std::vector<PendingStream*> PeerLink::take_waiting() {
  std::vector<PendingStream*> out;
  for (const auto& w : waiting_) out.push_back(w.stream);
  waiting_.clear();
  return out;
}

bool PeerLink::finished() const {
  return !active_ && draining_.empty() && waiting_.empty() && !dialing_ && dial_ops_ == 0 && !rdma_dialing_;
}

void PeerLink::describe(unsigned worker, admin::PeerInfo* out) const {
  out->name = peer_.name;
  out->configured = !retired_;
  out->address = peer_.address;
  out->tcp_port = peer_.tcp_port;
  out->rdma_port = peer_.rdma_port;
  out->transport = active_ ? std::string(active_->transport_kind()) : use_rdma() ? "rdma" : "tcp";
  out->transport_reason = !transport_reason_.empty()                ? transport_reason_
                          : tunnel_.transport == TransportMode::kTcp ? "configured"
                          : !rdma_                                   ? "no usable RDMA device here"
                                                                     : "RDMA device available";
  // "down": the last attempt failed and the next waits for its backoff.
  bool waiting_to_retry = failures_ > 0 && !dialing_ && !active_;
  out->state = retired_ ? "removed" : up() ? "up" : waiting_to_retry ? "down" : "connecting";
  out->last_error = last_error_;
  out->waiting_streams = waiting_.size();
  auto add = [&](const Session& s) {
    admin::SessionInfo info;
    info.worker = worker;
    s.describe(&info);
    out->sessions.push_back(std::move(info));
  };
  if (active_) add(*active_);
  for (const auto& d : draining_) add(*d);
}

}  // namespace rdmagw::tunnel
