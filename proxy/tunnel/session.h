#pragma once
// A session multiplexes streams over one transport to one peer sidecar:
// handshake, stream ids, flow control (per stream and per session),
// keepalive, half-close, resets and drain. See docs/protocol.md.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/buffer_pool.h"
#include "common/metrics.h"
#include "proxy/admin/admin_model.h"
#include "proxy/runtime/event_loop.h"
#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/stream_window.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::tunnel {

// The local end of a stream (a socket), as seen by the session.
class StreamEndpoint {
 public:
  virtual ~StreamEndpoint() = default;
  // Payload for the local socket. False: no buffer space; the session then
  // resets the stream (the peer overran nothing, we ran out of memory).
  virtual bool on_data(std::span<const uint8_t> bytes) = 0;
  // The peer saw EOF: shut down our write side once queued bytes are out.
  virtual void on_fin() = 0;
  // The stream is gone (peer RESET, or the session died). The session has
  // forgotten the stream id; the endpoint must not use it again.
  virtual void on_reset(ResetCode code) = 0;
  // Send credit became available after the endpoint found none.
  virtual void on_send_credit() = 0;
  // The session ended after both FINs were exchanged: the stream needs
  // nothing more from it and finishes delivering locally on its own.
  virtual void on_detached() = 0;
};

class Session;

// Control bytes (beyond DATA, which credit bounds) a session may queue
// towards a peer before the peer is deemed not to be reading.
inline constexpr size_t kControlBacklogLimit = 4 * 1024 * 1024;

class SessionOwner {
 public:
  virtual ~SessionOwner() = default;
  virtual void on_session_open(Session& session) = 0;
  // The session is closed; the owner destroys it later (never inside this call).
  virtual void on_session_closed(Session& session, std::string_view reason) = 0;
  virtual void on_goaway(Session& session) = 0;
  // The peer opened a stream. Return its endpoint, or nullptr with *refuse set.
  virtual StreamEndpoint* on_stream_open(Session& session, uint32_t id, std::string_view target,
                                         ResetCode* refuse) = 0;
};

struct SessionSettings {
  std::string node;
  uint32_t max_data = 16 * 1024;
  uint32_t stream_window = 256 * 1024;
  uint64_t session_window = 32ull * 1024 * 1024;
  uint32_t keepalive_interval_ms = 5000;
  uint32_t keepalive_timeout_ms = 15000;
  uint32_t handshake_timeout_ms = 3000;
  metrics::WorkerMetrics* metrics = nullptr;  // the worker's counters (null in unit tests)
  // Label for this session's peer counters: the configured peer name for
  // sessions we dial; empty for accepted ones, which use the HELLO's node.
  std::string peer_label;
};

struct SessionCounters {
  uint64_t frames_in = 0, frames_out = 0;
  uint64_t bytes_in = 0, bytes_out = 0;  // stream payload bytes
  uint64_t streams_opened = 0, streams_refused = 0;
  uint64_t credit_stalls = 0;
};

class Session {
 public:
  enum class Role { kDialer, kAcceptor };
  enum class State { kHandshake, kOpen, kClosed };

  // Takes the transport; it is closed (and frees itself) when the session closes.
  Session(EventLoop& loop, BufferPool& pool, Role role, const SessionSettings& settings,
          Transport* transport, SessionOwner* owner);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start();
  void tick(Clock::time_point now);
  // Ends the session: every stream is reset with kPeerGone. Frames already
  // queued are dropped: for errors and peers that misbehave.
  void close(std::string_view reason) { close(reason, false); }
  // Ends a session that finished its work (drained, shutting down): frames
  // already queued still go out, within a bounded time.
  void close_gracefully(std::string_view reason) { close(reason, true); }
  // Graceful drain: tell the peer to open no more streams here.
  void send_goaway();

  State state() const { return state_; }
  Role role() const { return role_; }
  bool open() const { return state_ == State::kOpen; }
  bool goaway_received() const { return goaway_received_; }
  const std::string& peer_node() const { return peer_node_; }
  std::string_view transport_kind() const;
  size_t stream_count() const { return streams_.size(); }
  const SessionCounters& counters() const { return counters_; }
  int64_t rtt_us() const { return rtt_us_; }
  // For the admin endpoint (GET /peers); the caller sets `worker`.
  void describe(admin::SessionInfo* out) const;

