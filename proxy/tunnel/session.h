// SPDX-License-Identifier: Apache-2.0
#pragma once
// A session carries streams over one transport to one peer sidecar: it
// frames and multiplexes them, keeps the session-wide credit, and runs the
// handshake, keepalive and drain. It owns no stream: each Stream owns its
// state and holds a handle to the session carrying it, and a session can be
// detached from its streams (they survive it). See docs/protocol.md.
//
// Frames from the transport are handled in steps, so that frame handling
// never re-enters the session: while parsing, the session updates protocol
// state and keeps the payloads for their streams; at the end of the
// transport's batch (on_frames_end) it hands each stream its payloads
// (Stream::on_peer_data); every other consequence (a stream's FIN, reset,
// new credit, the session's end, notices to the owner) is queued and
// dispatched at the end of the loop batch (flush()), when the session is
// neither parsing nor delivering.
//
// A resumable session (both HELLOs carry kCapResume) outlives its transport:
// every frame after the handshake goes to the session's own queue, kept
// until the peer's ACK says it arrived. When the transport fails, the
// session is suspended (its streams notice nothing but a pause), the dialer
// dials again and both sides resend from where the other stopped receiving
// (docs/protocol.md, "Resumption"). session_resume.cc holds that part.
//
// Why one class of this size (about 110 methods in four files: session.cc
// for frames and streams, session_auth.cc, session_resume.cc,
// session_handover.cc for a takeover): the handshake, resumption and a
// takeover act on one transport, one frame queue, one stream table and one
// credit, at points the protocol interleaves (AUTH between the HELLOs,
// SESSION before the first DATA, a resume resending from the kept queue).
// What stands alone is outside: the authentication exchange
// (AuthExchange; the session lets nothing past its link before the proofs,
// and admits the peer or ends the transport as each step says), a batch's payloads
// (PayloadBatch), credit (SendCredit, ReceiveWindow), parsing (FrameReader,
// deliver_frames), counting (SessionTally), keys (AuthKeyring), the
// takeover's state (SessionImage).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/buffer_pool.h"
#include "common/log_limiter.h"
#include "common/metrics.h"
#include "common/token_bucket.h"
#include "config/config.h"
#include "proxy/io/event_loop.h"
#include "proxy/tunnel/auth_exchange.h"
#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/payload_batch.h"
#include "proxy/tunnel/peer_auth.h"
#include "proxy/tunnel/session_image.h"
#include "proxy/tunnel/session_tally.h"
#include "proxy/tunnel/stream.h"
#include "proxy/tunnel/stream_window.h"
#include "proxy/tunnel/transport.h"
#include "proxy/tunnel/tunnel_info.h"

