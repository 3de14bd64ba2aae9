// SPDX-License-Identifier: Apache-2.0
#pragma once
// The sessions peers dialed to one worker, and their owner
// (tunnel::SessionOwner): tunnel.limits.sessions_per_address, the
// resumable ones by token (registered with the process's SessionDirectory,
// so that a resume landing on another worker is handed here), and a new
// session from a restarted peer ending the ones its old process left. The
// streams these sessions' peers open go to the worker (StreamOpener): which
// targets are allowed, and how they are reached, are its to decide.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/buffer_pool.h"
#include "common/log_limiter.h"
#include "common/metrics.h"
#include "proxy/io/event_loop.h"
#include "proxy/io/io_object.h"
#include "proxy/runtime/session_directory.h"
#include "proxy/tunnel/session.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw {

// A connection another worker accepted that asks to resume a session held
// here, with what its handshake there established.
struct ResumeHandOff {
  std::shared_ptr<tunnel::MovedConnection> moved;  // the socket (and ciphers, when encrypted)
  tunnel::SessionPayload request;
  tunnel::HelloPayload hello;
  std::string remote;
  tunnel::PeerProof proof;  // what the peer proved itself with on that connection
};

class InboundSessions final : public tunnel::SessionOwner {
 public:
  // A stream a peer opens on one of these sessions: the worker's to accept
  // (a stream to its target) or refuse (null, with *refuse).
  using StreamOpener = std::function<tunnel::Stream*(tunnel::Session& session, uint32_t id, std::string_view target,
                                                     const tunnel::StreamOrigin* origin, tunnel::ResetCode* refuse)>;
  // `settings` (the worker's) outlive this; `worker`: its index in `directory`.
  InboundSessions(EventLoop& loop, BufferPool& pool, const tunnel::SessionSettings& settings, unsigned worker,
                  SessionDirectory& directory, metrics::WorkerMetrics& metrics, StreamOpener opener);
  // Sessions still here are let go of without a word to them (the worker is
  // ending; their transports are torn down with the loop).
  ~InboundSessions() override;
  InboundSessions(const InboundSessions&) = delete;
  InboundSessions& operator=(const InboundSessions&) = delete;

  // A peer dialed this worker: a session on `transport`, in its handshake.
  void accept(IoPtr<tunnel::Transport> transport);
  // A takeover: a session of the old process, rebuilt here; null (closed)
  // if its kept frames do not fit in the pool.
  tunnel::Session* adopt_image(const tunnel::SessionImage& image);
  // Another worker handed over a connection that resumes a session held
  // here. `frozen`: a takeover is under way, and no session may resume.
  void adopt_resume(const ResumeHandOff& hand_off, bool frozen);

  template <class F>
  void for_each(F&& f) {
    for (auto& s : sessions_) f(*s);
  }
  template <class F>
  void for_each(F&& f) const {
    for (const auto& s : sessions_) f(static_cast<const tunnel::Session&>(*s));
  }

  // tunnel::SessionOwner.
  void on_session_open(tunnel::Session& session) override;
  void on_session_closed(tunnel::Session& session, tunnel::SessionEnd end, std::string_view reason) override;
  // The dialer drains: its open streams finish here, it opens no more.
  void on_session_draining(tunnel::Session&) override {}
  tunnel::Stream* on_stream_open(tunnel::Session& session, uint32_t id, std::string_view target,
                                 const tunnel::StreamOrigin* origin, tunnel::ResetCode* refuse) override;
  bool on_session_identified(tunnel::Session& session) override;
  tunnel::Session* find_session(const tunnel::SessionToken& token) override;
  bool token_in_use(const tunnel::SessionToken& token) override;
  bool resume_elsewhere(const tunnel::SessionPayload& request, const tunnel::HelloPayload& hello,
                        const tunnel::PeerProof& proof, IoPtr<tunnel::Transport>& transport) override;

 private:
  // tunnel.limits.sessions_per_address: whether `session`, new from a peer,
  // may stay; makes room by closing that address's first suspended session.
  bool room_for(tunnel::Session& session);
  void remember(tunnel::Session& session);  // a resumable session, by its token

  EventLoop& loop_;
  BufferPool& pool_;
  const tunnel::SessionSettings& settings_;
  unsigned worker_;
  SessionDirectory& directory_;
  metrics::WorkerMetrics& metrics_;
  StreamOpener opener_;
  std::vector<IoPtr<tunnel::Session>> sessions_;
  // Resumable sessions by token: where a resume request finds its session.
  std::unordered_map<tunnel::SessionToken, tunnel::Session*, tunnel::SessionTokenHash> by_token_;
  log::LogLimiter address_limit_log_{1, 5};  // session_refused lines
};

}  // namespace rdmagw
