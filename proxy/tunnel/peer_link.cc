// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/peer_link.h"

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace rdmagw::tunnel {

PeerLink::PeerLink(EventLoop& loop, BufferPool& pool, const PeerConfig& peer, const SessionSettings& settings,
                   const TunnelConfig& tunnel, Connectors connectors, SessionBudget* budget)
    : loop_(loop),
      pool_(pool),
      peer_(peer),
      settings_(settings),
      tunnel_(tunnel),
      connectors_(connectors),
      budget_(budget),
      choice_(tunnel_, connectors.rdma != nullptr, connectors.tcp != nullptr, settings.node, peer.address),
      last_used_(loop.now()) {
  settings_.peer_label = peer_.name;
  settings_.expected_peer = peer_.discovered ? std::string() : peer_.name;
  if (settings_.metrics) counters_ = &settings_.metrics->peer(peer_.name);
}

void PendingStream::stop_waiting() {
  if (waiting_in_) waiting_in_->withdraw(this);
}

PeerLink::~PeerLink() {
  // Waiting streams are failed so they close; a dial in progress is
  // cancelled by dropping it; sessions still held are closed and told
  // nothing more (they outlive this link until their I/O ends).
  while (!waiting_.empty()) pop_waiting()->abort(ResetCode::kShutdown, "sidecar stopped");
  dial_.reset();
  tcp_beside_.reset();
  close_all("peer link destroyed", CloseMode::kAbort);
  if (active_) active_->disown();
  for (auto& d : draining_) d->disown();
}

void PeerLink::start() { dial(); }

void PeerLink::dial() {
  if (frozen_ || dial_ || tcp_beside_ || shutting_down_ || !needs_dial()) return;
  if (!active_) {
    dial_new_session(choice_.preferred());
    return;
  }
  dial(choice_.preferred());
}

void PeerLink::dial_new_session(TransportKind kind) {
  if (budget_ && !budget_->may_hold_session(*this)) {
    // Streams accepted here go to the worker holding the peer's session
    // (Worker::hand_over_stream); any that got here anyway cannot wait.
    last_error_ = "tunnel.sessions_per_peer: other workers hold the sessions to this peer";
    while (!waiting_.empty()) pop_waiting()->abort(ResetCode::kResource, last_error_);
    schedule_retry();
    return;
  }
  if (!budget_ || budget_->make_room_for_session(*this)) {
    dial(kind);
    return;
  }
  // Every session this worker may hold carries streams: these streams
  // cannot have one. The worker logged and counted it.
  last_error_ = "tunnel.max_sessions reached: every session of this worker carries streams";
  while (!waiting_.empty()) pop_waiting()->abort(ResetCode::kResource, last_error_);
  schedule_retry();
}

void PeerLink::dial(TransportKind kind) {
  bool resume = active_ && active_->wants_transport() && !probing_;
  if (kind == TransportKind::kRdma && budget_ && resume) {
    // A session that was on RDMA gets its place back (its lost transport
    // freed it); one on TCP (put there for want of room) goes to RDMA only
    // if there is room, and closes nothing for it.
    if (active_->transport_kind() != TransportKind::kRdma && !budget_->has_rdma_room() && choice_.falls_back_to_tcp())
      kind = TransportKind::kTcp;
  } else if (kind == TransportKind::kRdma && budget_ && !probing_) {
    SessionBudget::RdmaRoom room = budget_->make_room_for_rdma(*this);
    if (room != SessionBudget::RdmaRoom::kYes) {
      if (choice_.falls_back_to_tcp()) {
        // TCP now; a resumable session moves to RDMA when there is room
        // (rdma_probe_interval_ms).
        choice_.set_reason("tunnel.rdma.max_pinned reached: TCP instead");
        kind = TransportKind::kTcp;
      } else {
        last_error_ = "tunnel.rdma.max_pinned reached on this worker";
        if (room == SessionBudget::RdmaRoom::kNo)
          while (!waiting_.empty()) pop_waiting()->abort(ResetCode::kResource, last_error_);
        schedule_retry();  // kSoon: an idle session is closing to make room
        return;
      }
    }
  }
  Connector* connector = kind == TransportKind::kRdma ? connectors_.rdma : connectors_.tcp;
  std::string error;
  std::optional<Endpoint> at;
  if (kind == TransportKind::kRdma)
    at = make_tcp_endpoint(peer_.address, peer_.rdma_port, &error);
  else
    at = peer_.tcp_endpoint;
  // The session it is for, if it is to carry on an existing one: the peer's
  // RDMA listener places the connection with the worker holding it.
  const SessionToken* session = active_ && (active_->wants_transport() || probing_) ? &active_->token() : nullptr;
  if (at) dial_ = connector->dial(*at, tunnel_.connect_timeout_ms, session, this, &error);
  if (!dial_) {
    if (std::exchange(probing_, false) && !needs_dial()) {
      probe_failed(error);
      return;
    }
    dial_failed(kind, error, false);
    return;
  }
  dialing_kind_ = kind;
  // A probe has a session on TCP already; anything else waits for this dial.
  std::optional<uint32_t> head_start = choice_.tcp_head_start_ms();
  if (kind == TransportKind::kRdma && !probing_ && head_start)
    tcp_beside_at_ = loop_.now() + std::chrono::milliseconds(*head_start);
}

void PeerLink::dial_tcp_beside() {
  tcp_beside_at_.reset();
  if (!dial_ || dialing_kind_ != TransportKind::kRdma || probing_ || tcp_beside_ || shutting_down_ || frozen_) return;
  std::string error;
  const SessionToken* session = active_ && active_->wants_transport() ? &active_->token() : nullptr;
  tcp_beside_ =
      connectors_.tcp->dial(peer_.tcp_endpoint, tunnel_.connect_timeout_ms, session, &head_start_observer_, &error);
  log::info("transport_fallback")
      .kv("peer", peer_.name)
      .kv("from", "rdma")
      .kv("to", "tcp")
      .kv("reason", "the RDMA connect did not complete within tunnel.rdma_head_start_ms (" +
                        std::to_string(choice_.tcp_head_start_ms().value_or(0)) + " ms): TCP dialled beside it")
      .kv("dial", tcp_beside_ ? "started" : error);
}

void PeerLink::on_tcp_beside_dialed(IoPtr<Transport> transport) {
  tcp_beside_.reset();
  // TCP first: the RDMA attempt is cancelled; a resumable session moves to
  // RDMA once it connects (rdma_probe_interval_ms).
  dial_.reset();
  choice_.rdma_failed();
  choice_.set_reason("the RDMA connect did not complete within tunnel.rdma_head_start_ms (" +
                     std::to_string(choice_.tcp_head_start_ms().value_or(0)) + " ms); TCP instead");
  if (shutting_down_) {
    transport->close(CloseMode::kAbort);
    return;
  }
  use_transport(std::move(transport), false);
}

void PeerLink::on_tcp_beside_failed(std::string_view reason, bool refused) {
  tcp_beside_.reset();
  log::debug("tcp_beside_failed").kv("peer", peer_.name).kv("reason", reason).kv("refused", refused);
  if (refused) {
    // Every rdmagw listens on TCP: a refusal says none is there, whatever
    // the RDMA dial still waits for.
    refused_at_ = loop_.now();
    if (!active_) divert_waiting(reason);
  }
  // The RDMA dial goes on; if it has ended meanwhile, its own failure
  // already dialled TCP again or scheduled a retry.
  if (!dial_) connect_failed(TransportKind::kTcp, std::string(reason));
}

bool PeerLink::should_probe_rdma(Clock::time_point now) const {
  // The budget and in_rdma_share() last: they cost more, and this runs every tick.
  return choice_.probes_rdma() && !dial_ && !frozen_ && !shutting_down_ && now >= next_probe_ && active_ &&
         active_->open() && active_->transport_kind() == TransportKind::kTcp && active_->resumable() &&
         active_->peer_places_rdma() && (!budget_ || budget_->has_rdma_room()) && choice_.in_rdma_share();
}

void PeerLink::probe_failed(std::string_view reason) {
  choice_.rdma_failed();
  choice_.set_reason("RDMA failed (" + std::string(reason) + "); on TCP, trying RDMA again every " +
                     std::to_string(tunnel_.rdma_probe_interval_ms) + " ms");
  log::debug("rdma_probe_failed").kv("peer", peer_.name).kv("reason", reason);
}

void PeerLink::on_dialed(IoPtr<Transport> transport) {
  dial_.reset();
  tcp_beside_.reset();  // RDMA first: the TCP attempt beside it is cancelled
  tcp_beside_at_.reset();
  bool probe = std::exchange(probing_, false);
  if (shutting_down_) {
    transport->close(CloseMode::kAbort);
    return;
  }
  use_transport(std::move(transport), probe);
}

void PeerLink::use_transport(IoPtr<Transport> transport, bool probe) {
  choice_.carrying(transport->kind(), loop_.now());
  if (active_ && active_->wants_transport()) {
    // The suspended session goes on over it; its streams never noticed.
    active_->resume(std::move(transport));
    return;
  }
  if (probe && active_) {
    if (!active_->open() || active_->transport_kind() != TransportKind::kTcp) {
      transport->close(CloseMode::kAbort);  // the session changed meanwhile; no move
      return;
    }
    // RDMA is usable again: the session moves onto it as it would resume
    // after a transport loss; its streams never notice.
    log::info("transport_moved")
        .kv("peer", peer_.name)
        .kv("from", "tcp")
        .kv("to", "rdma")
        .kv("streams", active_->stream_count());
    choice_.set_reason("RDMA CM connect succeeded again; moved from TCP");
    last_transport_ = "rdma";
    active_->move_to(std::move(transport), "moving to RDMA");
    return;
  }
  open_session(std::move(transport));
}

void PeerLink::on_dial_failed(std::string_view reason, bool refused) {
  dial_.reset();
  tcp_beside_at_.reset();
  if (std::exchange(probing_, false) && !needs_dial()) {
    // The session is still up on TCP: it stays there until the next try.
    probe_failed(reason);
    return;
  }
  dial_failed(dialing_kind_, std::string(reason), refused);
}

void PeerLink::dial_failed(TransportKind kind, std::string reason, bool refused) {
  if (kind == TransportKind::kTcp) {
    if (refused) refused_at_ = loop_.now();
    if (refused && active_ && active_->wants_transport()) {
      // Nothing listens on the peer's tunnel port: its rdmagw is gone, and
      // the session with it (a successor would not know it). Its streams are
      // reset now rather than at the end of resume_timeout_ms.
      active_->close(SessionEnd::kPeerGone, "peer refused the connection: " + reason, CloseMode::kAbort);
      divert_waiting(reason);
      return;
    }
    if (refused && !active_) divert_waiting(reason);
    connect_failed(kind, reason);
    return;
  }
  choice_.rdma_failed();
  if (!choice_.falls_back_to_tcp()) {
    // rdma never falls back; it says why and retries with backoff. A
    // rejected connect does not end a suspended session at once (as a
    // refused TCP connect does): the peer's RDMA CM listener is away for a
    // moment in a takeover, or after its device came back, and a placed
    // request can meet a worker that stops. The session waits out
    // resume_timeout_ms.
    connect_failed(kind, "rdma: " + reason);
    return;
  }
  note_rdma_fallback(reason, "RDMA failed (" + reason + "); falling back");
  if (tcp_beside_) return;  // TCP is being dialled already (rdma_head_start_ms)
  if (!shutting_down_ && needs_dial()) dial(TransportKind::kTcp);
}

void PeerLink::note_rdma_fallback(const std::string& reason, std::string transport_reason) {
  log::warn("transport_fallback")
      .kv("peer", peer_.name)
      .kv("from", "rdma")
      .kv("to", "tcp")
      .kv("rdma_failures", choice_.rdma_failures())
      .kv("reason", reason);
  choice_.set_reason(std::move(transport_reason));
}

void PeerLink::open_session(IoPtr<Transport> transport) {
  refused_at_.reset();  // something listens there after all
  TransportKind kind = transport->kind();
  const std::string& reason = choice_.opened_on(kind);
  std::string name(transport_kind_name(kind));
  if (name != last_transport_) {
    log::info("transport_selected")
        .kv("peer", peer_.name)
        .kv("transport", name)
        .kv("mode", transport_mode_name(tunnel_.transport))
        .kv("reason", reason);
    last_transport_ = name;
  }
  active_ = make_io<Session>(loop_, pool_, Session::Role::kDialer, settings_, std::move(transport), this);
  active_->start();
}

void PeerLink::connect_failed(TransportKind kind, std::string reason) {
  ++failures_;
  last_error_ = reason;
  // Log the first failure and then every tenth, so a peer that stays down
  // does not flood the log.
  if (failures_ == 1 || failures_ % 10 == 0) {
    log::warn("peer_connect_failed")
        .kv("peer", peer_.name)
        .kv("transport", transport_kind_name(kind))
        .kv("attempt", failures_)
        .kv("reason", reason);
  }
  schedule_retry();
}

void PeerLink::schedule_retry() {
  // A suspended session has only resume_timeout_ms: retry it at least every 250 ms.
  uint32_t ceiling = active_ && active_->wants_transport() ? std::min<uint32_t>(tunnel_.reconnect_max_ms, 250)
                                                           : tunnel_.reconnect_max_ms;
  backoff_ms_ =
      backoff_ms_ == 0 ? std::min(tunnel_.reconnect_min_ms, ceiling) : std::min<uint32_t>(backoff_ms_ * 2, ceiling);
  next_dial_ = loop_.now() + std::chrono::milliseconds(backoff_ms_);
}

void PeerLink::submit(PendingStream* stream) {
  if (shutting_down_) {
    stream->abort(ResetCode::kShutdown, "sidecar is shutting down");
    return;
  }
  stream->waiting_in_ = this;
  waiting_.push_back({stream, loop_.now() + std::chrono::milliseconds(tunnel_.connect_timeout_ms)});
  if (frozen_) return;  // it moves to the new process as a waiting stream
  if (up()) {
    attach_waiting();
    return;
  }
  // A stream is waiting: do not sit out the rest of a long backoff.
  dial();
}

void PeerLink::attach_waiting() {
  // Attach in arrival order; a stream that fails to open is failed by itself.
  while (!waiting_.empty() && up()) pop_waiting()->attach(*active_);
}

bool PeerLink::carries_nothing() const {
  return !peer_.always_connected && active_ && active_->open() && active_->stream_count() == 0 && waiting_.empty();
}

std::optional<Clock::time_point> PeerLink::idle_since() const {
  if (!carries_nothing()) return std::nullopt;
  return idle_since_ ? *idle_since_ : loop_.now();
}

std::optional<TransportKind> PeerLink::active_transport() const {
  if (!active_) return std::nullopt;
  return active_->transport_kind();
}

bool PeerLink::close_if_idle(std::string_view why) {
  if (!idle_since()) return false;
  // Out of active_ first: a stream that comes before the close is announced
  // dials a new session instead of attaching to this one.
  draining_.push_back(std::move(active_));
  idle_since_.reset();
  draining_.back()->close(SessionEnd::kLocalClose, why, CloseMode::kFlush);
  return true;
}

void PeerLink::tick(Clock::time_point now) {
  if (frozen_) return;
  if (active_) active_->tick(now);
  // On demand: a session without streams for session_idle_ms is closed.
  if (!carries_nothing()) {
    idle_since_.reset();
    if (!waiting_.empty() || (active_ && active_->stream_count() != 0)) last_used_ = now;
  } else if (!idle_since_) {
    idle_since_ = now;
  } else if (tunnel_.session_idle_ms > 0 && now - *idle_since_ >= std::chrono::milliseconds(tunnel_.session_idle_ms)) {
    if (close_if_idle("idle for " + std::to_string(tunnel_.session_idle_ms) + " ms (tunnel.session_idle_ms)") &&
        settings_.metrics)
      settings_.metrics->sessions_idle_closed.add();
  }
  for (auto& d : draining_) {
    d->tick(now);
    // A drained session with no streams left is done.
    if (d->state() != Session::State::kClosed && d->stream_count() == 0)
      d->close(SessionEnd::kLocalClose, "drained", CloseMode::kFlush);
  }
  while (!waiting_.empty() && waiting_.front().deadline <= now)
    pop_waiting()->abort(ResetCode::kPeerGone, "no session to peer " + peer_.name + " within connect_timeout_ms");
  if (needs_dial() && !dial_ && !tcp_beside_ && !shutting_down_ && now >= next_dial_) dial();
  if (tcp_beside_at_ && now >= *tcp_beside_at_) dial_tcp_beside();
  choice_.tick(now);
  if (should_probe_rdma(now)) {
    next_probe_ = now + std::chrono::milliseconds(tunnel_.rdma_probe_interval_ms);
    probing_ = true;
    dial(TransportKind::kRdma);
  }
}

void PeerLink::on_session_open(Session& session) {
  if (&session != active_.get()) return;
  // Up again after it was down (a dial failed, or its session ended); a
  // session that resumed at once logs session_resumed and nothing more.
  if (failures_ > 0) {
    log::info("peer_up")
        .kv("peer", peer_.name)
        .kv("transport", transport_kind_name(session.transport_kind()))
        .kv("after_failures", failures_);
  }
  // A resumed session is the same session: it counts as a resume, not a reconnect.
  if (was_up_ && counters_ && session.counters().resumes == 0) counters_->reconnects.add();
  was_up_ = true;
  last_error_.clear();
  failures_ = 0;
  backoff_ms_ = 0;
  // On TCP in auto: the first try of RDMA one interval from now.
  next_probe_ = loop_.now() + std::chrono::milliseconds(tunnel_.rdma_probe_interval_ms);
  attach_waiting();
}

void PeerLink::on_session_closed(Session& session, SessionEnd end, std::string_view reason) {
  last_close_ = std::string(session_end_name(end)) + ": " + std::string(reason);
  last_used_ = loop_.now();
  if (&session == active_.get()) {
    active_.reset();  // retired: deleted once its transport is done
    choice_.session_ended();
    // On demand with nothing waiting: no session is wanted, so none is
    // dialled, and its end is no failure to retry.
    if (!shutting_down_ && needs_dial()) connect_failed(session.transport_kind(), std::string(reason));
    return;
  }
  std::erase_if(draining_, [&](const IoPtr<Session>& d) { return d.get() == &session; });
}

void PeerLink::on_session_suspended(Session& session) {
  if (&session != active_.get() || shutting_down_) return;
  // Dial at once; the session resumes on whatever comes up first.
  backoff_ms_ = 0;
  next_dial_ = loop_.now();
  // (A move to RDMA suspends and resumes in one step: the session has its
  // new transport already, and the one it left is no failure.)
  if (session.wants_transport()) {
    if (std::optional<Clock::duration> lived = choice_.transport_lost(loop_.now())) {
      // It connected but could not carry: as good as a failed RDMA dial,
      // and in auto the session resumes on TCP as after one.
      if (choice_.falls_back_to_tcp() && connectors_.tcp && !dial_ && !tcp_beside_) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*lived).count();
        std::string reason = "the RDMA transport failed " + std::to_string(ms) +
                             " ms after it came up (under twice tunnel.keepalive_timeout_ms)";
        note_rdma_fallback(reason, reason + "; falling back");
        dial(TransportKind::kTcp);
        return;
      }
    }
  }
  dial();
}