namespace rdmagw::tunnel {

class Session;

// Control bytes (beyond DATA, which credit bounds) a session may queue
// towards a peer before the peer is deemed not to be reading.
inline constexpr size_t kControlBacklogLimit = 4 * 1024 * 1024;
// DATA payloads up to this size are copied into the session's frame queue
// (Session::send_data); larger ones are queued in the buffer they came in.
inline constexpr uint32_t kCopyDataUpTo = 1024;
// Stream ids are odd for the dialer, even for the acceptor, never reused.
inline constexpr uint32_t kMaxStreamId = 0x7fffffff;

// Why a session ended.
enum class SessionEnd : uint8_t {
  kLocalClose,       // our side closed it (drain, shutdown, reload, no streams left)
  kTransportFailed,  // the carrier failed or the peer closed it
  kProtocolError,    // the peer sent something invalid
  kHandshakeTimeout,
  kKeepaliveTimeout,
  kOutOfBuffers,
  kPeerNotReading,  // control frames piled up: the peer does not read
  kResumeTimeout,   // suspended longer than resume_timeout_ms
  kResumeRefused,   // the peer does not know the session (it restarted, or ended it)
  kPeerGone,        // the peer's host refused the new connection: its rdmagw is not running
  kPeerRestarted,   // the peer's process is a new one (a fresh session from it says so)
  kAuthFailed,      // the peer did not prove it holds a key (or we could not prove it to the peer)
  kLimit,           // this side holds as many sessions from the peer's address as tunnel.limits allows
  kRevoked,         // the peer's proof no longer holds: its key or CA was removed, or its certificate ended
};
std::string_view session_end_name(SessionEnd end);

// Told about a session's life; calls come at the end of a loop batch, never
// while the session parses.
class SessionOwner {
 public:
  virtual ~SessionOwner() = default;
  virtual void on_session_open(Session& session) = 0;
  // The session is closed and its streams are detached; the owner retires it.
  virtual void on_session_closed(Session& session, SessionEnd end, std::string_view reason) = 0;
  // The session takes no new streams (the peer sent GOAWAY, or its stream
  // ids ran out); those it carries go on.
  virtual void on_session_draining(Session& session) = 0;
  // The peer opened stream `id` to `target`, from `origin` (null: the peer
  // does not say). Called mid-parse: return a detached stream (which must
  // not call the session from here), or nullptr with *refuse set.
  virtual Stream* on_stream_open(Session& session, uint32_t id, std::string_view target, const StreamOrigin* origin,
                                 ResetCode* refuse) = 0;
  // A resumable session lost its transport and waits for another: the
  // dialer's owner dials and calls resume(); the acceptor's waits.
  virtual void on_session_suspended(Session&) {}
  // Acceptor, mid-parse: the dialer named the session (token()) as new.
  // The owner may now find it by token; it must not call this session.
  // False: the owner has no room for it (tunnel.limits), and it closes.
  virtual bool on_session_identified(Session&) { return true; }
  // Acceptor, mid-parse: the session the dialer asks to resume, or nullptr.
  virtual Session* find_session(const SessionToken&) { return nullptr; }
  // Acceptor, mid-parse: whether a session with this token is held here or
  // by another worker (a new session may not take a live one's token: its
  // resumes would then find the impostor).
  virtual bool token_in_use(const SessionToken& token) { return find_session(token) != nullptr; }
  // Acceptor, mid-parse, when find_session() found none: the session may be
  // held elsewhere (another worker). True if the owner took `transport`
  // to carry the request there (the dialer waits for the answer).
  // `proof`: what the peer proved itself with on that transport.
  virtual bool resume_elsewhere(const SessionPayload&, const HelloPayload&, const PeerProof& /*proof*/,
                                IoPtr<Transport>&) {
    return false;
  }
};

// The tunnel's keys at their defaults (config/config.h: one name and one
// default per key), one copy for every SessionSettings not given others.
inline std::shared_ptr<const TunnelConfig> default_tunnel_config() {
  static const auto defaults = std::make_shared<const TunnelConfig>();
  return defaults;
}

struct SessionSettings {
  std::string node;
  // What a session reads of the tunnel's keys: the sizes its HELLO announces
  // (buffer_size as max_data, stream_window, session_budget as the session's
  // window), keepalive_interval_ms and keepalive_timeout_ms,
  // connect_timeout_ms (which bounds each handshake too), resume_timeout_ms
  // (0: not resumable, kCapResume is not offered), and limits'
  // streams_per_session and opens_per_second (what a peer may ask of one
  // session: an OPEN beyond either is refused with RESET(resource); 0: no
  // limit). All restart-only: the keys a reload applies (session_idle_ms,
  // max_sessions, ...) stay as they were at start here, and are read from
  // the configuration, not from this.
  std::shared_ptr<const TunnelConfig> tunnel = default_tunnel_config();
  // This process's instance, the first half of the tokens it dials with
  // (0: drawn per session).
  uint64_t instance = 0;
  // The last stream id this side opens before the session retires (tests
  // lower it to reach exhaustion).
  uint32_t max_stream_id = kMaxStreamId;
  metrics::WorkerMetrics* metrics = nullptr;  // the worker's counters (null in unit tests)
  // The worker's limiter for lines about accepted connections that were
  // never admitted (a flood of them must not flood the log); null: every
  // line is written.
  log::LogLimiter* handshake_log = nullptr;
  // The keys (tunnel.auth.mode psk) or the node's certificate (mode cert) to
  // prove and verify with, owned by the worker and swapped by a reload;
  // null or empty: peers are not authenticated.
  const AuthKeyring* auth = nullptr;
  // Label for this session's peer counters: the configured peer name for
  // sessions we dial; empty for accepted ones, which use the HELLO's node.
  std::string peer_label;
  // Mode cert, sessions we dial to a named peer: the node its certificate
  // must name (empty: a peer found by destination, whose certificate must
  // list the address dialed, whatever its name).
  std::string expected_peer;
};

class Session final : public IoObject, public Flushable, private TransportSink {
 public:
  enum class Role { kDialer, kAcceptor };
  // kResuming: a resumable session that lost its transport (or is on a
  // new one still in its handshake). Streams keep their calls; frames wait.
  enum class State { kHandshake, kOpen, kResuming, kClosed };

