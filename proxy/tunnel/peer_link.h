// SPDX-License-Identifier: Apache-2.0
#pragma once
// The dialing side's view of one peer, per worker: keeps one session up
// (reconnecting with exponential backoff), queues streams that arrive while
// it is down, and hands them a session once one is open. A session that
// takes no new streams (the peer drains it with GOAWAY, or its stream ids ran
// out) keeps its streams while new ones go to a fresh session.
//
// It dials through the transports' Connectors only (transport.h): which
// transport each dial uses, and why, its TransportChoice says; how to dial
// is the connectors'.
//
// Why one class of this size (about 60 methods): it is the state machine
// of one peer's dials and sessions, whose parts move together on every
// event: a dial, a TCP dial racing a slow RDMA one, an RDMA probe beside
// an open session, a suspended session waiting for a transport, sessions
// draining, waiting streams with their deadlines, a takeover's freeze. A
// dial's outcome, a session's open, suspension, drain or end, and each
// tick touch several of them at once. What stands alone is outside: the
// choice of transport (TransportChoice), the budgets (SessionBudget), the
// sessions (Session).
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/buffer_pool.h"
#include "config/config.h"
#include "proxy/io/event_loop.h"
#include "proxy/tunnel/session.h"
#include "proxy/tunnel/transport.h"
#include "proxy/tunnel/transport_choice.h"
#include "proxy/tunnel/tunnel_info.h"

namespace rdmagw::tunnel {

class PeerLink;

// A local stream waiting for a session. It knows the link it waits in, so
// that a stream ending for another reason (a reset at the end of a drain)
// leaves the queue instead of staying there to be called once freed.
class PendingStream {
 public:
  // Open on `session` (open, able to open streams). Never called while the
  // session parses.
  virtual void attach(Session& session) = 0;
  virtual void abort(ResetCode code, std::string_view reason) = 0;
  // The peer's tunnel port refused the link's dial, and the link has no
  // session: nothing there speaks the tunnel. A stream that can reach its
  // destination another way (a Service endpoint, directly) goes there and
  // returns true, out of the queue; the others keep waiting.
  virtual bool divert_on_refusal() { return false; }

 protected:
  PendingStream() = default;
  virtual ~PendingStream() { stop_waiting(); }
  // Leaves the link's queue, if in one. The stream calls it when it ends.
  void stop_waiting();

 private:
  friend class PeerLink;
  PeerLink* waiting_in_ = nullptr;
};

// Whether a link may open one more session (tunnel.max_sessions): the
// worker counts its links' sessions and may close an idle one of another
// link to make room. Asked before a new session is dialled, never for a
// resume or a move to RDMA (those replace a transport, not add a session).
class SessionBudget {
 public:
  virtual bool make_room_for_session(const PeerLink& link) = 0;
  // tunnel.sessions_per_peer: whether this worker may hold a session to the
  // link's peer (other workers may hold the ones allowed). Asked first; a
  // link told no dials nothing and tries again later, quietly.
  virtual bool may_hold_session(const PeerLink&) { return true; }

  // Whether one more RDMA transport fits in tunnel.rdma.max_pinned. If not,
  // the worker may close an idle RDMA session of another link: kSoon, room
  // once that one has closed. Asked before an RDMA dial that adds a
  // transport (not a resume, which replaces one); the worker logs and counts
  // what the link does instead (TCP in auto, wait or refuse in rdma).
  enum class RdmaRoom { kYes, kSoon, kNo };
  virtual RdmaRoom make_room_for_rdma(const PeerLink&) { return RdmaRoom::kYes; }
  // The same question without closing anything (a move to RDMA may wait).
  virtual bool has_rdma_room() const { return true; }

