// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/session.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <random>

#include "common/log.h"
#include "common/splice_pipe.h"

namespace rdmagw::tunnel {

namespace {
int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Marks the session as parsing a frame or delivering a batch's data;
// streams must not call in meanwhile (Stream's re-entrance rule). Nests: a
// frame that ends the session delivers from inside the parse.
class ParsingScope {
 public:
  explicit ParsingScope(bool& flag) : flag_(flag), outer_(flag) { flag_ = true; }
  ~ParsingScope() { flag_ = outer_; }

 private:
  bool& flag_;
  bool outer_;
};
}  // namespace

std::string_view transport_kind_name(TransportKind kind) { return kind == TransportKind::kRdma ? "rdma" : "tcp"; }

std::string_view session_end_name(SessionEnd end) {
  switch (end) {
    case SessionEnd::kLocalClose:
      return "local-close";
    case SessionEnd::kTransportFailed:
      return "transport-failed";
    case SessionEnd::kProtocolError:
      return "protocol-error";
    case SessionEnd::kHandshakeTimeout:
      return "handshake-timeout";
    case SessionEnd::kKeepaliveTimeout:
      return "keepalive-timeout";
    case SessionEnd::kOutOfBuffers:
      return "out-of-buffers";
    case SessionEnd::kPeerNotReading:
      return "peer-not-reading";
    case SessionEnd::kResumeTimeout:
      return "resume-timeout";
    case SessionEnd::kLimit:
      return "limit";
    case SessionEnd::kResumeRefused:
      return "resume-refused";
    case SessionEnd::kPeerGone:
      return "peer-gone";
    case SessionEnd::kPeerRestarted:
      return "peer-restarted";
    case SessionEnd::kAuthFailed:
      return "auth-failed";
    case SessionEnd::kRevoked:
      return "revoked";
  }
  return "unknown";
}

Session::Session(EventLoop& loop, BufferPool& pool, Role role, const SessionSettings& settings,
                 IoPtr<Transport> transport, SessionOwner* owner)
    : IoObject(loop),
      pool_(pool),
      role_(role),
      settings_(settings),
      transport_(std::move(transport)),
      frames_(std::make_shared<ByteQueue>(&pool)),
      transport_kind_(transport_->kind()),
      remote_address_(transport_->remote_address()),
      owner_(owner),
      next_local_id_(role == Role::kDialer ? 1 : 2),
      session_receive_(settings.tunnel->session_budget) {
  own_ = {settings_.tunnel->buffer_size, settings_.tunnel->stream_window, settings_.tunnel->session_budget};
  started_ = last_receive_ = last_ping_ = last_ack_ = link_started_ = loop.now();
  // A token names the session across transports; the nonce is drawn once
  // per session (never per frame).
  std::random_device random;
  auto draw = [&] { return (uint64_t{random()} << 32) | random(); };
  token_.instance = settings_.instance != 0 ? settings_.instance : draw();
  token_.nonce = draw();
  started_wall_ = Clock::now();
  if (settings_.metrics && !settings_.peer_label.empty())
    tally_.set_peer(&settings_.metrics->peer(settings_.peer_label));
  uint32_t opens = settings_.tunnel->limits.opens_per_second;
  peer_opens_ = TokenBucket(opens, opens);
}

Session::~Session() {
  // Streams were detached by close(); none is touched here (see IoObject).
  // tally_ lowers the sessions gauge it raised.
}

void Session::describe(SessionInfo* out) const {
  out->role = role_ == Role::kDialer ? "dialer" : "acceptor";
  out->transport = std::string(transport_kind_name(transport_kind_));
  out->state = state_ == State::kHandshake                                                    ? "handshake"
               : state_ == State::kClosed                                                     ? "closed"
               : frozen_                                                                      ? "handing-over"
               : state_ == State::kResuming                                                   ? "resuming"
               : (goaway_out_ == GoawayOut::kSent || goaway_received_ || draining_announced_) ? "draining"
                                                                                              : "open";
  out->remote_address = remote_address_;
  out->peer_node = peer_node_;
  out->rtt_us = rtt_us_;
  out->age_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_wall_).count());
  out->streams = streams_.size();
  out->streams_opened = tally_.totals().streams_opened;
  out->bytes_sent = tally_.totals().bytes_out;
  out->bytes_received = tally_.totals().bytes_in;
  out->queued_bytes = tally_.totals().bytes_queued;
  out->credit_stalls = tally_.totals().credit_stalls;
  out->resumable = resumable_;
  out->resumes = tally_.totals().resumes;
  out->resent_bytes = tally_.totals().resent_bytes;
  if (transport_) transport_->describe(out);
}

std::string Session::peer_label() const { return peer_node_.empty() ? std::string("?") : peer_node_; }

void Session::start() {
  link_ = Link::kHello;
  transport_->start(this);
  // The dialer speaks first (RDMA CM's active side must); the acceptor
  // answers from on_hello().
  if (role_ == Role::kDialer && !send_hello()) close(SessionEnd::kOutOfBuffers, "out of buffers", CloseMode::kAbort);
}