  Session(EventLoop& loop, BufferPool& pool, Role role, const SessionSettings& settings, IoPtr<Transport> transport,
          SessionOwner* owner);
  // In a new process after a takeover: the old process's session, suspended,
  // with no stream yet (restore_stream() reattaches them). Check
  // restored_frames(): false when the pool had no room for its queue.
  Session(EventLoop& loop, BufferPool& pool, const SessionSettings& settings, const SessionImage& image,
          SessionOwner* owner);

  void start();
  void tick(Clock::time_point now);
  // Ends the session; its streams are detached (on_session_lost). kFlush:
  // frames already queued still go out, within a bounded time.
  void close(SessionEnd end, std::string_view reason, CloseMode mode);
  // Graceful drain: tell the peer to open no more streams here.
  void send_goaway();
  // The owner lets go for good (it is being destroyed): it is told nothing more.
  void disown() { owner_ = nullptr; }
  // Dialer, while suspended: carry on over `transport` (just dialed).
  void resume(IoPtr<Transport> transport);
  // Dialer, open and resumable: carry on over `transport` (just dialed, of
  // another kind) instead of the one it runs on, which is closed: the peer
  // resumes the session there, and what was in flight is sent again, as
  // after a transport loss.
  void move_to(IoPtr<Transport> transport, std::string_view reason);
  // The peer places an RDMA connect that names a session with the worker
  // holding it (kCapRdmaPlacement): the session may move onto RDMA.
  bool peer_places_rdma() const { return peer_hello_.capabilities & kCapRdmaPlacement; }
  // Suspended and without a transport: the dialer's owner should dial one.
  bool wants_transport() const { return state_ == State::kResuming && !transport_ && !frozen_; }
  // Acceptor: whether a dialer that announced `hello` and has our frames up
  // to `peer_received` may resume this session.
  bool can_resume_from(const HelloPayload& hello, uint64_t peer_received) const;
  // Acceptor: carry on over `transport`, on which the dialer asked to resume
  // (started: by the session that parsed the request; else start it here),
  // after proving itself with `proof`.
  void take_over(IoPtr<Transport> transport, uint64_t peer_received, bool started, PeerProof proof);

  // --- a takeover by a new process (session_handover.cc) ---------------------
  // Stops using the transport (the peer takes it for a fault and waits to
  // resume) and freezes: nothing is dialed and no timeout runs; streams may
  // still queue frames. False if the session cannot move (not resumable, in
  // its handshake, closing): the caller closes it.
  bool freeze();
  bool frozen() const { return frozen_; }
  // The takeover failed: go on as a session that lost its transport.
  void thaw();
  // Its state, for the new process (no stream of it may have I/O in flight).
  void export_image(SessionImage* out) const;
  static StreamTunnelImage stream_image(const Stream& stream);
  bool restored_frames() const { return restored_frames_; }
  void restore_stream(Stream& stream, const StreamTunnelImage& image);
  // The streams that were short of session credit, in their order.
  void restore_blocked(const std::vector<uint32_t>& ids);

