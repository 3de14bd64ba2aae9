#include "proxy/tunnel/session.h"

#include <algorithm>

#include "common/log.h"

namespace rdmagw::tunnel {

namespace {
int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

Session::Session(EventLoop& loop, BufferPool& pool, Role role, const SessionSettings& settings,
                 Transport* transport, SessionOwner* owner)
    : loop_(loop),
      pool_(pool),
      role_(role),
      settings_(settings),
      transport_(transport),
      owner_(owner),
      next_local_id_(role == Role::kDialer ? 1 : 2),
      session_receive_(settings.session_window) {
  started_ = last_receive_ = last_ping_ = loop_.now();
  started_wall_ = Clock::now();
  if (settings_.metrics && !settings_.peer_label.empty()) peer_metrics_ = &settings_.metrics->peer(settings_.peer_label);
}

Session::~Session() {
  count_session_closed();
  if (transport_) transport_->close();
}

void Session::count_bytes_out(uint64_t n) {
  counters_.bytes_out += n;
  if (peer_metrics_) peer_metrics_->bytes_sent.add(n);
}

void Session::count_bytes_in(uint64_t n) {
  counters_.bytes_in += n;
  if (peer_metrics_) peer_metrics_->bytes_received.add(n);
}

void Session::count_credit_stall() {
  ++counters_.credit_stalls;
  if (peer_metrics_) peer_metrics_->credit_stalls.add();
}

void Session::count_stream_opened() {
  ++counters_.streams_opened;
  if (peer_metrics_) peer_metrics_->streams_opened.add();
}

metrics::Gauge* Session::sessions_gauge() const {
  if (!peer_metrics_ || !transport_) return nullptr;
  return transport_->kind() == "rdma" ? &peer_metrics_->sessions_rdma : &peer_metrics_->sessions_tcp;
}

void Session::count_session_closed() {
  if (!counted_open_) return;
  counted_open_ = false;
  counted_gauge_->sub();
}

void Session::describe(admin::SessionInfo* out) const {
  out->role = role_ == Role::kDialer ? "dialer" : "acceptor";
  out->transport = std::string(transport_kind());
  out->state = state_ == State::kHandshake ? "handshake"
               : state_ == State::kClosed  ? "closed"
               : (goaway_sent_ || goaway_received_) ? "draining"
                                                    : "open";
  out->remote_address = transport_ ? transport_->remote_address() : std::string();
  out->peer_node = peer_node_;
  out->rtt_us = rtt_us_;
  out->age_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_wall_).count());
  out->streams = streams_.size();
  out->streams_opened = counters_.streams_opened;
  out->bytes_sent = counters_.bytes_out;
  out->bytes_received = counters_.bytes_in;
  out->credit_stalls = counters_.credit_stalls;
  if (transport_) transport_->describe(out);
}

std::string_view Session::transport_kind() const { return transport_ ? transport_->kind() : "none"; }

std::string Session::peer_label() const {
  return peer_node_.empty() ? std::string("?") : peer_node_;
}

void Session::start() {
  transport_->start(&sink_);
  // The dialer speaks first (RDMA CM's active side must); the acceptor
  // answers from on_hello().
  if (role_ == Role::kDialer && !send_hello()) close("out of buffers");
}

bool Session::send_hello() {
  HelloPayload hello;
  hello.max_data = settings_.max_data;
  hello.stream_window = settings_.stream_window;
  hello.session_window = settings_.session_window;
  hello.node = settings_.node.substr(0, kMaxNodeNameLength);
  uint8_t* out = transport_->outbound().append_contiguous(kHeaderSize + kHelloFixedSize + hello.node.size());
  if (!out) return false;
  encode_hello(out, hello);
  transport_->request_send();
  return true;
}

void Session::tick(Clock::time_point now) {
  if (state_ == State::kClosed) return;
  if (!failure_.empty()) {
    close(failure_);
    return;
  }
  notify_blocked_streams();
  if (state_ == State::kHandshake) {
    if (now - started_ > std::chrono::milliseconds(settings_.handshake_timeout_ms)) close("handshake timeout");
    return;
  }
  if (now - last_receive_ > std::chrono::milliseconds(settings_.keepalive_timeout_ms)) {
    close("keepalive timeout: nothing received for " + std::to_string(settings_.keepalive_timeout_ms) + " ms");
    return;
  }
  if (now - last_ping_ >= std::chrono::milliseconds(settings_.keepalive_interval_ms)) {
    last_ping_ = now;
    send_control(FrameType::kPing, 0, static_cast<uint64_t>(to_ns(now)), 8);
  }
}

