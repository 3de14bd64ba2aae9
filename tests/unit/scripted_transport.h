#pragma once
// A minimal tunnel::Transport for unit tests: it does no I/O. What the
// session writes stays in outbound() until the test takes it apart with
// take_frames(); the test plays the peer by injecting whole frames into the
// session's sink, and ends the carrier with fail(). Header-only, so that any
// test binary linking rdmagw_tunnel can use it.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/buffer_pool.h"
#include "common/byte_queue.h"
#include "proxy/io/event_loop.h"
#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::testing {

// One frame the session wrote, decoded.
struct SentFrame {
  tunnel::FrameHeader header{};
  std::vector<uint8_t> payload;

  tunnel::FrameType type() const { return header.type; }
  uint32_t id() const { return header.stream_id; }
  std::string text() const { return std::string(payload.begin(), payload.end()); }
  // WINDOW, RESET, GOAWAY.
  uint32_t u32() const { return payload.size() >= 4 ? tunnel::get_u32(payload.data()) : 0; }
};

// --- frames a test injects as the peer -------------------------------------------

inline std::vector<uint8_t> hello_frame(std::string node, uint32_t max_data = 16384,
                                        uint32_t stream_window = 256 * 1024,
                                        uint64_t session_window = 32ull * 1024 * 1024) {
  tunnel::HelloPayload h;
  h.max_data = max_data;
  h.stream_window = stream_window;
  h.session_window = session_window;
  h.node = std::move(node);
  std::vector<uint8_t> out(tunnel::kHeaderSize + tunnel::kHelloFixedSize + h.node.size());
  out.resize(tunnel::encode_hello(out.data(), h));
  return out;
}

inline std::vector<uint8_t> data_frame(uint32_t id, std::string_view bytes) {
  std::vector<uint8_t> out(tunnel::kHeaderSize + bytes.size());
  tunnel::encode_header(out.data(), tunnel::FrameType::kData, id, static_cast<uint32_t>(bytes.size()));
  if (!bytes.empty()) std::memcpy(out.data() + tunnel::kHeaderSize, bytes.data(), bytes.size());
  return out;
}

inline std::vector<uint8_t> u32_frame(tunnel::FrameType type, uint32_t id, uint32_t value) {
  std::vector<uint8_t> out(tunnel::kHeaderSize + 4);
  out.resize(tunnel::encode_u32_frame(out.data(), type, id, value));
  return out;
}

inline std::vector<uint8_t> fin_frame(uint32_t id) {
  std::vector<uint8_t> out(tunnel::kHeaderSize);
  out.resize(tunnel::encode_empty_frame(out.data(), tunnel::FrameType::kFin, id));
  return out;
}

inline std::vector<uint8_t> reset_frame(uint32_t id, tunnel::ResetCode code) {
  return u32_frame(tunnel::FrameType::kReset, id, static_cast<uint32_t>(code));
}

inline std::vector<uint8_t> goaway_frame() { return u32_frame(tunnel::FrameType::kGoaway, 0, 0); }

// --- the transport ------------------------------------------------------------------

class ScriptedTransport final : public tunnel::Transport {
 public:
  // `destroyed` (may be null) is set when the loop deletes the transport.
  ScriptedTransport(EventLoop& loop, BufferPool& pool, tunnel::TransportKind kind = tunnel::TransportKind::kTcp,
                    bool* destroyed = nullptr)
      : Transport(loop), kind_(kind), outbound_(&pool), destroyed_(destroyed) {}

  // tunnel::Transport
  tunnel::TransportKind kind() const override { return kind_; }
  void start(tunnel::TransportSink* sink) override {
    sink_ = sink;
    started_ = true;
  }
  ByteQueue& outbound() override { return outbound_; }
  void request_send() override { ++send_requests_; }
  void close(tunnel::CloseMode mode) override {
    if (closed_) return;
    closed_ = true;
    close_mode_ = mode;
    sink_ = nullptr;
  }
  std::string remote_address() const override { return "scripted:0"; }

  bool started() const { return started_; }
  bool closed() const { return closed_; }
  tunnel::CloseMode close_mode() const { return close_mode_; }
  unsigned send_requests() const { return send_requests_; }

  // Feeds whole frames (one or several, back to back) to the session, as the
  // peer. Returns false if the session stopped taking frames (it closed the
  // transport), or a frame did not parse.
  bool inject(std::span<const uint8_t> bytes) {
    tunnel::FrameReader reader(tunnel::kMaxPayload);
    size_t offset = 0;
    while (offset < bytes.size()) {
      if (!sink_) return false;
      tunnel::FrameHeader h{};
      std::span<const uint8_t> payload;
      size_t used = 0;
      std::string reason;
      if (reader.next(bytes.data() + offset, bytes.size() - offset, &h, &payload, &used, &reason) !=
          tunnel::FrameReader::Status::kFrame)
        return false;
      if (!sink_->on_frame(h, payload)) return false;
      offset += used;
    }
    return true;
  }
  bool inject(const std::vector<uint8_t>& bytes) { return inject(std::span<const uint8_t>(bytes)); }

  // The carrier fails (the peer went away): the sink hears of it once.
  void fail(std::string_view reason) {
    tunnel::TransportSink* sink = sink_;
    sink_ = nullptr;
    if (sink) sink->on_transport_closed(reason);
  }

  // Takes what the session queued since the last call, as frames (a partial
  // frame at the end stays for the next call). All frames taken so far stay
  // in sent().
  std::vector<SentFrame> take_frames() {
    iovec iov[64];
    while (!outbound_.empty()) {
      int n = outbound_.front_iovecs(iov, 64);
      size_t total = 0;
      for (int i = 0; i < n; ++i) {
        auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        pending_.insert(pending_.end(), p, p + iov[i].iov_len);
        total += iov[i].iov_len;
      }
      outbound_.consume(total);
    }
    std::vector<SentFrame> out;
    tunnel::FrameReader reader(tunnel::kMaxPayload);
    size_t offset = 0;
    while (true) {
      tunnel::FrameHeader h{};
      std::span<const uint8_t> payload;
      size_t used = 0;
      std::string reason;
      if (reader.next(pending_.data() + offset, pending_.size() - offset, &h, &payload, &used, &reason) !=
          tunnel::FrameReader::Status::kFrame)
        break;
      out.push_back({h, std::vector<uint8_t>(payload.begin(), payload.end())});
      offset += used;
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(offset));
    sent_.insert(sent_.end(), out.begin(), out.end());
    return out;
  }
  const std::vector<SentFrame>& sent() const { return sent_; }

 private:
  ~ScriptedTransport() override {
    if (destroyed_) *destroyed_ = true;
  }

  tunnel::TransportKind kind_;
  ByteQueue outbound_;
  bool* destroyed_;
  tunnel::TransportSink* sink_ = nullptr;
  bool started_ = false;
  bool closed_ = false;
  tunnel::CloseMode close_mode_ = tunnel::CloseMode::kAbort;
  unsigned send_requests_ = 0;
  std::vector<uint8_t> pending_;
  std::vector<SentFrame> sent_;
};

}  // namespace rdmagw::testing