  State state() const { return state_; }
  Role role() const { return role_; }
  bool open() const { return state_ == State::kOpen; }
  bool resumable() const { return resumable_; }
  // The current (or last) transport's peer, "ip:port".
  const std::string& remote_address() const { return remote_address_; }
  const SessionToken& token() const { return token_; }
  // Open or resuming, and may still open streams of its own (no GOAWAY, ids left).
  bool can_open_streams() const;
  const std::string& peer_node() const { return peer_node_; }
  TransportKind transport_kind() const { return transport_kind_; }
  size_t stream_count() const { return streams_.size(); }
  const SessionCounters& counters() const { return tally_.totals(); }
  // For the admin endpoint (GET /peers); the caller sets `worker`.
  void describe(SessionInfo* out) const;
  // What the peer proved itself with on the current transport.
  const PeerProof& peer_proof() const { return peer_proof_; }
  // This side's keys or CAs changed (a reload; settings.auth already holds
  // the new ones): a session whose peer's proof no longer holds is ended,
  // its streams reset (docs/security.md, "Revocation"). False if it ended.
  // A session resuming is not checked: its next transport proves itself
  // under the new trust anyway, and carries nothing until then.
  bool recheck_peer();
  // This side's own proof changed (a reload brought a new certificate, or
  // a new first key): an open resumable session moves to a new transport,
  // on which both sides prove themselves with what they hold now, so that
  // its peer's record of our proof is not one that is about to be retired.
  // Its streams only pause. False if it cannot (not resumable, not open).
  bool reauthenticate(std::string_view reason);

  // --- used by streams (never while the session parses) ---------------------
  // Bytes a new stream may carry in its OPEN (min of stream and session credit).
  uint32_t open_credit() const;
  // Opens `stream` (detached) to `target`. `buffer` (may be null) holds
  // `first_len` payload bytes at kBufferHeadroom and is adopted. first_len
  // must be <= open_credit(). `origin` (may be null) goes with it where the
  // peer takes one (kCapOrigin). False: no stream was opened.
  bool open_stream(Stream& stream, std::string_view target, uint8_t* buffer, uint32_t first_len,
                   const StreamOrigin* origin = nullptr);
  // Both HELLOs carry kCapOrigin: OPENs carry their origin both ways.
  bool origins() const { return own_capabilities_ & peer_hello_.capabilities & kCapOrigin; }
  // Stream credit for a receive about to be posted: up to `want` bytes.
  // Returns 0 (and on_send_credit() later) when the stream has none.
  uint32_t take_stream_credit(Stream& stream, uint32_t want);
  void refund_stream_credit(Stream& stream, uint32_t n);
  // Session credit for `n` bytes already read, taken only right before they
  // are sent, so an idle stream never holds any of the session's budget.
  // False (and on_send_credit() later) when the session has too little.
  bool take_session_credit(Stream& stream, uint32_t n);
  // Sends `len` payload bytes at buffer+kBufferHeadroom (both credits taken
  // before); adopts the buffer.
  void send_data(Stream& stream, uint8_t* buffer, uint32_t len);
  void send_fin(Stream& stream);
  // `n` bytes the peer sent on `stream` left this host (written to the
  // local socket): they return as WINDOW credit.
  void delivered(Stream& stream, uint32_t n);
  // Resets the stream towards the peer and detaches it.
  void reset_stream(Stream& stream, ResetCode code);
  // Resets stream `id`, which no Stream carries here (a takeover image's
  // stream that could not be rebuilt), so that the peer's end learns of it.
  void reset_unattached(uint32_t id, ResetCode code);
  // The stream is done with the session (both directions ended cleanly):
  // detaches it.
  void detach(Stream& stream);