void PeerLink::on_session_draining(Session& session) {
  if (&session != active_.get()) return;
  // Finish its streams there, dial anew now for the next ones.
  draining_.push_back(std::move(active_));
  backoff_ms_ = 0;
  next_dial_ = loop_.now();
  dial();
}

Stream* PeerLink::on_stream_open(Session& session, uint32_t id, std::string_view target, const StreamOrigin*,
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
  dial_.reset();
  tcp_beside_.reset();
  tcp_beside_at_.reset();
  probing_ = false;
  while (!waiting_.empty()) pop_waiting()->abort(ResetCode::kShutdown, "sidecar is shutting down");
}

void PeerLink::end_shutdown() {
  if (retired_ || frozen_) return;
  shutting_down_ = false;  // tick() dials when a stream or always_connected needs it
}

void PeerLink::close_all(std::string_view reason, CloseMode mode) {
  if (active_) active_->close(SessionEnd::kLocalClose, reason, mode);
  for (auto& d : draining_) d->close(SessionEnd::kLocalClose, reason, mode);
}

void PeerLink::retire() {
  retired_ = true;
  begin_shutdown();
  // Its streams finish on it; tick() closes it once it carries none.
  if (active_) draining_.push_back(std::move(active_));
}

std::vector<PendingStream*> PeerLink::take_waiting() {
  std::vector<PendingStream*> out;
  while (!waiting_.empty()) out.push_back(pop_waiting());
  return out;
}