  // --- used by stream endpoints -------------------------------------------
  // Bytes a new stream may carry in its OPEN (min of stream and session credit).
  uint32_t open_credit() const;
  // Opens a stream. `buffer` (may be null) holds `first_len` payload bytes at
  // kBufferHeadroom; it is adopted. first_len must be <= open_credit().
  uint32_t open_stream(StreamEndpoint* endpoint, std::string_view target, uint8_t* buffer,
                       uint32_t first_len);
  // Stream credit for a receive about to be posted: up to `want` bytes.
  // Returns 0 (and calls on_send_credit() later) when the stream has none.
  uint32_t take_stream_credit(uint32_t id, uint32_t want);
  void refund_stream_credit(uint32_t id, uint32_t n);
  // Session credit for `n` bytes already read, taken only right before they
  // are sent, so an idle stream never holds any of the session's budget.
  // False (and on_send_credit() later) when the session has too little.
  bool take_session_credit(uint32_t id, uint32_t n);
  // Sends `len` payload bytes at buffer+kBufferHeadroom (both credits taken
  // before); adopts the buffer.
  void send_data(uint32_t id, uint8_t* buffer, uint32_t len);
  void send_fin(uint32_t id);
  // Resets the stream towards the peer and forgets it.
  void reset_stream(uint32_t id, ResetCode code);
  // `n` bytes of stream `id` left this host (written to the local socket).
  void delivered(uint32_t id, uint32_t n);
  // The endpoint finished both directions cleanly; forget the id.
  void stream_done(uint32_t id);

  // Called by the transport (through the sink adapter).
  bool handle_frame(const FrameHeader& header, std::span<const uint8_t> payload);
  void handle_transport_closed(std::string_view reason);

 private:
  struct StreamState {
    StreamEndpoint* endpoint = nullptr;
    SendCredit send;
    ReceiveWindow receive;
    bool fin_received = false;
    bool fin_sent = false;
    bool wants_credit = false;        // waiting for a stream WINDOW
    bool waits_for_session = false;   // in blocked_streams_
  };
  class Sink : public TransportSink {
   public:
    explicit Sink(Session* s) : session_(s) {}
    bool on_frame(const FrameHeader& h, std::span<const uint8_t> p) override { return session_->handle_frame(h, p); }
    void on_transport_closed(std::string_view reason) override { session_->handle_transport_closed(reason); }

   private:
    Session* session_;
  };

  void close(std::string_view reason, bool flush);
  bool send_hello();
  uint64_t usable_session_credit() const;
  bool protocol_error(std::string reason);
  bool on_hello(std::span<const uint8_t> payload);
  bool on_open(const FrameHeader& h, std::span<const uint8_t> payload);
  bool on_data(const FrameHeader& h, std::span<const uint8_t> payload);
  bool on_window(const FrameHeader& h, std::span<const uint8_t> payload);
  bool is_remote_id(uint32_t id) const { return (id & 1u) == (role_ == Role::kDialer ? 0u : 1u); }
  bool was_opened(uint32_t id) const;
  void forget(std::unordered_map<uint32_t, StreamState>::iterator it);
  void grant_session();
  std::string peer_label() const;
  void send_control(FrameType type, uint32_t id, uint64_t value, size_t value_size);
  void grant(uint32_t id, StreamState* s, uint32_t n);
  void notify_blocked_streams();
  void count_bytes_out(uint64_t n);
  void count_bytes_in(uint64_t n);
  void count_credit_stall();
  void count_stream_opened();
  metrics::Gauge* sessions_gauge() const;
  void count_session_closed();

  EventLoop& loop_;
  BufferPool& pool_;
  Role role_;
  SessionSettings settings_;
  Transport* transport_;
  Sink sink_{this};
  SessionOwner* owner_;
  State state_ = State::kHandshake;
  std::string peer_node_;
  HelloPayload peer_hello_;

  std::unordered_map<uint32_t, StreamState> streams_;
  uint32_t next_local_id_;
  uint32_t highest_remote_id_ = 0;
  SendCredit session_send_;
  // Part of the peer's announced session window we choose not to use: we
  // never queue more than our own budget, whatever the peer offers.
  uint64_t session_send_reserve_ = 0;
  ReceiveWindow session_receive_;
  std::vector<uint32_t> blocked_streams_;
  bool goaway_sent_ = false;
  bool goaway_pending_ = false;     // asked for during the handshake
  std::string failure_;             // set where closing at once is unsafe; tick() closes
  bool goaway_received_ = false;

  Clock::time_point started_;
  Clock::time_point last_receive_;
  Clock::time_point last_ping_;
  bool ping_outstanding_ = false;
  int64_t rtt_us_ = -1;
  SessionCounters counters_;
  Clock::time_point started_wall_;
  metrics::PeerMetrics* peer_metrics_ = nullptr;
  metrics::Gauge* counted_gauge_ = nullptr;  // the sessions gauge this session raised
  bool counted_open_ = false;
};

}  // namespace rdmagw::tunnel