bool Session::send_hello() {
  HelloPayload hello;
  hello.max_data = own_.max_data;
  hello.stream_window = own_.stream_window;
  hello.session_window = own_.session_window;
  hello.node = settings_.node.substr(0, kMaxNodeNameLength);
  if (settings_.tunnel->resume_timeout_ms > 0) hello.capabilities |= kCapResume;
  hello.capabilities |= kCapRdmaPlacement;
  if (auth_enabled()) hello.capabilities |= kCapAuth | kCapBound;
  if (auth_enabled() && settings_.auth->certificates()) hello.capabilities |= kCapCert;
  if (auth_enabled() && settings_.auth->encrypt) hello.capabilities |= kCapEncrypt;
  hello.capabilities |= kCapOrigin;
  // What the session was opened with holds for its life: a resume's or a
  // move's HELLO (which the peer checks against the first) changes nothing,
  // even where a takeover brought the session from an older process.
  if (state_ == State::kHandshake) own_capabilities_ = hello.capabilities;
  size_t size = kHeaderSize + kHelloFixedSize + hello.node.size();
  uint8_t* out = transport_->outbound().handshake().append_contiguous(size);
  if (!out) return false;
  encode_hello(out, hello);
  ++tally_.totals().frames_out;
  // AUTH follows HELLO at once (the appended bytes stay put until sent).
  if (auth_enabled() && !send_auth_after_hello(std::span<const uint8_t>(out + kHeaderSize, size - kHeaderSize)))
    return false;
  transport_->request_send();
  return true;
}

void Session::tick(Clock::time_point now) {
  if (state_ == State::kClosed || frozen_) return;
  // A certificate ends the session it authenticated (within a tick);
  // resuming, the next transport proves itself again.
  if (peer_proof_.not_after != 0 && state_ != State::kResuming &&
      std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()) >= peer_proof_.not_after) {
    revoke("its certificate expired (notAfter " + std::to_string(peer_proof_.not_after) + " seconds since the epoch)");
    return;
  }
  apply_acks();
  const TunnelConfig& keys = *settings_.tunnel;
  if (state_ == State::kResuming) {
    if (now - suspended_at_ > std::chrono::milliseconds(keys.resume_timeout_ms)) {
      close(SessionEnd::kResumeTimeout,
            "not resumed within resume_timeout_ms (" + std::to_string(keys.resume_timeout_ms) + " ms)",
            CloseMode::kAbort);
    } else if (transport_ && now - link_started_ > std::chrono::milliseconds(keys.connect_timeout_ms)) {
      suspend("resume handshake timeout");
    }
    return;
  }
  notify_blocked_streams();
  if (state_ == State::kHandshake) {
    if (now - started_ > std::chrono::milliseconds(keys.connect_timeout_ms))
      close(SessionEnd::kHandshakeTimeout, "handshake timeout", CloseMode::kAbort);
    return;
  }
  if (now - last_receive_ > std::chrono::milliseconds(keys.keepalive_timeout_ms)) {
    count_transport_loss(metrics::TransportLoss::kKeepaliveTimeout);
    lose_transport(SessionEnd::kKeepaliveTimeout,
                   "keepalive timeout: nothing received for " + std::to_string(keys.keepalive_timeout_ms) + " ms");
    return;
  }
  if (now - last_ping_ >= std::chrono::milliseconds(keys.keepalive_interval_ms)) {
    last_ping_ = now;
    send_control(FrameType::kPing, 0, static_cast<uint64_t>(to_ns(now)), 8);
  }
  maybe_ack(true);
}

void Session::close(SessionEnd end, std::string_view reason, CloseMode mode) {
  if (state_ == State::kClosed) return;
  // What arrived before the end is the streams' (a stream whose FINs both
  // crossed finishes with it): delivered while its buffer is still ours.
  deliver_gathered();
  if (state_ == State::kClosed) return;  // a delivery ran out of buffers and closed it
  // A resumable peer would otherwise take the end of the transport for a
  // fault and try to resume: say that this end is meant.
  if (resumable_ && mode == CloseMode::kFlush && state_ == State::kOpen && frames_attached_)
    send_control(FrameType::kGoaway, 0, static_cast<uint32_t>(GoawayCode::kClosing), 4);
  if (state_ == State::kResuming && !streams_.empty()) {
    log::warn("session_resume_failed")
        .kv("peer", peer_label())
        .kv("streams", streams_.size())
        .kv("end", session_end_name(end))
        .kv("reason", reason);
    if (settings_.metrics) settings_.metrics->stream_resume_failures.add(streams_.size());
  }
  // A connection that failed to authenticate was never a session: its
  // auth_failed line (once per address) is its only record, so a flood of
  // them cannot flood the log. A dialer's attempts are also said by its
  // peer link (peer_connect_failed: the first and every tenth, with this
  // reason), not once per redial.
  bool quiet = end == SessionEnd::kAuthFailed && state_ == State::kHandshake;
  uint64_t suppressed = 0;
  bool logged = !quiet && may_log(&suppressed);
  state_ = State::kClosed;
  end_ = end;
  end_reason_ = std::string(reason);
  tally_.count_closed();
  if (logged) {
    log::Line line = log::info("session_closed");
    line.kv("peer", peer_label())
        .kv("transport", transport_kind_name(transport_kind_))
        .kv("streams", streams_.size())
        .kv("end", session_end_name(end))
        .kv("reason", reason);
    if (suppressed) line.kv("suppressed", suppressed);
  }
  if (transport_) transport_->close(mode);
  link_ = Link::kNone;
  // Streams learn of it at the end of the batch (never inside a call of
  // theirs or mid-parse); until then they stay attached but the session
  // refuses their calls.
  for (auto& [id, stream] : streams_) queue_event(*stream, kEventLost);
  blocked_streams_.clear();
  owner_events_ |= kOwnerClosed;
  request_dispatch();
}