PendingStream* PeerLink::pop_waiting() {
  PendingStream* s = waiting_.front().stream;
  waiting_.pop_front();
  s->waiting_in_ = nullptr;
  return s;
}

void PeerLink::divert_waiting(std::string_view reason) {
  std::deque<Waiting> waiting = std::move(waiting_);
  waiting_.clear();
  size_t diverted = 0;
  for (const Waiting& w : waiting) {
    w.stream->waiting_in_ = nullptr;
    if (w.stream->divert_on_refusal()) {
      ++diverted;
      continue;
    }
    w.stream->waiting_in_ = this;
    waiting_.push_back(w);
  }
  if (diverted) log::info("streams_diverted").kv("peer", peer_.name).kv("streams", diverted).kv("reason", reason);
}

void PeerLink::withdraw(PendingStream* stream) {
  // Rare (a stream ending while it waits): a linear scan is fine.
  std::erase_if(waiting_, [&](const Waiting& w) { return w.stream == stream; });
  stream->waiting_in_ = nullptr;
}

void PeerLink::freeze() {
  frozen_ = true;
  dial_.reset();
  tcp_beside_.reset();
  tcp_beside_at_.reset();
  probing_ = false;
  auto freeze = [](IoPtr<Session>& s) {
    if (s && !s->freeze())
      s->close(SessionEnd::kLocalClose, "takeover: a session without resumption cannot move", CloseMode::kAbort);
  };
  freeze(active_);
  for (auto& d : draining_) freeze(d);
}