void Session::close(std::string_view reason, bool flush) {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  count_session_closed();
  log::info("session_closed")
      .kv("peer", peer_label())
      .kv("transport", transport_kind())
      .kv("streams", streams_.size())
      .kv("reason", reason);
  if (transport_) {
    transport_->close(flush);
    transport_ = nullptr;
  }
  // Endpoints may run arbitrary teardown: detach them all first.
  std::unordered_map<uint32_t, StreamState> streams;
  streams.swap(streams_);
  blocked_streams_.clear();
  for (auto& [id, s] : streams) {
    if (!s.endpoint) continue;
    // Both directions ended in the protocol: what is left (bytes queued for
    // the local socket) needs no session, so it is not lost with it.
    if (s.fin_received && s.fin_sent) s.endpoint->on_detached();
    else s.endpoint->on_reset(ResetCode::kPeerGone);
  }
  owner_->on_session_closed(*this, reason);
}

void Session::send_goaway() {
  if (goaway_sent_ || state_ == State::kClosed) return;
  if (state_ == State::kHandshake) {
    // Our HELLO must come first; on_hello() sends the GOAWAY after it.
    goaway_pending_ = true;
    return;
  }
  goaway_sent_ = true;
  send_control(FrameType::kGoaway, 0, 0, 4);
}

bool Session::protocol_error(std::string reason) {
  log::warn("session_error")
      .kv("peer", peer_label())
      .kv("remote", transport_ ? transport_->remote_address() : std::string("?"))
      .kv("reason", "malformed frame: " + reason);
  close("protocol error: " + reason);
  return false;
}

bool Session::was_opened(uint32_t id) const {
  if (is_remote_id(id)) return id <= highest_remote_id_;
  return id < next_local_id_;
}

void Session::forget(std::unordered_map<uint32_t, StreamState>::iterator it) {
  // Bytes the endpoint still held are dropped with it: return them to the
  // session budget or the session would slowly starve.
  session_receive_.on_delivered(it->second.receive.buffered());
  streams_.erase(it);
  grant_session();
}

void Session::grant_session() {
  if (state_ != State::kOpen) return;
  uint64_t n = session_receive_.take_grant();
  while (n > 0) {
    uint32_t part = static_cast<uint32_t>(std::min<uint64_t>(n, 0xffffffffu));
    send_control(FrameType::kWindow, 0, part, 4);
    n -= part;
  }
}

void Session::send_control(FrameType type, uint32_t id, uint64_t value, size_t value_size) {
  if (state_ == State::kClosed || !transport_) return;
  if (!failure_.empty()) return;
  // DATA in the queue is bounded by the peer's session window. Beyond that
  // only control frames pile up, i.e. answers to a peer that keeps sending
  // (PINGs, OPENs we refuse) but does not read: end it before it eats the
  // worker's buffers, which other sessions share.
  size_t queued = transport_->outbound().size();
  if (queued > std::min(peer_hello_.session_window, settings_.session_window) + kControlBacklogLimit) {
    failure_ = "peer is not reading (" + std::to_string(queued) + " bytes queued)";
    return;
  }
  uint8_t* out = transport_->outbound().append_contiguous(kHeaderSize + value_size);
  if (!out) {
    // Callers are stream endpoints in the middle of their own work: closing
    // here would free them under their feet. Fail now, close on the tick.
    failure_ = "out of buffers for control frames";
    return;
  }
  if (value_size == 8) encode_u64_frame(out, type, id, value);
  else if (value_size == 4) encode_u32_frame(out, type, id, static_cast<uint32_t>(value));
  else encode_empty_frame(out, type, id);
  ++counters_.frames_out;
  transport_->request_send();
}

// --- stream-facing API ---------------------------------------------------------

uint64_t Session::usable_session_credit() const {
  uint64_t a = session_send_.available();
  return a > session_send_reserve_ ? a - session_send_reserve_ : 0;
}

uint32_t Session::open_credit() const {
  if (state_ != State::kOpen) return 0;
  uint64_t c = std::min<uint64_t>({peer_hello_.stream_window, usable_session_credit(), peer_hello_.max_data});
  return static_cast<uint32_t>(c);
}