void Session::send_goaway() {
  if (goaway_out_ == GoawayOut::kSent || state_ == State::kClosed) return;
  if (state_ == State::kHandshake) {
    // Our HELLO must come first; on_hello() sends the GOAWAY after it.
    goaway_out_ = GoawayOut::kPending;
    return;
  }
  goaway_out_ = GoawayOut::kSent;
  send_control(FrameType::kGoaway, 0, static_cast<uint32_t>(GoawayCode::kDrain), 4);
}

bool Session::never_admitted() const {
  return role_ == Role::kAcceptor && state_ == State::kHandshake && transport_ && !transport_->admitted();
}

bool Session::may_log(uint64_t* suppressed) {
  *suppressed = 0;
  if (!never_admitted() || !settings_.handshake_log) return true;
  return settings_.handshake_log->allow(loop().now(), suppressed);
}

bool Session::protocol_error(std::string reason) {
  uint64_t suppressed = 0;
  if (may_log(&suppressed)) {
    log::Line line = log::warn("session_error");
    line.kv("peer", peer_label()).kv("remote", remote_address_).kv("reason", "malformed frame: " + reason);
    if (suppressed) line.kv("suppressed", suppressed);
  }
  close(SessionEnd::kProtocolError, "protocol error: " + reason, CloseMode::kAbort);
  return false;
}

bool Session::was_opened(uint32_t id) const {
  if (is_remote_id(id)) return id <= highest_remote_id_;
  return id < next_local_id_;
}

Stream* Session::find_stream(uint32_t id, bool* known) const {
  *known = was_opened(id);
  auto it = streams_.find(id);
  if (it == streams_.end()) return nullptr;
  // Reset or lost, waiting for dispatch: frames for it are late, as if gone.
  if (it->second->events_ & (kEventReset | kEventLost)) return nullptr;
  return it->second;
}

void Session::attach(Stream& stream, uint32_t id, uint64_t send_window) {
  assert(!stream.session_);
  stream.session_ = this;
  stream.id_ = id;
  stream.send_ = SendCredit(send_window);
  stream.receive_ = ReceiveWindow(own_.stream_window);
  stream.fin_sent_ = stream.fin_received_ = false;
  stream.wants_credit_ = stream.waits_for_session_ = false;
  streams_[id] = &stream;
  if (is_remote_id(id)) ++peer_streams_;
}

void Session::detach(Stream& stream) {
  if (stream.session_ != this) return;
  gathered_.drop(stream);
  unqueue_events(stream);
  if (stream.waits_for_session_) std::erase(blocked_streams_, &stream);
  // Bytes the stream still held are dropped with it: return them to the
  // session budget or the session would slowly starve.
  session_receive_.on_delivered(stream.receive_.buffered());
  streams_.erase(stream.id_);
  if (is_remote_id(stream.id_)) --peer_streams_;
  stream.session_ = nullptr;
  stream.waits_for_session_ = stream.wants_credit_ = false;
  grant_session();
}

void Session::grant_session() {
  // While suspended too: the WINDOW waits in the queue like any frame. A
  // grant skipped then would be owed until the next delivery, and a peer
  // short of session credit may have nothing left to deliver.
  if (state_ != State::kOpen && state_ != State::kResuming) return;
  uint64_t n = session_receive_.take_grant();
  while (n > 0) {
    uint32_t part = static_cast<uint32_t>(std::min<uint64_t>(n, 0xffffffffu));
    send_control(FrameType::kWindow, 0, part, 4);
    n -= part;
  }
}

bool Session::send_control(FrameType type, uint32_t id, uint64_t value, size_t value_size) {
  if (state_ == State::kClosed) return false;
  // DATA in the queue is bounded by the peer's session window. Beyond that
  // only control frames pile up, i.e. answers to a peer that keeps sending
  // (PINGs, OPENs we refuse) but does not read: end it before it eats the
  // worker's buffers, which other sessions share.
  // A resumable session also counts what it keeps for a resend: a peer that
  // does not acknowledge is not reading either.
  size_t queued = frames_->size() + frames_->retained();
  if (queued > std::min(peer_hello_.session_window, own_.session_window) + kControlBacklogLimit) {
    close(SessionEnd::kPeerNotReading, "peer is not reading (" + std::to_string(queued) + " bytes queued)",
          CloseMode::kAbort);
    return false;
  }
  uint8_t* out = frames_->append_contiguous(kHeaderSize + value_size);
  if (!out) {
    close(SessionEnd::kOutOfBuffers, "out of buffers for control frames", CloseMode::kAbort);
    return false;
  }
  if (value_size == 8)
    encode_u64_frame(out, type, id, value);
  else if (value_size == 4)
    encode_u32_frame(out, type, id, static_cast<uint32_t>(value));
  else
    encode_empty_frame(out, type, id);
  ++tally_.totals().frames_out;
  kick();
  return true;
}

// --- dispatch at the end of the batch -------------------------------------------

void Session::request_dispatch() { loop().request_flush(this); }

void Session::queue_event(Stream& stream, uint8_t event) {
  if (stream.events_ == 0) events_.push_back(&stream);
  stream.events_ |= event;
  request_dispatch();
}

