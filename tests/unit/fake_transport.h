#pragma once
// Fakes for driving a tunnel::Session frame by frame in unit tests:
//
// - FakeTransport: a tunnel::Transport (an IoObject on a real EventLoop) that
//   keeps what the session queues in outbound() for the test to decode
//   (written()), lets the test inject frames as a peer would (inject()),
//   records close(mode) and can report the carrier failing (fail()).
// - FakeOwner: a SessionOwner that records what it is told and hands out
//   the streams the test queued for the peer's OPENs (or refuses them).
// - FakeStream: a tunnel::Stream that records its hooks and can refuse
//   payload or report it delivered at once; its other hooks may run test
//   code (which may call the session: they run after the batch).
//
// Frames to inject are built with the *_bytes() helpers (frame.h encoders).
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/buffer_pool.h"
#include "common/byte_queue.h"
#include "proxy/io/event_loop.h"
#include "proxy/io/io_object.h"
#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/session.h"
#include "proxy/tunnel/stream.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::test {

using Bytes = std::vector<uint8_t>;

// One frame the session wrote, decoded.
struct Frame {
  tunnel::FrameHeader header{};
  Bytes payload;

  tunnel::FrameType type() const { return header.type; }
  uint32_t id() const { return header.stream_id; }
  uint32_t u32() const {
    if (payload.size() != 4) throw std::runtime_error("frame payload is not a u32");
    return tunnel::get_u32(payload.data());
  }
  uint64_t u64() const {
    if (payload.size() != 8) throw std::runtime_error("frame payload is not a u64");
    return tunnel::get_u64(payload.data());
  }
  std::string text() const { return std::string(payload.begin(), payload.end()); }
  bool is(tunnel::FrameType t, uint32_t stream_id) const { return type() == t && id() == stream_id; }
};

// Frames of one type among `frames`.
inline std::vector<Frame> of_type(const std::vector<Frame>& frames, tunnel::FrameType type) {
  std::vector<Frame> out;
  for (const Frame& f : frames)
    if (f.type() == type) out.push_back(f);
  return out;
}

// A clock reading as PING carries it (the sender's steady clock, in ns).
inline int64_t clock_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// --- frames to inject ---------------------------------------------------------

inline Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

inline tunnel::HelloPayload hello(uint32_t max_data, uint32_t stream_window, uint64_t session_window,
                                  std::string node = "peer") {
  tunnel::HelloPayload h;
  h.max_data = max_data;
  h.stream_window = stream_window;
  h.session_window = session_window;
  h.node = std::move(node);
  return h;
}

inline Bytes hello_bytes(const tunnel::HelloPayload& h) {
  Bytes out(tunnel::kHeaderSize + tunnel::kHelloFixedSize + h.node.size());
  tunnel::encode_hello(out.data(), h);
  return out;
}

inline Bytes open_bytes(uint32_t id, std::string_view target, std::string_view first = {}) {
  size_t before = tunnel::kHeaderSize + 2 + target.size();
  Bytes out(before + first.size());
  std::copy(first.begin(), first.end(), out.begin() + static_cast<long>(before));
  uint8_t* frame = tunnel::encode_open_before(out.data() + before, id, target, static_cast<uint32_t>(first.size()));
  if (frame != out.data()) throw std::logic_error("encode_open_before did not start at the buffer");
  return out;
}