uint32_t Session::open_stream(StreamEndpoint* endpoint, std::string_view target, uint8_t* buffer,
                              uint32_t first_len) {
  if (state_ != State::kOpen || !transport_ || !failure_.empty() || first_len > open_credit()) {
    if (buffer) pool_.release(buffer);
    return 0;
  }
  uint32_t id = next_local_id_;
  next_local_id_ += 2;
  StreamState& s = streams_[id];
  s.endpoint = endpoint;
  s.send = SendCredit(peer_hello_.stream_window - first_len);
  s.receive = ReceiveWindow(settings_.stream_window);
  session_send_.take(first_len);
  ByteQueue& out = transport_->outbound();
  if (buffer) {
    uint8_t* frame = encode_open_before(buffer + kBufferHeadroom, id, target, first_len);
    out.adopt(buffer, static_cast<uint32_t>(frame - buffer), static_cast<uint32_t>(kBufferHeadroom + first_len));
  } else {
    uint8_t* p = out.append_contiguous(kHeaderSize + 2 + target.size());
    if (!p) {
      streams_.erase(id);
      return 0;
    }
    encode_open_before(p + kHeaderSize + 2 + target.size(), id, target, 0);
  }
  count_bytes_out(first_len);
  ++counters_.frames_out;
  count_stream_opened();
  transport_->request_send();
  return id;
}

uint32_t Session::take_stream_credit(uint32_t id, uint32_t want) {
  auto it = streams_.find(id);
  if (it == streams_.end() || state_ != State::kOpen) return 0;
  StreamState& s = it->second;
  uint64_t n = std::min<uint64_t>({want, peer_hello_.max_data, s.send.available()});
  if (n == 0) {
    count_credit_stall();
    s.wants_credit = true;
    return 0;
  }
  s.send.take(n);
  return static_cast<uint32_t>(n);
}

void Session::refund_stream_credit(uint32_t id, uint32_t n) {
  auto it = streams_.find(id);
  if (n > 0 && it != streams_.end()) it->second.send.refund(n);
}

bool Session::take_session_credit(uint32_t id, uint32_t n) {
  auto it = streams_.find(id);
  if (it == streams_.end() || state_ != State::kOpen) return false;
  if (usable_session_credit() >= n) {
    session_send_.take(n);
    return true;
  }
  count_credit_stall();
  if (!it->second.waits_for_session) {
    it->second.waits_for_session = true;
    blocked_streams_.push_back(id);
  }
  return false;
}

void Session::send_data(uint32_t id, uint8_t* buffer, uint32_t len) {
  if (state_ == State::kClosed || !transport_) {
    pool_.release(buffer);
    return;
  }
  uint8_t* frame = buffer + kBufferHeadroom - kHeaderSize;
  encode_header(frame, FrameType::kData, id, len);
  transport_->outbound().adopt(buffer, kBufferHeadroom - kHeaderSize, static_cast<uint32_t>(kBufferHeadroom + len));
  count_bytes_out(len);
  ++counters_.frames_out;
  transport_->request_send();
}

void Session::send_fin(uint32_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end()) it->second.fin_sent = true;
  send_control(FrameType::kFin, id, 0, 0);
}

void Session::reset_stream(uint32_t id, ResetCode code) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  send_control(FrameType::kReset, id, static_cast<uint32_t>(code), 4);
  forget(it);
}

void Session::stream_done(uint32_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end()) forget(it);
}

void Session::delivered(uint32_t id, uint32_t n) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;  // already forgotten; forget() returned its bytes
  StreamState& s = it->second;
  s.receive.on_delivered(n);
  session_receive_.on_delivered(n);
  if (!s.fin_received) {
    uint64_t g = s.receive.take_grant();
    if (g > 0) send_control(FrameType::kWindow, id, g, 4);
  }
  grant_session();
}

void Session::notify_blocked_streams() {
  if (blocked_streams_.empty()) return;
  std::vector<uint32_t> blocked;
  blocked.swap(blocked_streams_);
  for (size_t i = 0; i < blocked.size(); ++i) {
    uint32_t id = blocked[i];
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;
    if (usable_session_credit() == 0) {
      // Still nothing to hand out: keep the rest waiting, in order.
      blocked_streams_.insert(blocked_streams_.end(), blocked.begin() + static_cast<long>(i), blocked.end());
      return;
    }
    it->second.waits_for_session = false;
    if (it->second.endpoint) it->second.endpoint->on_send_credit();
    if (state_ == State::kClosed) return;
  }
}

// --- frames from the peer ------------------------------------------------------