void PeerLink::thaw() {
  frozen_ = false;
  if (active_) active_->thaw();
  for (auto& d : draining_) d->thaw();
  // The streams that came in meanwhile get their deadline from now.
  for (auto& w : waiting_) w.deadline = loop_.now() + std::chrono::milliseconds(tunnel_.connect_timeout_ms);
  if (up()) attach_waiting();
  dial();
}

std::vector<Session*> PeerLink::frozen_sessions() const {
  std::vector<Session*> out;
  if (active_ && active_->frozen()) out.push_back(active_.get());
  for (const auto& d : draining_)
    if (d->frozen()) out.push_back(d.get());
  return out;
}

Session* PeerLink::adopt(const SessionImage& image) {
  auto session = make_io<Session>(loop_, pool_, settings_, image, this);
  if (!session->restored_frames()) {
    session->disown();
    session->close(SessionEnd::kOutOfBuffers, "out of buffers for the frames a takeover moved", CloseMode::kAbort);
    return nullptr;
  }
  Session* s = session.get();
  // One session takes new streams; one the peer was draining finishes its own.
  // Draining sessions are not dialed for: they resume only if they are the active one.
  if (active_ || image.goaway_received)
    draining_.push_back(std::move(session));
  else
    active_ = std::move(session);
  was_up_ = true;
  next_dial_ = loop_.now();
  return s;
}