// Any payload after a valid header: for payloads the session must reject.
inline Bytes raw_bytes(tunnel::FrameType type, uint32_t id, const Bytes& payload) {
  Bytes out(tunnel::kHeaderSize);
  tunnel::encode_header(out.data(), type, id, static_cast<uint32_t>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

inline Bytes data_bytes(uint32_t id, std::string_view payload) {
  return raw_bytes(tunnel::FrameType::kData, id, Bytes(payload.begin(), payload.end()));
}
inline Bytes data_bytes(uint32_t id, size_t n, char fill = 'x') { return data_bytes(id, std::string(n, fill)); }

inline Bytes u32_bytes(tunnel::FrameType type, uint32_t id, uint32_t value) {
  Bytes out(tunnel::kHeaderSize + 4);
  tunnel::encode_u32_frame(out.data(), type, id, value);
  return out;
}
inline Bytes u64_bytes(tunnel::FrameType type, uint32_t id, uint64_t value) {
  Bytes out(tunnel::kHeaderSize + 8);
  tunnel::encode_u64_frame(out.data(), type, id, value);
  return out;
}
inline Bytes empty_bytes(tunnel::FrameType type, uint32_t id) {
  Bytes out(tunnel::kHeaderSize);
  tunnel::encode_empty_frame(out.data(), type, id);
  return out;
}
inline Bytes window_bytes(uint32_t id, uint32_t n) { return u32_bytes(tunnel::FrameType::kWindow, id, n); }
inline Bytes fin_bytes(uint32_t id) { return empty_bytes(tunnel::FrameType::kFin, id); }
inline Bytes reset_bytes(uint32_t id, uint32_t code) { return u32_bytes(tunnel::FrameType::kReset, id, code); }
inline Bytes reset_bytes(uint32_t id, tunnel::ResetCode code) { return reset_bytes(id, static_cast<uint32_t>(code)); }
inline Bytes ping_bytes(uint64_t v) { return u64_bytes(tunnel::FrameType::kPing, 0, v); }
inline Bytes pong_bytes(uint64_t v) { return u64_bytes(tunnel::FrameType::kPong, 0, v); }
inline Bytes goaway_bytes(uint32_t code = 0) { return u32_bytes(tunnel::FrameType::kGoaway, 0, code); }

// --- the transport --------------------------------------------------------------

class FakeTransport final : public tunnel::Transport {
 public:
  // `inbound_max_data` bounds DATA in injected frames, as a real transport
  // bounds them by the session's max_data when it validates headers.
  FakeTransport(EventLoop& loop, BufferPool& pool, uint32_t inbound_max_data)
      : Transport(loop), out_(&pool), inbound_max_data_(inbound_max_data) {}

  tunnel::TransportKind kind() const override { return tunnel::TransportKind::kTcp; }
  void start(tunnel::TransportSink* sink) override {
    sink_ = sink;
    ++starts;
  }
  ByteQueue& outbound() override { return out_; }
  void request_send() override { ++send_requests; }
  void close(tunnel::CloseMode mode) override {
    closes.push_back(mode);
    sink_ = nullptr;  // the sink is never called again
  }
  std::string remote_address() const override { return "fake:0"; }

  // --- the test's side ---

  // Feeds `bytes` as the peer's transport would: each header-validated frame
  // goes to the sink, until the sink answers false (it closed us) or the
  // bytes end. Returns how many frames the sink was handed.
  size_t inject(const Bytes& bytes) {
    size_t handed = 0;
    size_t off = 0;
    tunnel::FrameReader reader(inbound_max_data_);
    while (sink_ && off < bytes.size()) {
      tunnel::FrameHeader h;
      std::span<const uint8_t> payload;
      size_t used = 0;
      std::string reason;
      auto status = reader.next(bytes.data() + off, bytes.size() - off, &h, &payload, &used, &reason);
      if (status != tunnel::FrameReader::Status::kFrame)
        throw std::logic_error("injected bytes are not whole valid frames: " + reason);
      ++handed;
      off += used;
      if (!sink_->on_frame(h, payload)) {
        ++refusals;
        break;
      }
    }
    return handed;
  }

  // The carrier failed: tells the sink (once).
  void fail(std::string_view reason) {
    tunnel::TransportSink* sink = sink_;
    sink_ = nullptr;
    if (sink) sink->on_transport_closed(reason);
  }

  // Decodes and drains every frame the session queued so far.
  std::vector<Frame> written() {
    Bytes wire;
    iovec iov[64];
    while (!out_.empty()) {
      int n = out_.front_iovecs(iov, 64);
      size_t total = 0;
      for (int i = 0; i < n; ++i) {
        auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        wire.insert(wire.end(), p, p + iov[i].iov_len);
        total += iov[i].iov_len;
      }
      out_.consume(total);
    }
    std::vector<Frame> frames;
    tunnel::FrameReader reader(1024 * 1024);
    size_t off = 0;
    while (off < wire.size()) {
      Frame f;
      std::span<const uint8_t> payload;
      size_t used = 0;
      std::string reason;
      auto status = reader.next(wire.data() + off, wire.size() - off, &f.header, &payload, &used, &reason);
      if (status != tunnel::FrameReader::Status::kFrame)
        throw std::runtime_error("the session wrote bytes that are not whole valid frames: " + reason);
      f.payload.assign(payload.begin(), payload.end());
      frames.push_back(std::move(f));
      off += used;
    }
    return frames;
  }
  size_t queued_bytes() const { return out_.size(); }
  bool delivering() const { return sink_ != nullptr; }

  int starts = 0;
  int send_requests = 0;
  int refusals = 0;  // on_frame() answered false
  std::vector<tunnel::CloseMode> closes;

 private:
  ByteQueue out_;
  uint32_t inbound_max_data_;
  tunnel::TransportSink* sink_ = nullptr;
};

// --- the owner -----------------------------------------------------------------

class FakeOwner final : public tunnel::SessionOwner {
 public:
  struct Closed {
    tunnel::SessionEnd end;
    std::string reason;
  };
  struct OpenRequest {
    uint32_t id;
    std::string target;
  };

  explicit FakeOwner(std::vector<std::string>* log = nullptr) : log_(log) {}

  // The next peer OPEN gets `stream`; OPENs with none queued are refused
  // with refuse_code.
  void give(tunnel::Stream& stream) { to_give_.push_back(&stream); }

  void on_session_open(tunnel::Session&) override {
    ++opened;
    note("owner:open");
  }
  void on_session_closed(tunnel::Session&, tunnel::SessionEnd end, std::string_view reason) override {
    closed.push_back({end, std::string(reason)});
    note("owner:closed");
  }
  void on_session_draining(tunnel::Session&) override {
    ++draining;
    note("owner:draining");
  }
  tunnel::Stream* on_stream_open(tunnel::Session&, uint32_t id, std::string_view target,
                                 tunnel::ResetCode* refuse) override {
    open_requests.push_back({id, std::string(target)});
    if (to_give_.empty()) {
      *refuse = refuse_code;
      return nullptr;
    }
    tunnel::Stream* s = to_give_.front();
    to_give_.pop_front();
    return s;
  }

  int opened = 0;
  int draining = 0;
  std::vector<Closed> closed;
  std::vector<OpenRequest> open_requests;
  tunnel::ResetCode refuse_code = tunnel::ResetCode::kRefused;

 private:
  void note(std::string e) {
    if (log_) log_->push_back(std::move(e));
  }
  std::vector<std::string>* log_;
  std::deque<tunnel::Stream*> to_give_;
};

// --- the stream ----------------------------------------------------------------

class FakeStream final : public tunnel::Stream {
 public:
  explicit FakeStream(std::string name = "s", std::vector<std::string>* log = nullptr)
      : name_(std::move(name)), log_(log) {}
  ~FakeStream() override = default;

  // What on_peer_data() does: refuse the bytes, or report up to
  // `deliver_now` of each call as written to the socket at once (the rest
  // is kept; 0 keeps everything).
  bool refuse_data = false;
  uint32_t deliver_now = 0;
  // Test code run from the hooks (they may call the session).
  std::function<void(FakeStream&)> on_data_hook;  // mid-parse: must not call the session
  std::function<void(FakeStream&)> on_fin_hook;
  std::function<void(FakeStream&)> on_reset_hook;
  std::function<void(FakeStream&)> on_credit_hook;
  std::function<void(FakeStream&)> on_lost_hook;

  std::string received;  // every byte handed to on_peer_data, accepted or not
  int data_calls = 0;
  int fins = 0;
  int credits = 0;
  std::vector<tunnel::ResetCode> resets;
  std::vector<std::string> lost;
  // Whether the stream still had a session when its last hook ran.
  bool attached_in_last_hook = false;

 protected:
  Delivery on_peer_data(std::span<const uint8_t> bytes) override {
    ++data_calls;
    received.append(bytes.begin(), bytes.end());
    if (on_data_hook) on_data_hook(*this);
    Delivery d;
    if (refuse_data) {
      d.accepted = false;
      return d;
    }
    d.delivered = std::min<uint32_t>(deliver_now, static_cast<uint32_t>(bytes.size()));
    return d;
  }
  void on_peer_fin() override {
    ++fins;
    hook("fin", on_fin_hook);
  }
  void on_peer_reset(tunnel::ResetCode code) override {
    resets.push_back(code);
    hook("reset:" + std::string(tunnel::reset_code_name(code)), on_reset_hook);
  }
  void on_send_credit() override {
    ++credits;
    hook("credit", on_credit_hook);
  }
  void on_session_lost(std::string_view reason) override {
    lost.emplace_back(reason);
    hook("lost", on_lost_hook);
  }

 private:
  void hook(const std::string& what, const std::function<void(FakeStream&)>& fn) {
    attached_in_last_hook = session() != nullptr;
    if (log_) log_->push_back(name_ + ":" + what);
    if (fn) fn(*this);
  }
  std::string name_;
  std::vector<std::string>* log_;
};

}  // namespace rdmagw::test