  // Flushable: dispatches what frames queued (see the file comment).
  void flush() override;

 private:
  ~Session() override;

  enum Event : uint8_t {
    kEventFin = Stream::kEventFinBit,
    kEventReset = Stream::kEventResetBit,
    kEventCredit = 4,
    kEventLost = 8
  };
  // What the current transport delivers next.
  enum class Link : uint8_t {
    kNone,     // no transport
    kHello,    // the peer's HELLO
    kAuth,     // the peer's AUTH (authenticated tunnels: auth_ knows which)
    kSession,  // the peer's SESSION (resumable sessions)
    kReady,    // session frames
  };

  // TransportSink
  bool on_frame(const FrameHeader& header, std::span<const uint8_t> payload) override;
  void on_frames_end() override { deliver_gathered(); }
  bool takes_piped_frames() const override { return state_ == State::kOpen && link_ == Link::kReady; }
  bool on_piped_frame(const FrameHeader& header, std::span<const uint8_t> head, int pipe_fd, uint32_t piped) override;
  void on_transport_closed(metrics::TransportLoss loss, std::string_view reason) override;

  bool handle_frame(const FrameHeader& header, std::span<const uint8_t> payload);
  bool send_hello();

  // --- authentication (session_auth.cc; the exchange: auth_exchange.h) ---
  bool auth_enabled() const { return settings_.auth && settings_.auth->enabled(); }
  std::unique_ptr<AuthExchange> new_auth_exchange();
  // After our HELLO (whose payload is `hello`): the dialer's challenge, or
  // the acceptor's proof.
  bool send_auth_after_hello(std::span<const uint8_t> hello);
  // The peer's HELLO on an authenticated tunnel: held until its proof.
  bool hold_hello(std::span<const uint8_t> payload, HelloPayload hello);
  bool on_auth(std::span<const uint8_t> payload);
  // What the link expects next, the peer admitted, or the transport ended.
  bool follow_auth(AuthExchange::Outcome outcome);
  // Ends this transport without a word to the peer; logs once per address.
  bool auth_failed(AuthFailure failure, std::string_view reason);
  // Ends the session: the peer's proof no longer holds (`why`). Logged and
  // counted; the peer is told the end is meant, so it does not resume.
  void revoke(std::string_view why);
  void open_now();