void Session::unqueue_events(Stream& stream) {
  if (stream.events_ == 0) return;
  stream.events_ = 0;
  // Rare (a stream ending with events queued): a linear scan is fine.
  for (Stream*& s : events_)
    if (s == &stream) s = nullptr;
}

void Session::flush() {
  assert(!parsing_);
  assert(gathered_.empty() && "a transport did not end its batch (TransportSink::on_frames_end)");
  if (take_owner_event(kOwnerOpen)) {
    // A session that ended in the same batch never served: its owner counts
    // it as a failed attempt (backoff), not as one that came up.
    if (owner_ && state_ == State::kOpen) owner_->on_session_open(*this);
  }
  // Hooks may queue further events (appended) or detach streams (their slot
  // becomes null): walk by index until quiet.
  for (size_t i = 0; i < events_.size(); ++i) {
    Stream* stream = events_[i];
    if (!stream) continue;
    events_[i] = nullptr;
    dispatch(*stream, std::exchange(stream->events_, 0));
  }
  events_.clear();
  if (take_owner_event(kOwnerSuspended)) {
    if (owner_ && state_ == State::kResuming) owner_->on_session_suspended(*this);
  }
  maybe_ack(false);
  if (take_owner_event(kOwnerDraining)) {
    if (owner_) owner_->on_session_draining(*this);
  }
  if (take_owner_event(kOwnerClosed)) {
    if (owner_) owner_->on_session_closed(*this, end_, end_reason_);
  }
}

void Session::dispatch(Stream& stream, uint8_t events) {
  if (events & kEventReset) {
    detach(stream);
    stream.on_peer_reset(stream.reset_code_);
    return;
  }
  // A FIN parsed before the session ended (an RDMA disconnect takes in the
  // last messages first) still counts: the stream may finish cleanly on it.
  if (events & kEventFin) stream.on_peer_fin();
  if (stream.session_ != this) return;  // it finished and detached itself
  if (events & kEventLost) {
    detach(stream);
    stream.on_session_lost(end_reason_);
    return;
  }
  if (events & kEventCredit) stream.on_send_credit();
}

void Session::notify_blocked_streams() {
  if (state_ != State::kOpen) return;
  size_t i = 0;
  for (; i < blocked_streams_.size() && usable_session_credit() > 0; ++i) {
    blocked_streams_[i]->waits_for_session_ = false;
    queue_event(*blocked_streams_[i], kEventCredit);
  }
  blocked_streams_.erase(blocked_streams_.begin(), blocked_streams_.begin() + static_cast<long>(i));
}

// --- stream-facing API ---------------------------------------------------------

bool Session::stream_api_usable(const Stream& stream) const {
  assert(!parsing_ && "a stream called its session while the session parsed frames");
  // While suspended, streams carry on: their frames wait in the session's
  // queue for the next transport, bounded by the same credit.
  return (state_ == State::kOpen || state_ == State::kResuming) && stream.session_ == this;
}

uint64_t Session::usable_session_credit() const {
  uint64_t a = session_send_.available();
  a = a > session_send_reserve_ ? a - session_send_reserve_ : 0;
  if (!resumable_) return a;
  // What a resumable session keeps for a resend is bounded by the window
  // too: a peer that grants credit but does not acknowledge would otherwise
  // make it keep every byte it ever sent, in buffers every session of the
  // worker shares. Its streams wait for the ACK as for credit. Half the
  // control backlog is headroom for the frames' headers and control frames,
  // so that a peer that acknowledges costs no throughput.
  uint64_t cap = std::min(peer_hello_.session_window, own_.session_window) + kControlBacklogLimit / 2;
  uint64_t kept = frames_->size() + frames_->retained();
  return kept >= cap ? 0 : std::min(a, cap - kept);
}

bool Session::can_open_streams() const {
  // While suspended too: the OPEN waits in the queue with every other frame
  // and goes out with the resume; if the session does not resume, the
  // stream is reset with the others. (A frozen one is moving to a new process.)
  bool usable = state_ == State::kOpen || (state_ == State::kResuming && !frozen_);
  return usable && !goaway_received_ && next_local_id_ <= settings_.max_stream_id;
}

uint32_t Session::open_credit() const {
  if (!can_open_streams()) return 0;
  uint64_t c = std::min<uint64_t>({peer_hello_.stream_window, usable_session_credit(), peer_hello_.max_data});
  return static_cast<uint32_t>(c);
}

bool Session::open_stream(Stream& stream, std::string_view target, uint8_t* buffer, uint32_t first_len,
                          const StreamOrigin* origin) {
  assert(!parsing_);
  if (!can_open_streams() || stream.session_ || first_len > open_credit()) {
    if (buffer) pool_.release(buffer);
    return false;
  }
  uint32_t id = next_local_id_;
  ByteQueue& out = *frames_;
  StreamOrigin none;
  if (origins() && !origin) origin = &none;  // the peer expects one: an empty one says nothing
  if (!origins()) origin = nullptr;
  if (buffer) {
    uint8_t* frame = encode_open_before(buffer + kBufferHeadroom, id, target, first_len, origin);
    out.adopt(buffer, static_cast<uint32_t>(frame - buffer), static_cast<uint32_t>(kBufferHeadroom + first_len));
  } else {
    size_t prefix = open_prefix_length(target, origin);
    uint8_t* p = out.append_contiguous(prefix);
    if (!p) return false;
    encode_open_before(p + prefix, id, target, 0, origin);
  }
  next_local_id_ += 2;
  attach(stream, id, peer_hello_.stream_window - first_len);
  session_send_.take(first_len);
  tally_.bytes_out(first_len);
  ++tally_.totals().frames_out;
  tally_.stream_opened();
  kick();
  if (next_local_id_ > settings_.max_stream_id) {
    // Ids are never reused: a session whose ids ran out carries its streams
    // to the end, and new ones go to a fresh session.
    log::info("session_ids_exhausted").kv("peer", peer_label()).kv("last_id", id);
    draining_announced_ = true;
    owner_events_ |= kOwnerDraining;
    request_dispatch();
  }
  return true;
}

