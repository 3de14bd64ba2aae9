#pragma once
// The dialing side's view of one peer, per worker: keeps one session up
// (reconnecting with exponential backoff), queues streams that arrive while
// it is down, and hands them a session once one is open. A session the peer
// drains (GOAWAY) keeps its streams while new ones go to a fresh session.
#include <linux/time_types.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/buffer_pool.h"
#include "common/unique_fd.h"
#include "config/config.h"
#include "proxy/runtime/event_loop.h"
#include "proxy/transport/rdma/rdma_transport.h"
#include "proxy/tunnel/session.h"

namespace rdmagw::tunnel {

// A local stream waiting for a session.
class PendingStream {
 public:
  virtual ~PendingStream() = default;
  virtual void attach(Session& session) = 0;
  virtual void abort(ResetCode code, std::string_view reason) = 0;
};

// Sessions that ended wait here until the worker's next tick, so that none
// is destroyed while a call on it is still unwinding.
using SessionGraveyard = std::vector<std::unique_ptr<Session>>;

class PeerLink final : public SessionOwner, public transport::RdmaTransport::Observer {
 public:
  // `rdma` is null when this process has no usable RDMA device.
  PeerLink(EventLoop& loop, BufferPool& pool, const PeerConfig& peer, const SessionSettings& settings,
           const TunnelConfig& tunnel, SessionGraveyard& graveyard, transport::RdmaContext* rdma);
  ~PeerLink() override;
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  const std::string& name() const { return peer_.name; }
  bool up() const { return active_ && active_->open(); }
  void start();
  void tick(Clock::time_point now);
  void submit(PendingStream* stream);
  // Shutdown: stop dialing, fail waiting streams, tell the peer we drain.
  void begin_shutdown();
  // Closes every session (streams on them are reset).
  void close_all(std::string_view reason);
  // The peer left the configuration: open nothing new, let open streams
  // finish on their sessions, then close them. The worker frees the link
  // once finished().
  void retire();
  bool finished() const;
  // The streams still waiting for a session, handed over (to the link that
  // replaces this one on a reload); the link forgets them.
  std::vector<PendingStream*> take_waiting();
  // For the admin endpoint (GET /peers): this worker's view of the peer.
  void describe(unsigned worker, admin::PeerInfo* out) const;
  const PeerConfig& config() const { return peer_; }

  // SessionOwner
  void on_session_open(Session& session) override;
  void on_session_closed(Session& session, std::string_view reason) override;
  void on_goaway(Session& session) override;
  StreamEndpoint* on_stream_open(Session& session, uint32_t id, std::string_view target,
                                 ResetCode* refuse) override;

  // RdmaTransport::Observer
  void on_rdma_established(transport::RdmaTransport* transport) override;
  void on_rdma_failed(transport::RdmaTransport* transport, std::string_view reason) override;

 private:
  void dial();
  bool use_rdma() const;
  void dial_rdma();
  void rdma_dial_failed(std::string reason);
  void dial_tcp();
  void open_session(Transport* transport);
  void on_connect(int res, uint32_t flags);
  void on_connect_timeout(int res, uint32_t flags);
  void connect_failed(std::string reason);
  void schedule_retry();

  EventLoop& loop_;
  BufferPool& pool_;
  PeerConfig peer_;
  SessionSettings settings_;
  TunnelConfig tunnel_;
  SessionGraveyard& graveyard_;

  std::unique_ptr<Session> active_;
  std::vector<std::unique_ptr<Session>> draining_;
  struct Waiting {
    PendingStream* stream;
    Clock::time_point deadline;
  };
  std::deque<Waiting> waiting_;

  UniqueFd dial_fd_;
  IoOp connect_op_, timeout_op_;
  __kernel_timespec dial_timeout_{};
  int dial_ops_ = 0;
  bool dialing_ = false;
  bool shutting_down_ = false;
  bool was_up_ = false;
  Clock::time_point next_dial_;
  uint32_t backoff_ms_ = 0;
  uint32_t failures_ = 0;

  transport::RdmaContext* rdma_;
  transport::RdmaTransport* rdma_dialing_ = nullptr;
  uint32_t rdma_failures_ = 0;   // consecutive; in auto, 3 of them switch the peer to TCP
  std::string last_transport_;   // logged when the choice changes
  std::string transport_reason_; // why the last session used its transport
  std::string last_error_;       // last dial failure, cleared when a session opens
  bool retired_ = false;
  metrics::PeerMetrics* counters_ = nullptr;
};

}  // namespace rdmagw::tunnel