bool PeerLink::finished() const { return !active_ && draining_.empty() && waiting_.empty() && !dial_ && !tcp_beside_; }

std::string_view PeerLink::state_name() const {
  if (retired_) return "removed";
  if (active_ && active_->state() == Session::State::kResuming) return "resuming";
  if (up()) return "up";
  // "down": the last attempt failed and the next waits for its backoff.
  if (failures_ > 0 && !dial_ && !active_) return "down";
  if (!active_ && !dial_ && failures_ == 0 && !peer_.always_connected) return "idle";
  return "connecting";
}

void PeerLink::describe(unsigned worker, PeerInfo* out) const {
  out->name = peer_.name;
  out->configured = !retired_ && !peer_.discovered;
  out->address = peer_.address;
  out->tcp_port = peer_.tcp_port;
  out->rdma_port = peer_.rdma_port;
  out->transport = std::string(transport_kind_name(active_ ? active_->transport_kind() : choice_.preferred()));
  out->transport_reason = choice_.reason();
  out->state = std::string(state_name());
  out->last_error = last_error_;
  out->waiting_streams = waiting_.size();
  out->discovered = peer_.discovered;
  out->connect = peer_.always_connected ? "always" : "on_demand";
  out->last_close = last_close_;
  auto add = [&](const Session& s) {
    SessionInfo info;
    info.worker = worker;
    s.describe(&info);
    out->sessions.push_back(std::move(info));
  };
  if (active_) {
    add(*active_);
    if (auto since = idle_since())
      out->sessions.back().idle_ms =
          std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(loop_.now() - *since).count());
  }
  for (const auto& d : draining_) add(*d);
}

}  // namespace rdmagw::tunnel