uint32_t Session::take_stream_credit(Stream& stream, uint32_t want) {
  if (!stream_api_usable(stream)) return 0;
  uint64_t n = std::min<uint64_t>({want, peer_hello_.max_data, stream.send_.available()});
  if (n == 0) {
    tally_.credit_stall();
    stream.wants_credit_ = true;
    return 0;
  }
  stream.send_.take(n);
  return static_cast<uint32_t>(n);
}

void Session::refund_stream_credit(Stream& stream, uint32_t n) {
  if (n > 0 && stream.session_ == this) stream.send_.refund(n);
}

bool Session::take_session_credit(Stream& stream, uint32_t n) {
  if (!stream_api_usable(stream)) return false;
  if (usable_session_credit() >= n) {
    session_send_.take(n);
    return true;
  }
  tally_.credit_stall();
  if (!stream.waits_for_session_) {
    stream.waits_for_session_ = true;
    blocked_streams_.push_back(&stream);
  }
  return false;
}

void Session::send_data(Stream& stream, uint8_t* buffer, uint32_t len) {
  if (!stream_api_usable(stream)) {
    pool_.release(buffer);
    return;
  }
  // A small payload is copied into the queue's shared tail buffer and its
  // own buffer goes back at once: a burst of small messages (one per new
  // connection, say) would otherwise keep a whole buffer each while queued,
  // and every such buffer stays resident afterwards. Large ones go as they
  // are, without a copy.
  uint8_t* shared = len <= kCopyDataUpTo ? frames_->append_contiguous(kHeaderSize + len) : nullptr;
  if (shared) {
    encode_header(shared, FrameType::kData, stream.id_, len);
    memcpy(shared + kHeaderSize, buffer + kBufferHeadroom, len);
    pool_.release(buffer);
  } else {
    uint8_t* frame = buffer + kBufferHeadroom - kHeaderSize;
    encode_header(frame, FrameType::kData, stream.id_, len);
    frames_->adopt(buffer, kBufferHeadroom - kHeaderSize, static_cast<uint32_t>(kBufferHeadroom + len));
  }
  tally_.bytes_out(len);
  ++tally_.totals().frames_out;
  kick();
}

void Session::send_fin(Stream& stream) {
  if (!stream_api_usable(stream) || stream.fin_sent_) return;
  // Only a FIN that was queued counts: tunnel_done() lets a stream close its
  // application cleanly, which a dropped FIN must not.
  if (send_control(FrameType::kFin, stream.id_, 0, 0)) stream.fin_sent_ = true;
}

void Session::reset_stream(Stream& stream, ResetCode code) {
  if (stream.session_ != this) return;
  assert(!parsing_);
  send_control(FrameType::kReset, stream.id_, static_cast<uint32_t>(code), 4);
  detach(stream);
}

void Session::reset_unattached(uint32_t id, ResetCode code) {
  assert(!parsing_ && !streams_.contains(id));
  send_control(FrameType::kReset, id, static_cast<uint32_t>(code), 4);
}

void Session::delivered(Stream& stream, uint32_t n) {
  if (stream_api_usable(stream)) return_credit(stream, n);
}

void Session::return_credit(Stream& stream, uint32_t n) {
  stream.receive_.on_delivered(n);
  session_receive_.on_delivered(n);
  if (!stream.fin_received_) {  // after its FIN the peer sends nothing more on it
    uint64_t g = stream.receive_.take_grant();
    if (g > 0) send_control(FrameType::kWindow, stream.id_, g, 4);
  }
  grant_session();
}

void Session::gather(Stream& stream, std::span<const uint8_t> bytes) {
  // A batch of many tiny frames is delivered in parts, so that what a
  // session keeps for delivery stays small (the pieces are valid mid-parse).
  if (gathered_.full()) {
    deliver_gathered();
    // That delivery may have ended the session (a RESET that could not be
    // queued): nothing will deliver again, and the streams hear of the end.
    if (state_ == State::kClosed) return;
  }
  gathered_.add(stream, bytes);
}

void Session::deliver_gathered() {
  if (gathered_.empty()) return;
  ParsingScope scope(parsing_);
  gathered_.deliver([this](Stream& s, std::span<const iovec> pieces, uint32_t offered) {
    if (s.session_ == this) settle_delivery(s, s.on_peer_data(pieces), offered);  // (one that left was dropped)
  });
}

