// SPDX-License-Identifier: Apache-2.0
#pragma once
// A fake tunnel::Transport for driving a tunnel::Session frame by frame in
// unit tests, and the frames a test plays the peer with:
//
// - FakeTransport: a tunnel::Transport (an IoObject on a real EventLoop) that
//   does no I/O. It keeps what the session queues in outbound() for the test
//   to decode (written(), which also keeps every frame in all_written()),
//   lets the test inject frames as a peer would (inject(), inject_all()),
//   records close(mode) and can report the carrier failing (fail()). It can
//   report either kind and set a flag when the loop deletes it.
// - Frame: one frame the session wrote, decoded.
// - The *_bytes() helpers build frames to inject (frame.h encoders).
//
// What sits above a session (a FakeOwner, FakeStreams) is in fake_stream.h.
// Header-only, so that any test binary linking rdmagw_tunnel can use it.
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/buffer_pool.h"
#include "common/byte_queue.h"
#include "proxy/io/event_loop.h"
#include "proxy/io/io_object.h"
#include "proxy/tunnel/frame.h"
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
  // An AUTH frame's payload, decoded (its blob points into `payload`).
  tunnel::AuthPayload auth() const {
    tunnel::AuthPayload a;
    std::string reason;
    if (type() != tunnel::FrameType::kAuth) throw std::runtime_error("not an AUTH frame");
    if (!tunnel::decode_auth(payload, &a, &reason)) throw std::runtime_error("AUTH frame: " + reason);
    return a;
  }
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

inline Bytes open_bytes(uint32_t id, std::string_view target, std::string_view first = {},
                        const tunnel::StreamOrigin* origin = nullptr) {
  size_t before = tunnel::open_prefix_length(target, origin);
  Bytes out(before + first.size());
  std::copy(first.begin(), first.end(), out.begin() + static_cast<long>(before));
  uint8_t* frame =
      tunnel::encode_open_before(out.data() + before, id, target, static_cast<uint32_t>(first.size()), origin);
  if (frame != out.data()) throw std::logic_error("encode_open_before did not start at the buffer");
  return out;
}