  // --- resumption (session_resume.cc) ---
  bool send_session(SessionKind kind);
  // The transport sends our session frames from now on, after its handshake.
  void attach_frames();
  // ... and delivers the peer's.
  void link_ready();
  // Sends what is queued, if the transport sends session frames.
  void kick() {
    if (frames_attached_) transport_->request_send();
  }
  bool on_session(std::span<const uint8_t> payload);
  bool on_session_as_acceptor(const SessionPayload& request);
  bool on_ack(const FrameHeader& h, std::span<const uint8_t> payload);
  // The transport failed: suspend if resumable, else close.
  void lose_transport(SessionEnd why, std::string_view reason);
  void count_transport_loss(metrics::TransportLoss loss);
  // Open -> resuming: when, and on which kind of transport (for the resumes' metric).
  void mark_suspended();
  void suspend(std::string_view reason);
  // Closes the transport; what it may still be sending from the kept frames
  // is released once it is idle (apply_acks).
  void drop_transport();
  // Both sides: the peer has our frames up to `peer_received`; resend the rest.
  bool resend_from(uint64_t peer_received);
  void resumed();
  // Releases what the peer acknowledged, once no closed transport may still read it.
  void apply_acks();
  void maybe_ack(bool timer);
  // Enough unacknowledged bytes that the peer should hear of them this batch.
  bool ack_due_by_volume() const { return received_ - ack_sent_ >= own_.max_data * 4ull; }
  bool same_settings(const HelloPayload& hello) const;
  uint64_t usable_session_credit() const;
  bool protocol_error(std::string reason);
  bool on_hello(std::span<const uint8_t> payload);
  // The peer's HELLO, authenticated if the tunnel is.
  bool accept_hello(HelloPayload hello);
  bool on_open(const FrameHeader& h, std::span<const uint8_t> payload);
  // Whether the peer may open stream `id` under tunnel.limits (counted and
  // logged, rate-limited, when not).
  bool within_open_limits(uint32_t id);
  // An accepted connection whose peer has not been admitted: lines about
  // it go through settings_.handshake_log (true: write this one).
  bool never_admitted() const;
  bool may_log(uint64_t* suppressed);
  bool on_data(const FrameHeader& h, std::span<const uint8_t> payload);
  bool on_window(const FrameHeader& h, std::span<const uint8_t> payload);
  bool on_fin(const FrameHeader& h);
  bool on_reset(const FrameHeader& h, std::span<const uint8_t> payload);
  bool is_remote_id(uint32_t id) const { return (id & 1u) == (role_ == Role::kDialer ? 0u : 1u); }
  bool was_opened(uint32_t id) const;
  // The stream a frame is for: nullptr when the id is not (or no longer)
  // carried here; *known tells whether the id was ever opened.
  Stream* find_stream(uint32_t id, bool* known) const;
  void attach(Stream& stream, uint32_t id, uint64_t send_window);
  // Peer bytes for `stream`, mid-parse: kept as a piece of the transport's
  // buffer until the batch ends (deliver_gathered).
  void gather(Stream& stream, std::span<const uint8_t> bytes);
  // Hands each stream the pieces of this batch (PayloadBatch: the fewest
  // bytes first). What a stream delivers at once returns as credit; bytes
  // it cannot keep reset it (RESET(resource)). Called at the end of each
  // batch, and before the session lets its transport go (the pieces live
  // in its buffer).
  void deliver_gathered();
  // The DATA frame being handled came through on_piped_frame(): its
  // payload is the frame's span, then these bytes in the pipe.
  struct PipedPayload {
    int fd = -1;
    uint32_t bytes = 0;
  };
  // A piped payload for `stream`: handed over at once, after the pieces
  // gathered so far (they go first), with the same outcome rules.
  void deliver_piped(Stream& stream, std::span<const uint8_t> head, PipedPayload piped);
  // What a stream did with bytes it was handed: reset it when it could
  // not keep them, return credit for what it wrote at once.
  // `offered`: the payload bytes the stream was handed in that delivery.
  void settle_delivery(Stream& stream, Stream::Delivery d, uint32_t offered);
  // `n` bytes of `stream` left this host: stream and session credit return.
  void return_credit(Stream& stream, uint32_t n);
  void grant_session();
  std::string peer_label() const;
  bool send_control(FrameType type, uint32_t id, uint64_t value, size_t value_size);
  void queue_event(Stream& stream, uint8_t event);
  void unqueue_events(Stream& stream);
  void dispatch(Stream& stream, uint8_t events);
  void notify_blocked_streams();
  void request_dispatch();
  bool stream_api_usable(const Stream& stream) const;