void Session::settle_delivery(Stream& stream, Stream::Delivery d, uint32_t offered) {
  if (!d.accepted) {
    log::warn("stream_reset").kv("peer", peer_label()).kv("stream", stream.id_).kv("reason", "out of buffers");
    send_control(FrameType::kReset, stream.id_, static_cast<uint32_t>(ResetCode::kResource), 4);
    stream.reset_code_ = ResetCode::kResource;
    queue_event(stream, kEventReset);
    return;
  }
  // Bytes the stream wrote to its socket at once return like any
  // delivered bytes (frames are appended to the transport; nothing
  // re-enters).
  if (d.delivered > 0) return_credit(stream, d.delivered);
  // The rest waits in the stream's queue: copied there, and its credit
  // returns only as the socket takes it. Counted so that operators (and
  // the RDMA lab bench) see how much of the payload a slow reader makes
  // rdmagw copy.
  if (offered > d.delivered) tally_.bytes_queued(offered - d.delivered);
}

void Session::deliver_piped(Stream& stream, std::span<const uint8_t> head, PipedPayload piped) {
  // Earlier frames' pieces (this stream's among them) leave first.
  deliver_gathered();
  if (stream.session_ != this) {
    // That delivery ended the session (out of buffers): nothing takes these.
    SplicePipe::discard(piped.fd, piped.bytes);
    return;
  }
  ParsingScope scope(parsing_);
  settle_delivery(stream, stream.on_peer_piped(head, piped.fd, piped.bytes),
                  static_cast<uint32_t>(head.size()) + piped.bytes);
}

bool Session::on_piped_frame(const FrameHeader& h, std::span<const uint8_t> head, int pipe_fd, uint32_t piped) {
  assert(h.type == FrameType::kData && head.size() + piped == h.length);
  piped_ = PipedPayload{pipe_fd, piped};
  bool ok = on_frame(h, head);
  // Every path through on_data() empties the pipe; one that ends in a
  // protocol error closes the transport, and its pipe with it.
  piped_ = PipedPayload{};
  return ok;
}

// --- frames from the peer ------------------------------------------------------

void Session::on_transport_closed(metrics::TransportLoss loss, std::string_view reason) {
  // An acceptor ends the transport without a word when our proof fails:
  // its clean end (FIN, RDMA disconnect) right after our proof is the only
  // answer we get. A reset, a local abort (ss -K), a timeout or an error
  // here is the transport failing, not a refusal: the session dials again.
  if (auth_ && auth_->our_proof_sent() && loss == metrics::TransportLoss::kPeerClosed) {
    if (settings_.auth->certificates())
      auth_failed(AuthFailure::kMismatch,
                  "the peer ended the connection after our certificate: it did not accept it (do the two sides "
                  "trust the same CA in tunnel.auth.ca_files? is our certificate valid now, and does it list the "
                  "address we dial from?)");
    else
      auth_failed(AuthFailure::kProof,
                  "the peer ended the connection after our proof: it holds none of the key we prove with "
                  "(do tunnel.auth.key_files differ?)");
    return;
  }
  count_transport_loss(loss);
  lose_transport(SessionEnd::kTransportFailed, reason);
}

bool Session::on_frame(const FrameHeader& h, std::span<const uint8_t> payload) {
  if (state_ == State::kClosed) return false;
  ParsingScope scope(parsing_);
  bool ok = handle_frame(h, payload);
  // Handed to the session it resumes, the transport goes on delivering
  // (to that session) although this one has closed.
  if (handed_off_) return true;
  return ok && state_ != State::kClosed && link_ != Link::kNone;
}

bool Session::handle_frame(const FrameHeader& h, std::span<const uint8_t> payload) {
  ++tally_.totals().frames_in;
  last_receive_ = loop().now();
  if (h.type == FrameType::kAuth && !auth_enabled())
    return protocol_error(
        "AUTH: the peer authenticates (tunnel.auth.mode psk there) but tunnel.auth.mode is none here");
  if (link_ == Link::kHello && h.type != FrameType::kHello)
    return protocol_error(std::string(frame_type_name(h.type)) + " before HELLO");
  if (link_ == Link::kAuth) {
    if (h.type == FrameType::kAuth) return on_auth(payload);
    if (h.type == FrameType::kHello && role_ == Role::kDialer)
      return auth_failed(AuthFailure::kMismatch, "the peer does not authenticate (its tunnel.auth.mode is none)");
    return protocol_error(std::string(frame_type_name(h.type)) + " before AUTH");
  }
  if (link_ == Link::kSession) {
    if (h.type != FrameType::kSession) return protocol_error(std::string(frame_type_name(h.type)) + " before SESSION");
    return on_session(payload);
  }
  // Session frames are counted: the count is where a resume starts.
  if (link_ == Link::kReady) {
    received_ += kHeaderSize + h.length;
    if (resumable_ && ack_due_by_volume()) request_dispatch();
  }
  std::string reason;
  switch (h.type) {
    case FrameType::kHello:
      return on_hello(payload);
    case FrameType::kSession:
      return protocol_error("SESSION after the handshake");
    case FrameType::kAuth:
      return protocol_error("AUTH after the handshake");
    case FrameType::kAck:
      return on_ack(h, payload);
    case FrameType::kOpen:
      return on_open(h, payload);
    case FrameType::kData:
      return on_data(h, payload);
    case FrameType::kWindow:
      return on_window(h, payload);
    case FrameType::kFin:
      return on_fin(h);
    case FrameType::kReset:
      return on_reset(h, payload);
    case FrameType::kPing: {
      uint64_t value;
      if (!decode_u64(h, payload, &value, &reason)) return protocol_error(reason);
      send_control(FrameType::kPong, 0, value, 8);
      return true;
    }
    case FrameType::kPong: {
      uint64_t value;
      if (!decode_u64(h, payload, &value, &reason)) return protocol_error(reason);
      // The PING's value, our clock when we sent it, echoed; anything else
      // (a value from the future, or older than any PING of ours could be)
      // is the peer's doing and says nothing about the round trip. Unsigned
      // arithmetic: a crafted value must not overflow (UB; found by
      // tests/fuzz/fuzz_session).
      uint64_t now = static_cast<uint64_t>(to_ns(loop().now()));
      constexpr uint64_t kMaxRttNs = 3600ull * 1000 * 1000 * 1000;
      if (value <= now && now - value <= kMaxRttNs) {
        rtt_us_ = static_cast<int64_t>((now - value) / 1000);
        if (settings_.metrics) settings_.metrics->session_rtt.observe_us(static_cast<uint64_t>(rtt_us_));
        if (tally_.peer()) tally_.peer()->rtt_us.set(rtt_us_);
      }
      return true;
    }
    case FrameType::kGoaway: {
      uint32_t code;
      if (!decode_u32(h, payload, &code, &reason)) return protocol_error(reason);
      if (code == static_cast<uint32_t>(GoawayCode::kClosing)) peer_closing_ = true;
      if (!goaway_received_) {
        goaway_received_ = true;
        log::info("session_goaway").kv("peer", peer_label()).kv("streams", streams_.size());
        if (!draining_announced_) {
          draining_announced_ = true;
          owner_events_ |= kOwnerDraining;
          request_dispatch();
        }
      }
      return true;
    }
  }
  return protocol_error("unhandled frame type");
}