 protected:
  ~SessionBudget() = default;
};

// The connectors a link may dial with; rdma is null when this process has no
// usable RDMA device.
struct Connectors {
  Connector* tcp = nullptr;
  Connector* rdma = nullptr;
};

class PeerLink final : public SessionOwner, private DialObserver {
 public:
  PeerLink(EventLoop& loop, BufferPool& pool, const PeerConfig& peer, const SessionSettings& settings,
           const TunnelConfig& tunnel, Connectors connectors, SessionBudget* budget = nullptr);
  ~PeerLink() override;
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  const std::string& name() const { return peer_.name; }
  bool up() const { return active_ && active_->can_open_streams(); }
  // connect: always dials now; on_demand waits for a stream.
  void start();
  void tick(Clock::time_point now);
  // A reload's new tunnel.session_idle_ms and tunnel.rdma_share (new
  // sessions, and moves to RDMA, follow it).
  void set_session_idle_ms(uint32_t ms) { tunnel_.session_idle_ms = ms; }
  void set_rdma_share(uint32_t percent) { tunnel_.rdma_share = percent; }
  // tunnel.rdma_share: in auto, whether this peer is among the share whose
  // sessions use RDMA. Stable for a pair of hosts (a hash of this node's
  // name and the peer's address), so raising the share only adds peers.
  bool in_rdma_share() const { return choice_.in_rdma_share(); }
  // Sessions this link holds (active and draining): what max_sessions counts.
  size_t session_count() const { return (active_ ? 1 : 0) + draining_.size(); }
  // Its active session carries no stream and no stream waits: since when
  // (nullopt while busy, or without a session). Closing it loses nothing.
  std::optional<Clock::time_point> idle_since() const;
  // On demand, its active session open with no stream on it or waiting.
  bool carries_nothing() const;
  // Closes the active session if idle_since() (the worker makes room for
  // another peer's session); `why` is what /peers and the log say.
  bool close_if_idle(std::string_view why);
  // The transport of its active session (nullopt without one).
  std::optional<TransportKind> active_transport() const;
  // On-demand and without sessions, dial or waiting stream: the worker may
  // forget a discovered link in this state.
  bool dormant() const { return !peer_.always_connected && finished(); }
  Clock::time_point last_used() const { return last_used_; }
  // When its last TCP dial was refused (nothing listens on the peer's
  // tunnel port), if no connect has succeeded since: no rdmagw is there, as
  // far as this link knows. A Service endpoint said to have one is then
  // reached directly (ConnectionRouter::route_to_service).
  std::optional<Clock::time_point> refused_at() const { return refused_at_; }
  void submit(PendingStream* stream);
  // Shutdown: stop dialing, fail waiting streams. (GOAWAY is the acceptor's
  // word; the dialer simply opens nothing new and lets its streams finish.)
  void begin_shutdown();
  // The shutdown was a drain that is undone: dial again when needed (a
  // retired link stays retired).
  void end_shutdown();
  // Closes every session; their streams are detached (and reset).
  void close_all(std::string_view reason, CloseMode mode);
  // The peer left the configuration: open nothing new, let open streams
  // finish on their sessions, then close them. The worker frees the link
  // once finished().
  void retire();
  bool finished() const;
  // The streams still waiting for a session, handed over (to the link that
  // replaces this one on a reload); the link forgets them.
  std::vector<PendingStream*> take_waiting();
  // `stream` no longer waits (it ended): forget it.
  void withdraw(PendingStream* stream);

  // --- a takeover (docs/operations.md, "Takeover") ----------------------------
  // Old process: stops dialing and attaching; freezes its sessions, closing
  // those that cannot move (their streams are reset).
  void freeze();
  // The takeover failed: carry on.
  void thaw();
  // Old process: the frozen sessions, for the worker's image.
  std::vector<Session*> frozen_sessions() const;
  // New process: the old process's session to this peer, suspended; it
  // resumes over the next dial. Null if it could not be rebuilt.
  Session* adopt(const SessionImage& image);
  // This worker's view of the peer (GET /peers).
  void describe(unsigned worker, PeerInfo* out) const;
  // removed | resuming | up | down (the last dial failed: last_error()) |
  // idle (on demand, nothing to carry) | connecting.
  std::string_view state_name() const;
  // Calls f(Session&) for each session it holds (active and draining).
  template <class F>
  void for_each_session(F&& f) const {
    if (active_) f(*active_);
    for (const auto& d : draining_) f(*d);
  }
  const PeerConfig& config() const { return peer_; }
  // How many dials failed in a row (tests, logs).
  uint32_t consecutive_failures() const { return failures_; }
  const std::string& last_error() const { return last_error_; }

  // SessionOwner
  void on_session_open(Session& session) override;
  void on_session_closed(Session& session, SessionEnd end, std::string_view reason) override;
  void on_session_draining(Session& session) override;
  void on_session_suspended(Session& session) override;
  Stream* on_stream_open(Session& session, uint32_t id, std::string_view target, const StreamOrigin* origin,
                         ResetCode* refuse) override;