void Session::handle_transport_closed(std::string_view reason) { close(reason); }

bool Session::handle_frame(const FrameHeader& h, std::span<const uint8_t> payload) {
  if (state_ == State::kClosed) return false;
  ++counters_.frames_in;
  last_receive_ = loop_.now();
  if (state_ == State::kHandshake && h.type != FrameType::kHello)
    return protocol_error(std::string(frame_type_name(h.type)) + " before HELLO");
  std::string reason;
  switch (h.type) {
    case FrameType::kHello:
      return on_hello(payload);
    case FrameType::kOpen:
      return on_open(h, payload);
    case FrameType::kData:
      return on_data(h, payload);
    case FrameType::kWindow:
      return on_window(h, payload);
    case FrameType::kFin: {
      auto it = streams_.find(h.stream_id);
      if (it == streams_.end()) {
        if (!was_opened(h.stream_id)) return protocol_error("FIN on unknown stream " + std::to_string(h.stream_id));
        return true;
      }
      if (it->second.fin_received) return protocol_error("second FIN on stream " + std::to_string(h.stream_id));
      it->second.fin_received = true;
      if (it->second.endpoint) it->second.endpoint->on_fin();
      return state_ != State::kClosed;
    }
    case FrameType::kReset: {
      uint32_t code;
      if (!decode_u32(h, payload, &code, &reason)) return protocol_error(reason);
      auto it = streams_.find(h.stream_id);
      if (it == streams_.end()) {
        if (!was_opened(h.stream_id)) return protocol_error("RESET on unknown stream " + std::to_string(h.stream_id));
        return true;
      }
      StreamEndpoint* endpoint = it->second.endpoint;
      forget(it);
      if (endpoint) endpoint->on_reset(static_cast<ResetCode>(code));
      return state_ != State::kClosed;
    }
    case FrameType::kPing: {
      uint64_t value;
      if (!decode_u64(h, payload, &value, &reason)) return protocol_error(reason);
      send_control(FrameType::kPong, 0, value, 8);
      return state_ != State::kClosed;
    }
    case FrameType::kPong: {
      uint64_t value;
      if (!decode_u64(h, payload, &value, &reason)) return protocol_error(reason);
      int64_t rtt = to_ns(loop_.now()) - static_cast<int64_t>(value);
      if (rtt >= 0) {
        rtt_us_ = rtt / 1000;
        if (settings_.metrics) settings_.metrics->session_rtt.observe_us(static_cast<uint64_t>(rtt_us_));
      }
      return true;
    }
    case FrameType::kGoaway: {
      uint32_t code;
      if (!decode_u32(h, payload, &code, &reason)) return protocol_error(reason);
      if (!goaway_received_) {
        goaway_received_ = true;
        log::info("session_goaway").kv("peer", peer_label()).kv("streams", streams_.size());
        owner_->on_goaway(*this);
      }
      return state_ != State::kClosed;
    }
  }
  return protocol_error("unhandled frame type");
}

bool Session::on_hello(std::span<const uint8_t> payload) {
  if (state_ != State::kHandshake) return protocol_error("second HELLO");
  std::string reason;
  if (!decode_hello(payload, &peer_hello_, &reason)) return protocol_error(reason);
  peer_node_ = peer_hello_.node;
  session_send_ = SendCredit(peer_hello_.session_window);
  if (peer_hello_.session_window > settings_.session_window)
    session_send_reserve_ = peer_hello_.session_window - settings_.session_window;
  state_ = State::kOpen;
  if (settings_.metrics && !peer_metrics_)
    peer_metrics_ = &settings_.metrics->peer(peer_node_.empty() ? metrics::WorkerMetrics::kUnnamedPeer : peer_node_);
  counted_gauge_ = sessions_gauge();
  if (counted_gauge_) {
    counted_gauge_->add();
    counted_open_ = true;
  }
  if (role_ == Role::kAcceptor && !send_hello()) {
    close("out of buffers");
    return false;
  }
  last_ping_ = loop_.now();
  if (goaway_pending_) send_goaway();
  log::info("session_open")
      .kv("peer", peer_node_)
      .kv("transport", transport_kind())
      .kv("role", role_ == Role::kDialer ? "dialer" : "acceptor")
      .kv("remote", transport_->remote_address());
  owner_->on_session_open(*this);
  return state_ != State::kClosed;
}