  BufferPool& pool_;
  Role role_;
  SessionSettings settings_;
  IoPtr<Transport> transport_;
  Link link_ = Link::kNone;
  bool frames_attached_ = false;  // the transport sends from frames_
  // Every frame after the handshake, in order; kept until acknowledged when
  // resumable. Shared with the transports sending from it (outbound.h).
  std::shared_ptr<ByteQueue> frames_;
  // Transports closed under a resumable session: the log's bytes they might
  // still be sending are released only once they are idle.
  std::vector<IoPtr<Transport>> old_transports_;
  bool resumable_ = false;
  bool handed_off_ = false;    // acceptor: our transport went to the session it resumes
  bool peer_closing_ = false;  // the peer said GOAWAY(closing): never resume
  bool frozen_ = false;        // a takeover is moving it to a new process
  bool restored_frames_ = true;
  // The kept frames of an image, each whole in one buffer; false if they do
  // not parse as frames or the pool has no room.
  bool restore_frames(std::span<const uint8_t> frames);
  SessionToken token_;
  uint64_t received_ = 0;    // the peer's session frame bytes taken in
  uint64_t ack_sent_ = 0;    // received_ as of our last ACK
  uint64_t peer_acked_ = 0;  // our session frame bytes the peer has
  Clock::time_point last_ack_;
  Clock::time_point link_started_;  // the current transport's handshake began
  Clock::time_point suspended_at_;
  TransportKind suspended_kind_ = TransportKind::kTcp;
  TransportKind transport_kind_;
  std::string remote_address_;
  SessionOwner* owner_;
  State state_ = State::kHandshake;
  bool parsing_ = false;  // inside on_frame() or deliver_gathered(): streams must not call in (asserted)
  PipedPayload piped_;    // set while on_piped_frame() handles its frame
  std::string peer_node_;
  HelloPayload peer_hello_;
  uint32_t own_capabilities_ = 0;  // what our HELLO said (a takeover's: what the old process's said)
  // The sizes our HELLO announces, which the peer holds us to for the
  // session's life: the tunnel's keys, or for a session a takeover brought,
  // what the old process announced.
  struct Announced {
    uint32_t max_data = 0;
    uint32_t stream_window = 0;
    uint64_t session_window = 0;
  } own_;
  // This transport's authentication, while it runs (auth_exchange.h). It
  // writes to transport_: it goes when it ends, fails, or the transport goes.
  std::unique_ptr<AuthExchange> auth_;
  PeerProof peer_proof_;  // set by each transport's authentication

  std::unordered_map<uint32_t, Stream*> streams_;
  uint32_t next_local_id_;
  uint32_t highest_remote_id_ = 0;
  uint32_t peer_streams_ = 0;     // streams the peer opened, attached now
  TokenBucket peer_opens_{0, 0};  // tunnel.limits.opens_per_second (set by the constructors)
  log::LogLimiter open_limit_log_{10, 20};
  SendCredit session_send_;
  // Part of the peer's announced session window we choose not to use: we
  // never queue more than our own budget, whatever the peer offers.
  uint64_t session_send_reserve_ = 0;
  ReceiveWindow session_receive_;
  std::vector<Stream*> blocked_streams_;  // short of session credit, in order
  std::vector<Stream*> events_;           // streams with Event bits to dispatch
  PayloadBatch gathered_;                 // this transport batch's stream payloads, until it ends
  // What the owner is still to hear (SessionOwner's hooks), told by flush()
  // in this order, each once however often it was queued: open before the
  // streams' events, then suspended, draining, closed.
  enum OwnerEvent : uint8_t { kOwnerOpen = 1, kOwnerSuspended = 2, kOwnerDraining = 4, kOwnerClosed = 8 };
  uint8_t owner_events_ = 0;
  bool take_owner_event(OwnerEvent event) {
    bool queued = owner_events_ & event;
    owner_events_ &= static_cast<uint8_t>(~event);
    return queued;
  }
  bool draining_announced_ = false;  // on_session_draining was queued once (never again)
  SessionEnd end_ = SessionEnd::kLocalClose;
  std::string end_reason_;
  // GOAWAY ("open no more streams here", docs/protocol.md), one state per
  // direction: ours to the peer, and the peer's to us.
  enum class GoawayOut : uint8_t {
    kNone,
    kPending,  // asked for during the handshake: it follows our HELLO
    kSent,
  };
  GoawayOut goaway_out_ = GoawayOut::kNone;
  bool goaway_received_ = false;

  Clock::time_point started_;
  Clock::time_point last_receive_;
  Clock::time_point last_ping_;
  int64_t rtt_us_ = -1;
  SessionTally tally_;
  Clock::time_point started_wall_;
};

}  // namespace rdmagw::tunnel