// Any payload after a valid header: for payloads the session must reject.
// (Sized first, then copied: GCC 12 at -O2 warns falsely (-Warray-bounds) on
// a vector insert here once inlined into some callers.)
inline Bytes raw_bytes(tunnel::FrameType type, uint32_t id, const Bytes& payload) {
  Bytes out(tunnel::kHeaderSize + payload.size());
  tunnel::encode_header(out.data(), type, id, static_cast<uint32_t>(payload.size()));
  if (!payload.empty()) std::memcpy(out.data() + tunnel::kHeaderSize, payload.data(), payload.size());
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
  // bounds them by the session's max_data when it validates headers. `kind`
  // is what kind() reports; `deleted` (may be null) is set when the loop
  // deletes the transport.
  FakeTransport(EventLoop& loop, BufferPool& pool, uint32_t inbound_max_data,
                tunnel::TransportKind kind = tunnel::TransportKind::kTcp, bool* deleted = nullptr)
      : Transport(loop), kind_(kind), out_(&pool), inbound_max_data_(inbound_max_data), deleted_(deleted) {}

  tunnel::TransportKind kind() const override { return kind_; }
  void start(tunnel::TransportSink* sink) override {
    sink_ = sink;
    ++starts;
  }
  void rebind(tunnel::TransportSink* sink) override { sink_ = sink; }
  tunnel::Outbound& outbound() override { return out_; }
  void request_send() override { ++send_requests; }
  void close(tunnel::CloseMode mode) override {
    closes.push_back(mode);
    sink_ = nullptr;  // the sink is never called again
  }
  std::string remote_address() const override { return "fake:0"; }
  // Records the keys and seals nothing: the fake wire carries frames as
  // they are (the records themselves: frame_cipher_test, the integration
  // tests).
  bool protect(const tunnel::CipherKey& send, const tunnel::CipherKey& receive, tunnel::Protection how,
               std::string*) override {
    protected_records = true;
    queued_at_protect = out_.size();
    protection = how;
    send_key = send;
    receive_key = receive;
    return true;
  }
  bool addresses(IpBytes* local, IpBytes* remote) const override {
    *local = local_ip;
    *remote = remote_ip;
    return true;
  }
  // Both ends of every fake wire: what a dialer dials is what an acceptor
  // is reached at, unless a test says otherwise (a relay).
  static IpBytes test_ip(uint8_t last) {
    IpBytes ip{};
    ip[10] = ip[11] = 0xff;
    ip[12] = 192;
    ip[14] = 2;
    ip[15] = last;
    return ip;
  }
  IpBytes local_ip = test_ip(1);
  IpBytes remote_ip = test_ip(1);
  bool protected_records = false;
  // What was queued (and not yet drained) when protect() was called: the
  // bytes that go in clear.
  size_t queued_at_protect = 0;
  tunnel::Protection protection = tunnel::Protection::kEncrypt;
  tunnel::CipherKey send_key{}, receive_key{};

  // --- the test's side ---

  // Feeds `bytes` as the peer's transport would: each header-validated frame
  // goes to the sink, until the sink answers false (it closed us) or the
  // bytes end. Returns how many frames the sink was handed.
  size_t inject(const Bytes& bytes) {
    size_t handed = 0;
    feed(bytes, &handed);
    return handed;
  }
  // The same, true only if the sink took every frame: false once it answered
  // false (it closed us) or was not there (not started, or closed).
  bool inject_all(const Bytes& bytes) {
    size_t handed = 0;
    return feed(bytes, &handed);
  }

  // The carrier failed: tells the sink (once).
  void fail(std::string_view reason, metrics::TransportLoss loss = metrics::TransportLoss::kIoError) {
    tunnel::TransportSink* sink = sink_;
    sink_ = nullptr;
    if (sink) sink->on_transport_closed(loss, reason);
  }

  // Decodes and drains every frame the session queued since the last call.
  // Every frame returned so far also stays in all_written().
  std::vector<Frame> written() {
    Bytes wire = drain_wire();
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
    all_written_.insert(all_written_.end(), frames.begin(), frames.end());
    return frames;
  }
  const std::vector<Frame>& all_written() const { return all_written_; }
  // Takes every byte the session queued, as the wire would (marked sent).
  Bytes drain_wire() {
    Bytes wire;
    iovec iov[64];
    while (!out_.empty()) {
      int n = out_.iovecs_at(0, iov, 64);
      size_t total = 0;
      for (int i = 0; i < n; ++i) {
        auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        wire.insert(wire.end(), p, p + iov[i].iov_len);
        total += iov[i].iov_len;
        count_split_frames(p, iov[i].iov_len);
      }
      out_.consume(total);
    }
    return wire;
  }
  size_t queued_bytes() const { return out_.size(); }
  // Injected bytes as a socket would deliver them (the fuzzer's): a partial
  // frame waits for the next injection, malformed bytes fail the transport
  // as TcpTransport does. Otherwise (tests) anything but whole valid frames
  // is a mistake of the test and throws.
  bool like_a_socket = false;
  // Frames the session queued across two buffers: the RDMA transport sends
  // whole frames out of each buffer and cannot send those.
  int split_frames = 0;
  bool delivering() const { return sink_ != nullptr; }
  bool started() const { return starts > 0; }
  bool closed() const { return !closes.empty(); }
  tunnel::CloseMode close_mode() const { return closes.at(0); }  // the first close's

  int starts = 0;
  int send_requests = 0;
  int refusals = 0;  // on_frame() answered false
  std::vector<tunnel::CloseMode> closes;

 private:
  ~FakeTransport() override {
    if (deleted_) *deleted_ = true;
  }

  void count_split_frames(const uint8_t* p, size_t len) {
    size_t off = 0;
    while (off + tunnel::kHeaderSize <= len) off += tunnel::kHeaderSize + tunnel::get_u32(p + off + 8);
    if (off != len) ++split_frames;
  }

  // inject(): true if the sink took every frame of `bytes`.
  bool feed(const Bytes& input, size_t* handed) {
    Bytes joined;
    if (like_a_socket && !partial_.empty()) {
      joined = std::move(partial_);
      partial_.clear();
      joined.insert(joined.end(), input.begin(), input.end());
    }
    const Bytes& bytes = joined.empty() ? input : joined;
    size_t off = 0;
    tunnel::FrameReader reader(inbound_max_data_);
    // As the real transports do: the batch ends while `bytes` still holds
    // the frames' payloads.
    tunnel::FrameBatch batch;
    while (off < bytes.size()) {
      if (!sink_) return false;
      tunnel::FrameHeader h;
      std::span<const uint8_t> payload;
      size_t used = 0;
      std::string reason;
      auto status = reader.next(bytes.data() + off, bytes.size() - off, &h, &payload, &used, &reason);
      if (status != tunnel::FrameReader::Status::kFrame && like_a_socket) {
        if (status == tunnel::FrameReader::Status::kNeedMore) {
          partial_.assign(bytes.begin() + static_cast<long>(off), bytes.end());
          return true;
        }
        fail("protocol error: " + reason);  // as TcpTransport does
        return false;
      }
      if (status != tunnel::FrameReader::Status::kFrame)
        throw std::logic_error("injected bytes are not whole valid frames: " + reason);
      ++*handed;
      off += used;
      batch.feed(sink_);
      if (!sink_->on_frame(h, payload)) {
        batch.refused();
        ++refusals;
        return false;
      }
    }
    return true;
  }

  Bytes partial_;  // like_a_socket: the start of a frame, until the rest comes
  tunnel::TransportKind kind_;
  tunnel::Outbound out_;
  uint32_t inbound_max_data_;
  bool* deleted_;
  tunnel::TransportSink* sink_ = nullptr;
  std::vector<Frame> all_written_;
};

}  // namespace rdmagw::test