 private:
  // DialObserver
  void on_dialed(IoPtr<Transport> transport) override;
  void on_dial_failed(std::string_view reason, bool refused) override;

  void dial();
  void dial(TransportKind kind);
  // Happy Eyeballs (tcp_beside_, TransportChoice::tcp_head_start_ms):
  // start it once due; its outcome.
  void dial_tcp_beside();
  void on_tcp_beside_dialed(IoPtr<Transport> transport);
  void on_tcp_beside_failed(std::string_view reason, bool refused);
  // A dial succeeded (either kind, either slot): the session goes on over it.
  void use_transport(IoPtr<Transport> transport, bool probe);
  // auto: the session runs on TCP although this host has RDMA, and may move
  // (resumable, the peer places RDMA connects): time to try RDMA again.
  bool should_probe_rdma(Clock::time_point now) const;
  void probe_failed(std::string_view reason);
  void dial_failed(TransportKind kind, std::string reason, bool refused);
  // No session (and one is wanted: connect: always, or streams wait), or
  // one suspended that waits for a transport.
  bool needs_dial() const { return active_ ? active_->wants_transport() : peer_.always_connected || !waiting_.empty(); }
  // Dials a new session if the budget has room; otherwise fails the
  // waiting streams.
  void dial_new_session(TransportKind kind);
  void open_session(IoPtr<Transport> transport);
  void connect_failed(TransportKind kind, std::string reason);
  void schedule_retry();
  void attach_waiting();
  // Takes the oldest waiting stream off the queue.
  PendingStream* pop_waiting();
  // A refused dial: the waiting streams that can go another way do.
  void divert_waiting(std::string_view reason);

  EventLoop& loop_;
  BufferPool& pool_;
  PeerConfig peer_;
  SessionSettings settings_;
  TunnelConfig tunnel_;
  Connectors connectors_;
  SessionBudget* budget_;
  TransportChoice choice_;  // which transport each dial uses, and why (reads tunnel_)

  IoPtr<Session> active_;
  std::vector<IoPtr<Session>> draining_;
  struct Waiting {
    PendingStream* stream;
    Clock::time_point deadline;
  };
  std::deque<Waiting> waiting_;

  std::unique_ptr<Dial> dial_;  // an attempt in progress
  TransportKind dialing_kind_ = TransportKind::kTcp;
  // auto: a TCP dial beside an RDMA one that has not connected within
  // tunnel.rdma_head_start_ms (Happy Eyeballs); whichever completes first
  // carries the session, and the other is cancelled.
  class HeadStartObserver final : public DialObserver {
   public:
    explicit HeadStartObserver(PeerLink& link) : link_(link) {}
    void on_dialed(IoPtr<Transport> transport) override { link_.on_tcp_beside_dialed(std::move(transport)); }
    void on_dial_failed(std::string_view reason, bool refused) override { link_.on_tcp_beside_failed(reason, refused); }

   private:
    PeerLink& link_;
  };
  HeadStartObserver head_start_observer_{*this};
  std::unique_ptr<Dial> tcp_beside_;
  std::optional<Clock::time_point> tcp_beside_at_;  // when to dial it, while the RDMA dial is pending
  bool shutting_down_ = false;
  bool was_up_ = false;
  Clock::time_point next_dial_;
  uint32_t backoff_ms_ = 0;
  uint32_t failures_ = 0;

  // In auto: logs transport_fallback (from rdma to tcp) and says why in /peers.
  void note_rdma_fallback(const std::string& reason, std::string transport_reason);
  bool probing_ = false;  // dial_ is an RDMA connect for a session open on TCP
  Clock::time_point next_probe_;
  std::string last_transport_;   // logged when the choice changes
  std::string last_error_;       // last dial failure, cleared when a session opens
  std::string last_close_;       // why the last session ended ("" if none has)
  Clock::time_point last_used_;  // a stream was carried or waited last (discovered links are forgotten after)
  std::optional<Clock::time_point> idle_since_;
  std::optional<Clock::time_point> refused_at_;
  bool retired_ = false;
  bool frozen_ = false;  // a takeover: no dial, no attach
  metrics::PeerMetrics* counters_ = nullptr;
};

}  // namespace rdmagw::tunnel
