// SPDX-License-Identifier: Apache-2.0
// The frame delivery loop every transport runs (proxy/tunnel/frame_delivery.h),
// with recording sinks and the two transports' policies as they are written
// in tcp_transport.cc (a byte stream: frames may end short; a frame that
// turns record protection on stops the loop, since what follows is sealed;
// a refused frame ends it) and rdma_transport.cc (whole frames per message;
// while flushing on close, frames a closed session refuses are passed over).
#include "proxy/tunnel/frame_delivery.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/unit/fake_transport.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;
using rdmagw::test::Bytes;
using rdmagw::test::cat;
using rdmagw::test::data_bytes;
using rdmagw::test::fin_bytes;
using rdmagw::test::window_bytes;

namespace {

// Records what it is handed, in order ("data 1 3" for DATA on stream 1 with
// 3 payload bytes, "end" for on_frames_end); refuses the frames of
// `refuse` (a session closing its transport, which unbinds its sink, as
// both transports' close() does); on a frame of stream `rebind_on` points
// the transport's sink at `next` (a resume handing the transport to the
// session it resumes).
struct RecordingSink final : TransportSink {
  std::string name;
  std::vector<std::string>* log;
  FrameType refuse = FrameType::kPing;  // PING never appears below: nothing refused
  uint32_t rebind_on = 0;
  TransportSink** binding = nullptr;
  TransportSink* next = nullptr;

  RecordingSink(std::string n, std::vector<std::string>* l) : name(std::move(n)), log(l) {}
  bool on_frame(const FrameHeader& h, std::span<const uint8_t> payload) override {
    std::string type = h.type == FrameType::kData ? "data" : h.type == FrameType::kFin ? "fin" : "window";
    log->push_back(name + " " + type + " " + std::to_string(h.stream_id) + " " + std::to_string(payload.size()));
    if (h.type == refuse) {
      if (binding) *binding = nullptr;
      return false;
    }
    if (rebind_on != 0 && h.stream_id == rebind_on) *binding = next;
    return true;
  }
  void on_frames_end() override { log->push_back(name + " end"); }
  void on_transport_closed(metrics::TransportLoss, std::string_view) override {}
};

// TcpTransport's policy: stops after a frame that started record
// protection (opening_started_ no longer what it was when the delivery
// began), never goes on after a refusal.
struct TcpLikePolicy {
  bool closed_ = false;
  bool opening_started_ = false;
  bool was_opening = false;
  uint32_t open_on = 0;  // a frame of this stream starts protection
  std::vector<FrameType> headers;
  bool closed() const { return closed_; }
  void on_header(const FrameHeader& h) {
    headers.push_back(h.type);
    if (open_on != 0 && h.stream_id == open_on) opening_started_ = true;
  }
  bool after_frame() const { return opening_started_ == was_opening; }
  bool after_refusal() const { return false; }
};

// RdmaTransport's policy: every frame of a message; after a refusal, on
// only while flushing on close.
struct RdmaLikePolicy {
  bool flushing_on_close_ = false;
  bool closed_ = false;
  bool closed() const { return closed_; }
  void on_header(const FrameHeader&) {}
  bool after_frame() const { return true; }
  bool after_refusal() const { return flushing_on_close_; }
};

const FrameReader kReader(16384);

}  // namespace

TEST_CASE("frame delivery: every whole frame goes to the sink in order, then one end of batch") {
  std::vector<std::string> log;
  RecordingSink a("a", &log);
  TransportSink* sink = &a;
  Bytes bytes = cat({data_bytes(1, "abc"), window_bytes(1, 100), fin_bytes(3)});
  TcpLikePolicy policy;
  Delivery d = deliver_frames(kReader, bytes, sink, policy);
  CHECK(d.end == Delivery::End::kAllUsed);
  CHECK(d.consumed == bytes.size());
  CHECK(log == std::vector<std::string>{"a data 1 3", "a window 1 4", "a fin 3 0", "a end"});
  CHECK(policy.headers == std::vector<FrameType>{FrameType::kData, FrameType::kWindow, FrameType::kFin});
}

TEST_CASE("frame delivery: bytes that end inside a frame: the whole ones go, the rest waits (TCP)") {
  std::vector<std::string> log;
  RecordingSink a("a", &log);
  TransportSink* sink = &a;
  Bytes whole = data_bytes(1, "first");
  Bytes next = data_bytes(1, "second");
  SECTION("inside the payload") {
    Bytes bytes = cat({whole, Bytes(next.begin(), next.end() - 2)});
    TcpLikePolicy policy;
    Delivery d = deliver_frames(kReader, bytes, sink, policy);
    CHECK(d.end == Delivery::End::kShort);
    CHECK(d.consumed == whole.size());
  }
  SECTION("inside the header") {
    Bytes bytes = cat({whole, Bytes(next.begin(), next.begin() + 5)});
    TcpLikePolicy policy;
    Delivery d = deliver_frames(kReader, bytes, sink, policy);
    CHECK(d.end == Delivery::End::kShort);
    CHECK(d.consumed == whole.size());
  }
  CHECK(log == std::vector<std::string>{"a data 1 5", "a end"});
}