bool Session::on_hello(std::span<const uint8_t> payload) {
  if (link_ != Link::kHello) return protocol_error("second HELLO");
  std::string reason;
  HelloPayload hello;
  if (!decode_hello(payload, &hello, &reason)) return protocol_error(reason);
  if (auth_enabled()) return hold_hello(payload, std::move(hello));
  return accept_hello(std::move(hello));
}

bool Session::accept_hello(HelloPayload hello) {
  // The peer proved itself (or, without tunnel.auth, sent a valid HELLO):
  // its transport takes its full buffers now, before our HELLO lets the
  // peer go on.
  transport_->admit();
  if (state_ == State::kResuming) {
    // The dialer resumes: the same peer, with the settings the session was
    // opened with, or the session cannot go on.
    if (!same_settings(hello)) {
      close(SessionEnd::kResumeRefused, "the peer answered the resume with other settings or another node name",
            CloseMode::kAbort);
      return false;
    }
    link_ = Link::kSession;
    if (!send_session(SessionKind::kResume)) return false;
    return true;
  }
  peer_hello_ = std::move(hello);
  peer_node_ = peer_hello_.node;
  session_send_ = SendCredit(peer_hello_.session_window);
  if (peer_hello_.session_window > own_.session_window)
    session_send_reserve_ = peer_hello_.session_window - own_.session_window;
  if (settings_.metrics && !tally_.peer())
    tally_.set_peer(&settings_.metrics->peer(peer_node_.empty() ? metrics::WorkerMetrics::kUnnamedPeer : peer_node_));
  if (role_ == Role::kAcceptor && !send_hello()) {
    close(SessionEnd::kOutOfBuffers, "out of buffers", CloseMode::kAbort);
    return false;
  }
  resumable_ = (peer_hello_.capabilities & kCapResume) && settings_.tunnel->resume_timeout_ms > 0;
  if (!resumable_) {
    link_ready();
    open_now();
    return true;
  }
  // Every session frame from now on is kept until the peer acknowledges it.
  frames_->set_retain(true);
  link_ = Link::kSession;
  if (role_ == Role::kAcceptor) return true;  // the dialer's SESSION says new or resumed
  // A new session: our frames may follow our SESSION at once; the peer's
  // answer comes first among its frames.
  if (!send_session(SessionKind::kNew)) return false;
  attach_frames();
  open_now();
  return true;
}

void Session::open_now() {
  state_ = State::kOpen;
  tally_.count_open(transport_kind_);
  last_ping_ = loop().now();
  if (goaway_out_ == GoawayOut::kPending) send_goaway();
  log::info("session_open")
      .kv("peer", peer_node_)
      .kv("transport", transport_kind_name(transport_kind_))
      .kv("role", role_ == Role::kDialer ? "dialer" : "acceptor")
      .kv("remote", remote_address_)
      .kv("resumable", resumable_);
  owner_events_ |= kOwnerOpen;
  request_dispatch();
}

bool Session::on_open(const FrameHeader& h, std::span<const uint8_t> payload) {
  uint32_t id = h.stream_id;
  if (!is_remote_id(id)) return protocol_error("OPEN with a stream id of our parity: " + std::to_string(id));
  if (id <= highest_remote_id_) return protocol_error("OPEN reuses stream id " + std::to_string(id));
  std::string reason;
  OpenPayload open;
  if (!decode_open(payload, &open, &reason, origins())) return protocol_error(reason);
  uint32_t first = static_cast<uint32_t>(open.first_bytes.size());
  if (first > own_.stream_window || !session_receive_.on_receive(first))
    return protocol_error("OPEN first bytes exceed the window");
  highest_remote_id_ = id;
  tally_.bytes_in(first);

  ResetCode refuse = ResetCode::kRefused;
  Stream* stream = nullptr;
  if (goaway_out_ == GoawayOut::kSent) {
    refuse = ResetCode::kShutdown;
  } else if (!within_open_limits(id)) {
    refuse = ResetCode::kResource;
  } else if (owner_) {
    stream = owner_->on_stream_open(*this, id, open.target, open.has_origin ? &open.origin : nullptr, &refuse);
  }
  if (!stream) {
    if (goaway_out_ != GoawayOut::kSent) ++tally_.totals().streams_refused;
    session_receive_.on_delivered(first);
    send_control(FrameType::kReset, id, static_cast<uint32_t>(refuse), 4);
    grant_session();
    return true;
  }
  tally_.stream_opened();
  attach(*stream, id, peer_hello_.stream_window);
  stream->receive_.on_receive(first);
  if (first > 0) gather(*stream, open.first_bytes);
  return true;
}

