// SPDX-License-Identifier: Apache-2.0
// Resumption: how a resumable session outlives its transport. The state
// machine and the exchange are in docs/protocol.md ("Resumption").
//
// Each side counts the session frame bytes it took in from the other
// (received_): those bytes are processed and their effects are held by the
// session and its streams, which survive the transport. Each side keeps the
// frames it sent until the peer's ACK covers them. A new transport starts
// with HELLO and SESSION, which carry the counts; each side then rewinds its
// queue to what the other has and resends the rest, in order. Nothing is
// recomputed: windows, stream states and ids go on as if the transport had
// never changed.
#include <algorithm>
#include <cassert>

#include "common/log.h"
#include "proxy/tunnel/session.h"

namespace rdmagw::tunnel {

bool Session::same_settings(const HelloPayload& hello) const {
  return hello.node == peer_hello_.node && hello.max_data == peer_hello_.max_data &&
         hello.stream_window == peer_hello_.stream_window && hello.session_window == peer_hello_.session_window &&
         (hello.capabilities & kCapResume);
}

bool Session::send_session(SessionKind kind) {
  uint8_t* out = transport_->outbound().handshake().append_contiguous(kHeaderSize + kSessionPayloadSize);
  if (!out) {
    close(SessionEnd::kOutOfBuffers, "out of buffers", CloseMode::kAbort);
    return false;
  }
  encode_session(out, SessionPayload{token_, kind, received_});
  ++tally_.totals().frames_out;
  transport_->request_send();
  return true;
}

void Session::attach_frames() {
  transport_->outbound().attach(frames_);
  frames_attached_ = true;
  transport_->request_send();
}

void Session::link_ready() {
  link_ = Link::kReady;
  if (!frames_attached_) attach_frames();
}

bool Session::on_session(std::span<const uint8_t> payload) {
  std::string reason;
  SessionPayload got;
  if (!decode_session(payload, &got, &reason)) return protocol_error(reason);
  if (role_ == Role::kAcceptor) return on_session_as_acceptor(got);
  if (got.token != token_) return protocol_error("SESSION answer names another session");
  if (state_ == State::kOpen && got.kind == SessionKind::kAccepted) {
    link_ = Link::kReady;  // a new session: our frames already flow
    return true;
  }
  if (state_ == State::kResuming && got.kind == SessionKind::kResumed) {
    if (!resend_from(got.received)) return false;
    link_ready();
    resumed();
    return true;
  }
  if (state_ == State::kResuming && got.kind == SessionKind::kUnknown) {
    close(SessionEnd::kResumeRefused,
          "the peer does not know the session (its rdmagw restarted, or it ended the session)", CloseMode::kAbort);
    return false;
  }
  return protocol_error(std::string("unexpected SESSION ") + std::string(session_kind_name(got.kind)));
}

bool Session::on_session_as_acceptor(const SessionPayload& request) {
  if (request.kind == SessionKind::kNew && owner_ && owner_->token_in_use(request.token))
    return protocol_error("SESSION new names the token of a session held here");
  token_ = request.token;
  if (request.kind == SessionKind::kNew) {
    if (owner_ && !owner_->on_session_identified(*this)) {
      close(SessionEnd::kLimit, "tunnel.limits.sessions_per_address reached", CloseMode::kAbort);
      return false;
    }
    if (!send_session(SessionKind::kAccepted)) return false;
    link_ready();
    open_now();
    return true;
  }
  if (request.kind != SessionKind::kResume)
    return protocol_error(std::string("unexpected SESSION ") + std::string(session_kind_name(request.kind)));
  Session* existing = owner_ ? owner_->find_session(request.token) : nullptr;
  if (!existing && owner_ && owner_->resume_elsewhere(request, peer_hello_, peer_proof_, transport_)) {
    // Another worker holds the session: the connection went there.
    handed_off_ = true;
    link_ = Link::kNone;
    close(SessionEnd::kLocalClose, "handed to the worker holding the session", CloseMode::kAbort);
    return true;
  }
  if (!existing || existing == this || !existing->can_resume_from(peer_hello_, request.received)) {
    log::warn("session_resume_refused")
        .kv("peer", peer_label())
        .kv("remote", remote_address_)
        .kv("reason", existing ? "the peer's request does not match the session" : "no such session here");
    if (!send_session(SessionKind::kUnknown)) return false;
    link_ready();  // the answer goes out before the close
    close(SessionEnd::kResumeRefused, "resume of an unknown session refused", CloseMode::kFlush);
    return false;
  }
  // This session was only a shell for the handshake: the transport, and the
  // frames that follow on it, belong to the session it resumes.
  handed_off_ = true;
  existing->take_over(std::move(transport_), request.received, true, std::move(peer_proof_));
  link_ = Link::kNone;
  close(SessionEnd::kLocalClose, "handed over to the session it resumes", CloseMode::kAbort);
  return true;
}

bool Session::can_resume_from(const HelloPayload& hello, uint64_t peer_received) const {
  if (frozen_ || state_ == State::kClosed || state_ == State::kHandshake || !resumable_ || role_ != Role::kAcceptor)
    return false;
  return same_settings(hello) && peer_received >= peer_acked_ && peer_received >= frames_->base_offset() &&
         peer_received <= frames_->end_offset();
}

void Session::take_over(IoPtr<Transport> transport, uint64_t peer_received, bool started, PeerProof proof) {
  assert(!parsing_);
  peer_proof_ = std::move(proof);
  auth_.reset();  // the new transport was authenticated by the session that had it
  if (transport_) {
    // The dialer gave up on the old transport before we noticed: so do we.
    transport_->close(CloseMode::kAbort);
    old_transports_.push_back(std::move(transport_));
  }
  if (state_ == State::kOpen) mark_suspended();
  state_ = State::kResuming;
  frames_attached_ = false;
  transport_ = std::move(transport);
  transport_kind_ = transport_->kind();
  remote_address_ = transport_->remote_address();
  if (started)
    transport_->rebind(this);
  else
    transport_->start(this);
  if (!send_session(SessionKind::kResumed)) return;
  if (!resend_from(peer_received)) return;
  link_ready();
  resumed();
}

bool Session::resend_from(uint64_t peer_received) {
  if (peer_received < peer_acked_ || peer_received < frames_->base_offset() || peer_received > frames_->end_offset())
    return protocol_error("resume from offset " + std::to_string(peer_received) + " outside the kept frames " +
                          std::to_string(frames_->base_offset()) + ".." + std::to_string(frames_->end_offset()));
  uint64_t sent = frames_->sent_offset();
  frames_->rewind_to(peer_received);
  peer_acked_ = peer_received;
  if (sent > peer_received) {
    uint64_t again = sent - peer_received;
    tally_.totals().resent_bytes += again;
    if (settings_.metrics) settings_.metrics->resent_bytes.add(again);
  }
  apply_acks();
  return true;
}

void Session::resumed() {
  ++tally_.totals().resumes;
  if (settings_.metrics)
    settings_.metrics->session_resumes[static_cast<size_t>(suspended_kind_)][static_cast<size_t>(transport_kind_)]
        .add();
  state_ = State::kOpen;
  last_receive_ = last_ping_ = loop().now();
  // The gauge follows the transport, which may be of another kind now.
  tally_.count_closed();
  tally_.count_open(transport_kind_);
  log::info("session_resumed")
      .kv("peer", peer_label())
      .kv("transport", transport_kind_name(transport_kind_))
      .kv("role", role_ == Role::kDialer ? "dialer" : "acceptor")
      .kv("remote", remote_address_)
      .kv("streams", streams_.size())
      .kv("suspended_ms", std::chrono::duration_cast<std::chrono::milliseconds>(loop().now() - suspended_at_).count())
      .kv("resend_bytes", frames_->size());
  kick();
  notify_blocked_streams();
  owner_events_ |= kOwnerOpen;
  request_dispatch();
}

void Session::resume(IoPtr<Transport> transport) {
  assert(role_ == Role::kDialer && wants_transport());
  transport_ = std::move(transport);
  transport_kind_ = transport_->kind();
  remote_address_ = transport_->remote_address();
  link_ = Link::kHello;
  link_started_ = loop().now();
  transport_->start(this);
  if (!send_hello()) close(SessionEnd::kOutOfBuffers, "out of buffers", CloseMode::kAbort);
}

void Session::move_to(IoPtr<Transport> transport, std::string_view reason) {
  assert(role_ == Role::kDialer && state_ == State::kOpen && resumable_ && !frozen_ && !parsing_);
  suspend(reason);
  resume(std::move(transport));
}

void Session::mark_suspended() {
  suspended_at_ = loop().now();
  suspended_kind_ = transport_kind_;
}

void Session::count_transport_loss(metrics::TransportLoss loss) {
  // A transport that fails in the handshake never carried the session: the
  // dial's failure is logged, and is no loss.
  if (!settings_.metrics || state_ == State::kHandshake || state_ == State::kClosed) return;
  settings_.metrics->transport_losses[static_cast<size_t>(transport_kind_)][static_cast<size_t>(loss)].add();
}

void Session::lose_transport(SessionEnd why, std::string_view reason) {
  if (!resumable_ || peer_closing_ || state_ == State::kHandshake || state_ == State::kClosed) {
    // A peer that said GOAWAY(closing) meant it (drained, idle, shutting down).
    close(why, peer_closing_ ? "the peer closed the session" : reason, CloseMode::kAbort);
    return;
  }
  suspend(reason);
}

void Session::suspend(std::string_view reason) {
  deliver_gathered();                    // before the transport goes: the pieces live in its buffer
  if (state_ == State::kClosed) return;  // a delivery ran out of buffers and closed it
  if (state_ == State::kOpen) mark_suspended();
  state_ = State::kResuming;
  drop_transport();
  log::info("session_suspended")
      .kv("peer", peer_label())
      .kv("role", role_ == Role::kDialer ? "dialer" : "acceptor")
      .kv("streams", streams_.size())
      .kv("unacknowledged_bytes", frames_->retained() + frames_->size())
      .kv("reason", reason);
  owner_events_ |= kOwnerSuspended;
  request_dispatch();
}

void Session::drop_transport() {
  deliver_gathered();  // the pieces live in the transport's buffer
  auth_.reset();       // it writes to the transport
  if (transport_) {
    transport_->close(CloseMode::kAbort);
    old_transports_.push_back(std::move(transport_));
  }
  link_ = Link::kNone;
  frames_attached_ = false;
}

void Session::apply_acks() {
  // A closed transport may still have a send in flight from the kept bytes:
  // they are released once it has none (it is dropped then).
  std::erase_if(old_transports_, [](const IoPtr<Transport>& t) { return t->ops_in_flight() == 0; });
  if (!old_transports_.empty() || !frames_->retaining()) return;
  uint64_t to = std::min(peer_acked_, frames_->sent_offset());
  if (to > frames_->base_offset()) frames_->release_to(to);
}

bool Session::on_ack(const FrameHeader& h, std::span<const uint8_t> payload) {
  std::string reason;
  uint64_t value;
  if (!decode_u64(h, payload, &value, &reason)) return protocol_error(reason);
  if (!resumable_) return protocol_error("ACK on a session without resumption");
  if (value > frames_->end_offset())
    return protocol_error("ACK of " + std::to_string(value) + " beyond the " + std::to_string(frames_->end_offset()) +
                          " bytes sent");
  // An ACK older than the resume exchange may come in the peer's resent
  // frames: it tells nothing new.
  if (value <= peer_acked_) return true;
  peer_acked_ = value;
  apply_acks();
  notify_blocked_streams();  // what was kept for a resend bounds their credit
  return true;
}

void Session::maybe_ack(bool timer) {
  if (!resumable_ || state_ != State::kOpen || link_ != Link::kReady || received_ == ack_sent_) return;
  // Often enough under load that the peer's kept bytes stay near what is in
  // flight; on an idle session, once per keepalive interval.
  bool due = timer ? loop().now() - last_ack_ >= std::chrono::milliseconds(settings_.tunnel->keepalive_interval_ms)
                   : ack_due_by_volume();
  if (!due) return;
  ack_sent_ = received_;
  last_ack_ = loop().now();
  send_control(FrameType::kAck, 0, received_, 8);
}

}  // namespace rdmagw::tunnel