TEST_CASE("frame delivery: a malformed frame ends the delivery with the reason; earlier frames were delivered") {
  std::vector<std::string> log;
  RecordingSink a("a", &log);
  TransportSink* sink = &a;
  Bytes bad = data_bytes(1, "x");
  bad[0] = 0xee;  // no such frame type
  Bytes bytes = cat({data_bytes(1, "ok"), bad});
  RdmaLikePolicy policy;
  Delivery d = deliver_frames(kReader, bytes, sink, policy);
  CHECK(d.end == Delivery::End::kMalformed);
  CHECK(d.reason == "unknown frame type 238");
  CHECK(d.consumed == data_bytes(1, "ok").size());
  CHECK(log == std::vector<std::string>{"a data 1 2", "a end"});
}

TEST_CASE("frame delivery: a refused frame ends it on TCP; RDMA flushing on close passes over it") {
  std::vector<std::string> log;
  RecordingSink a("a", &log);
  a.refuse = FrameType::kWindow;
  TransportSink* sink = &a;
  a.binding = &sink;
  Bytes bytes = cat({data_bytes(1, "abc"), window_bytes(1, 7), data_bytes(1, "de")});
  SECTION("TCP") {
    TcpLikePolicy policy;
    Delivery d = deliver_frames(kReader, bytes, sink, policy);
    CHECK(d.end == Delivery::End::kRefused);
    CHECK(d.consumed == bytes.size() - data_bytes(1, "de").size());
    // The sink that refused closed its transport and delivered then: no end of batch.
    CHECK(log == std::vector<std::string>{"a data 1 3", "a window 1 4"});
  }
  SECTION("RDMA, not flushing") {
    RdmaLikePolicy policy;
    Delivery d = deliver_frames(kReader, bytes, sink, policy);
    CHECK(d.end == Delivery::End::kRefused);
    CHECK(log == std::vector<std::string>{"a data 1 3", "a window 1 4"});
  }
  SECTION("RDMA, flushing on close: the rest of the message is read and dropped") {
    RdmaLikePolicy policy;
    policy.flushing_on_close_ = true;
    Delivery d = deliver_frames(kReader, bytes, sink, policy);
    CHECK(d.end == Delivery::End::kStopped);
    CHECK(d.consumed == bytes.size());
    CHECK(log == std::vector<std::string>{"a data 1 3", "a window 1 4"});
  }
}

TEST_CASE("frame delivery: TCP stops after the frame that turned protection on; the rest is sealed") {
  std::vector<std::string> log;
  RecordingSink a("a", &log);
  TransportSink* sink = &a;
  Bytes first = cat({data_bytes(1, "a"), fin_bytes(5)});
  Bytes bytes = cat({first, data_bytes(1, "sealed")});
  TcpLikePolicy policy;
  policy.open_on = 5;
  SECTION("protection already on: the frames are records, delivered on") {
    policy.opening_started_ = policy.was_opening = true;
    Delivery all = deliver_frames(kReader, bytes, sink, policy);
    CHECK(all.end == Delivery::End::kAllUsed);
    CHECK(all.consumed == bytes.size());
    return;
  }
  Delivery d = deliver_frames(kReader, bytes, sink, policy);
  CHECK(d.end == Delivery::End::kStopped);
  CHECK(d.consumed == first.size());
  CHECK(log == std::vector<std::string>{"a data 1 1", "a fin 5 0", "a end"});
}

TEST_CASE("frame delivery: a frame that hands the transport to another sink: each hears the end of its part") {
  std::vector<std::string> log;
  RecordingSink a("a", &log), b("b", &log);
  TransportSink* sink = &a;
  a.rebind_on = 9;
  a.binding = &sink;
  a.next = &b;
  Bytes bytes = cat({data_bytes(1, "x"), fin_bytes(9), data_bytes(1, "yz")});
  RdmaLikePolicy policy;
  Delivery d = deliver_frames(kReader, bytes, sink, policy);
  CHECK(d.end == Delivery::End::kAllUsed);
  CHECK(log == std::vector<std::string>{"a data 1 1", "a fin 9 0", "a end", "b data 1 2", "b end"});
  SECTION("no sink left: the loop stops") {
    log.clear();
    a.next = nullptr;
    sink = &a;
    Delivery stopped = deliver_frames(kReader, bytes, sink, policy);
    CHECK(stopped.end == Delivery::End::kStopped);
    CHECK(stopped.consumed == bytes.size());  // the frame after the unbinding was read, not delivered
    CHECK(log == std::vector<std::string>{"a data 1 1", "a fin 9 0", "a end"});
  }
}

TEST_CASE("frame delivery: a closed transport delivers nothing") {
  std::vector<std::string> log;
  RecordingSink a("a", &log);
  TransportSink* sink = &a;
  TcpLikePolicy policy;
  policy.closed_ = true;
  Delivery d = deliver_frames(kReader, data_bytes(1, "x"), sink, policy);
  CHECK(d.end == Delivery::End::kStopped);
  CHECK(d.consumed == 0);
  CHECK(log.empty());
}
