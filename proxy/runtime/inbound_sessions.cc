// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/inbound_sessions.h"

#include <cassert>
#include <utility>

#include "common/log.h"
#include "proxy/runtime/worker.h"
#include "proxy/transport/tcp/tcp_transport.h"

namespace rdmagw {

InboundSessions::InboundSessions(EventLoop& loop, BufferPool& pool, const tunnel::SessionSettings& settings,
                                 unsigned worker, SessionDirectory& directory, metrics::WorkerMetrics& metrics,
                                 StreamOpener opener)
    : loop_(loop),
      pool_(pool),
      settings_(settings),
      worker_(worker),
      directory_(directory),
      metrics_(metrics),
      opener_(std::move(opener)) {}

InboundSessions::~InboundSessions() {
  for (auto& s : sessions_) s->disown();
}

void InboundSessions::accept(IoPtr<tunnel::Transport> transport) {
  sessions_.push_back(
      make_io<tunnel::Session>(loop_, pool_, tunnel::Session::Role::kAcceptor, settings_, std::move(transport), this));
  sessions_.back()->start();
}

tunnel::Session* InboundSessions::adopt_image(const tunnel::SessionImage& image) {
  assert(!image.dialer && "a session this side dialed belongs to its PeerLink");
  auto session = make_io<tunnel::Session>(loop_, pool_, settings_, image, this);
  if (!session->restored_frames()) {
    session->disown();
    session->close(tunnel::SessionEnd::kOutOfBuffers, "out of buffers", tunnel::CloseMode::kAbort);
    return nullptr;
  }
  remember(*session);
  sessions_.push_back(std::move(session));
  return sessions_.back().get();
}

void InboundSessions::remember(tunnel::Session& session) {
  by_token_[session.token()] = &session;
  directory_.add(session.token(), worker_);
}

void InboundSessions::on_session_open(tunnel::Session& session) {
  // A resumable one was counted when it named itself (on_session_identified).
  if (session.resumable()) return;
  if (!room_for(session))
    session.close(tunnel::SessionEnd::kLimit, "tunnel.limits.sessions_per_address reached", tunnel::CloseMode::kAbort);
}

bool InboundSessions::room_for(tunnel::Session& session) {
  uint32_t cap = settings_.tunnel->limits.sessions_per_address;
  std::string host = tunnel::host_of(session.remote_address());
  size_t held = 0;
  tunnel::Session* first_suspended = nullptr;
  for (const auto& s : sessions_) {
    if (s.get() == &session ||
        (s->state() != tunnel::Session::State::kOpen && s->state() != tunnel::Session::State::kResuming))
      continue;
    if (tunnel::host_of(s->remote_address()) != host) continue;
    ++held;
    if (!first_suspended && s->state() == tunnel::Session::State::kResuming) first_suspended = s.get();
  }
  if (held < cap) return true;
  std::string limit = "tunnel.limits.sessions_per_address (" + std::to_string(cap) + ") reached by " + host;
  if (first_suspended) {
    // It waits for a transport that may never come (a peer that opens
    // sessions and drops them), and holds what it kept for a resend.
    metrics_.address_sessions_closed.add();
    first_suspended->close(tunnel::SessionEnd::kLimit, limit + ": closed to make room for a new session",
                           tunnel::CloseMode::kAbort);
    return true;
  }
  metrics_.address_sessions_refused.add();
  uint64_t suppressed = 0;
  if (address_limit_log_.allow(loop_.now(), &suppressed)) {
    log::Line line = log::warn("session_refused");
    line.kv("remote", session.remote_address()).kv("reason", limit + " and none of them is suspended");
    if (suppressed) line.kv("suppressed", suppressed);
  }
  return false;
}

void InboundSessions::on_session_closed(tunnel::Session& session, tunnel::SessionEnd, std::string_view) {
  auto it = by_token_.find(session.token());
  if (it != by_token_.end() && it->second == &session) {
    by_token_.erase(it);
    directory_.remove(session.token(), worker_);
  }
  std::erase_if(sessions_, [&](const IoPtr<tunnel::Session>& s) { return s.get() == &session; });
}

tunnel::Stream* InboundSessions::on_stream_open(tunnel::Session& session, uint32_t id, std::string_view target,
                                                const tunnel::StreamOrigin* origin, tunnel::ResetCode* refuse) {
  return opener_(session, id, target, origin, refuse);
}

bool InboundSessions::on_session_identified(tunnel::Session& session) {
  // A new session from a peer whose suspended sessions came from another
  // instance of its process: that process is gone, and so is any chance
  // of resuming them. Their streams are reset now, not at the timeout.
  // The same peer is the same node name at the same address: the replicas
  // of a Deployment share one ConfigMap, so one node name, and a replica's
  // new session says nothing of another's.
  for (auto& s : sessions_) {
    if (s.get() == &session || s->state() != tunnel::Session::State::kResuming) continue;
    if (s->peer_node() != session.peer_node() || s->token().instance == session.token().instance) continue;
    if (tunnel::host_of(s->remote_address()) != tunnel::host_of(session.remote_address())) continue;
    s->close(tunnel::SessionEnd::kPeerRestarted, "the peer's rdmagw restarted", tunnel::CloseMode::kAbort);
  }
  if (!room_for(session)) return false;
  remember(session);
  return true;
}

tunnel::Session* InboundSessions::find_session(const tunnel::SessionToken& token) {
  auto it = by_token_.find(token);
  return it == by_token_.end() ? nullptr : it->second;
}

bool InboundSessions::token_in_use(const tunnel::SessionToken& token) {
  return by_token_.contains(token) || directory_.holder(token).has_value();
}

bool InboundSessions::resume_elsewhere(const tunnel::SessionPayload& request, const tunnel::HelloPayload& hello,
                                       const tunnel::PeerProof& proof, IoPtr<tunnel::Transport>& transport) {
  auto holder = directory_.holder(request.token);
  if (!holder || *holder == worker_) return false;
  ResumeHandOff hand_off{nullptr, request, hello, transport->remote_address(), proof};
  unsigned to = *holder;
  SessionDirectory* directory = &directory_;
  bool moving = transport->hand_off([hand_off, to, directory](tunnel::MovedConnection moved) mutable {
    hand_off.moved = std::make_shared<tunnel::MovedConnection>(std::move(moved));
    // The task runs on the holder's thread, while its loop runs (so while
    // the Worker exists); if it stopped, the socket closes with the task.
    Worker* target = directory->worker(to);
    if (!target) return;
    directory->post(to, [target, hand_off] { target->adopt_resume(hand_off); });
  });
  if (!moving) return false;
  log::info("session_resume_handed_off").kv("to_worker", to).kv("remote", hand_off.remote);
  transport.reset();  // retired: deleted once its hand-off is done
  return true;
}

void InboundSessions::adopt_resume(const ResumeHandOff& hand_off, bool frozen) {
  tunnel::MovedConnection& moved = *hand_off.moved;
  const TunnelConfig& keys = *settings_.tunnel;
  auto transport = make_io<transport::TcpTransport>(loop_, pool_, std::move(moved.fd), keys.buffer_size,
                                                    hand_off.remote, keys.tcp_splice);
  transport->admit();  // the peer authenticated on the worker that handed it over
  // Memory first: failing once the session has taken the transport would
  // leave it without one mid-resume.
  if (!transport->take_full_buffers() ||
      (moved.sealer && !transport->adopt_ciphers(std::move(moved.sealer), std::move(moved.opener)))) {
    log::warn("session_resume_refused").kv("remote", hand_off.remote).kv("reason", "out of memory");
    transport->close(tunnel::CloseMode::kAbort);
    return;
  }
  tunnel::Session* session = frozen ? nullptr : find_session(hand_off.request.token);
  if (!session || !session->can_resume_from(hand_off.hello, hand_off.request.received)) {
    // It ended meanwhile: the dialer sees the connection close, asks again,
    // and is then told the session is unknown.
    log::warn("session_resume_refused").kv("remote", hand_off.remote).kv("reason", "the session ended meanwhile");
    transport->close(tunnel::CloseMode::kAbort);
    return;
  }
  session->take_over(std::move(transport), hand_off.request.received, false, hand_off.proof);
}

}  // namespace rdmagw