bool Session::on_open(const FrameHeader& h, std::span<const uint8_t> payload) {
  uint32_t id = h.stream_id;
  if (!is_remote_id(id)) return protocol_error("OPEN with a stream id of our parity: " + std::to_string(id));
  if (id <= highest_remote_id_) return protocol_error("OPEN reuses stream id " + std::to_string(id));
  std::string reason;
  OpenPayload open;
  if (!decode_open(payload, &open, &reason)) return protocol_error(reason);
  uint32_t first = static_cast<uint32_t>(open.first_bytes.size());
  if (first > settings_.stream_window || !session_receive_.on_receive(first))
    return protocol_error("OPEN first bytes exceed the window");
  highest_remote_id_ = id;
  count_bytes_in(first);

  if (goaway_sent_) {
    session_receive_.on_delivered(first);
    send_control(FrameType::kReset, id, static_cast<uint32_t>(ResetCode::kShutdown), 4);
    grant_session();
    return state_ != State::kClosed;
  }
  StreamState& s = streams_[id];
  s.send = SendCredit(peer_hello_.stream_window);
  s.receive = ReceiveWindow(settings_.stream_window);
  s.receive.on_receive(first);
  ResetCode refuse = ResetCode::kRefused;
  StreamEndpoint* endpoint = owner_->on_stream_open(*this, id, open.target, &refuse);
  if (state_ == State::kClosed) return false;
  auto it = streams_.find(id);
  if (it == streams_.end()) return true;
  if (!endpoint) {
    ++counters_.streams_refused;
    send_control(FrameType::kReset, id, static_cast<uint32_t>(refuse), 4);
    forget(it);
    return state_ != State::kClosed;
  }
  count_stream_opened();
  it->second.endpoint = endpoint;
  if (first > 0 && !endpoint->on_data(open.first_bytes)) {
    reset_stream(id, ResetCode::kResource);
    endpoint->on_reset(ResetCode::kResource);
  }
  return state_ != State::kClosed;
}

bool Session::on_data(const FrameHeader& h, std::span<const uint8_t> payload) {
  uint32_t n = h.length;
  auto it = streams_.find(h.stream_id);
  if (it == streams_.end()) {
    if (!was_opened(h.stream_id)) return protocol_error("DATA on unknown stream " + std::to_string(h.stream_id));
    // Late data for a stream we already reset: drop it, keep the budget whole.
    if (!session_receive_.on_receive(n)) return protocol_error("DATA exceeds the session window");
    session_receive_.on_delivered(n);
    grant_session();
    return state_ != State::kClosed;
  }
  StreamState& s = it->second;
  if (s.fin_received) return protocol_error("DATA after FIN on stream " + std::to_string(h.stream_id));
  if (!s.receive.on_receive(n))
    return protocol_error("DATA overruns the window of stream " + std::to_string(h.stream_id));
  if (!session_receive_.on_receive(n)) return protocol_error("DATA exceeds the session window");
  count_bytes_in(n);
  if (n == 0) return true;
  StreamEndpoint* endpoint = s.endpoint;
  if (!endpoint->on_data(payload)) {
    log::warn("stream_reset").kv("peer", peer_label()).kv("stream", h.stream_id).kv("reason", "out of buffers");
    reset_stream(h.stream_id, ResetCode::kResource);
    endpoint->on_reset(ResetCode::kResource);
  }
  return state_ != State::kClosed;
}

bool Session::on_window(const FrameHeader& h, std::span<const uint8_t> payload) {
  std::string reason;
  uint32_t n;
  if (!decode_u32(h, payload, &n, &reason)) return protocol_error(reason);
  if (h.stream_id == 0) {
    if (!session_send_.grant(n, peer_hello_.session_window))
      return protocol_error("session WINDOW of " + std::to_string(n) + " exceeds the peer's own budget");
    notify_blocked_streams();
    return state_ != State::kClosed;
  }
  auto it = streams_.find(h.stream_id);
  if (it == streams_.end()) {
    if (!was_opened(h.stream_id)) return protocol_error("WINDOW on unknown stream " + std::to_string(h.stream_id));
    return true;
  }
  StreamState& s = it->second;
  if (!s.send.grant(n, peer_hello_.stream_window))
    return protocol_error("WINDOW of " + std::to_string(n) + " overflows stream " + std::to_string(h.stream_id));
  if (s.wants_credit) {
    s.wants_credit = false;
    if (s.endpoint) s.endpoint->on_send_credit();
  }
  return state_ != State::kClosed;
}

}  // namespace rdmagw::tunnel