bool Session::within_open_limits(uint32_t id) {
  const TunnelLimits& limits = settings_.tunnel->limits;
  bool too_many = limits.streams_per_session && peer_streams_ >= limits.streams_per_session;
  bool too_fast = !too_many && limits.opens_per_second && !peer_opens_.take(loop().now());
  if (!too_many && !too_fast) return true;
  if (settings_.metrics) settings_.metrics->failed(metrics::StreamFailure::kLimit);
  uint64_t suppressed = 0;
  if (open_limit_log_.allow(loop().now(), &suppressed)) {
    log::Line line = log::warn("stream_refused");
    line.kv("peer", peer_label()).kv("stream", id).kv("reason", "limit");
    if (too_many)
      line.kv("limit", "tunnel.limits.streams_per_session").kv("streams", peer_streams_);
    else
      line.kv("limit", "tunnel.limits.opens_per_second").kv("per_second", limits.opens_per_second);
    if (suppressed) line.kv("suppressed", suppressed);
  }
  return false;
}

bool Session::on_data(const FrameHeader& h, std::span<const uint8_t> payload) {
  uint32_t n = h.length;
  bool known = false;
  Stream* stream = find_stream(h.stream_id, &known);
  if (!stream) {
    if (!known) return protocol_error("DATA on unknown stream " + std::to_string(h.stream_id));
    // Late data for a stream we already reset: drop it, keep the budget whole.
    if (!session_receive_.on_receive(n)) return protocol_error("DATA exceeds the session window");
    if (piped_.bytes > 0 && !SplicePipe::discard(piped_.fd, piped_.bytes))
      return protocol_error("a piped DATA payload could not be read from its pipe");
    session_receive_.on_delivered(n);
    grant_session();
    return true;
  }
  if (stream->fin_received_) return protocol_error("DATA after FIN on stream " + std::to_string(h.stream_id));
  if (!stream->receive_.on_receive(n))
    return protocol_error("DATA overruns the window of stream " + std::to_string(h.stream_id));
  if (!session_receive_.on_receive(n)) return protocol_error("DATA exceeds the session window");
  tally_.bytes_in(n);
  if (piped_.fd >= 0)
    deliver_piped(*stream, payload, piped_);
  else if (n > 0)
    gather(*stream, payload);
  return true;
}

bool Session::on_window(const FrameHeader& h, std::span<const uint8_t> payload) {
  std::string reason;
  uint32_t n;
  if (!decode_u32(h, payload, &n, &reason)) return protocol_error(reason);
  if (h.stream_id == 0) {
    if (!session_send_.grant(n, peer_hello_.session_window))
      return protocol_error("session WINDOW of " + std::to_string(n) + " exceeds the peer's own budget");
    notify_blocked_streams();
    return true;
  }
  bool known = false;
  Stream* stream = find_stream(h.stream_id, &known);
  if (!stream) {
    if (!known) return protocol_error("WINDOW on unknown stream " + std::to_string(h.stream_id));
    return true;
  }
  if (!stream->send_.grant(n, peer_hello_.stream_window))
    return protocol_error("WINDOW of " + std::to_string(n) + " overflows stream " + std::to_string(h.stream_id));
  if (stream->wants_credit_) {
    stream->wants_credit_ = false;
    queue_event(*stream, kEventCredit);
  }
  return true;
}

bool Session::on_fin(const FrameHeader& h) {
  bool known = false;
  Stream* stream = find_stream(h.stream_id, &known);
  if (!stream) {
    if (!known) return protocol_error("FIN on unknown stream " + std::to_string(h.stream_id));
    return true;
  }
  if (stream->fin_received_) return protocol_error("second FIN on stream " + std::to_string(h.stream_id));
  stream->fin_received_ = true;
  queue_event(*stream, kEventFin);
  return true;
}

bool Session::on_reset(const FrameHeader& h, std::span<const uint8_t> payload) {
  std::string reason;
  uint32_t code;
  if (!decode_u32(h, payload, &code, &reason)) return protocol_error(reason);
  bool known = false;
  Stream* stream = find_stream(h.stream_id, &known);
  if (!stream) {
    if (!known) return protocol_error("RESET on unknown stream " + std::to_string(h.stream_id));
    return true;
  }
  // Codes we do not know (a newer peer) still reset: as a protocol-level cancel.
  stream->reset_code_ =
      code <= static_cast<uint32_t>(ResetCode::kShutdown) ? static_cast<ResetCode>(code) : ResetCode::kProtocol;
  queue_event(*stream, kEventReset);
  return true;
}

}  // namespace rdmagw::tunnel
