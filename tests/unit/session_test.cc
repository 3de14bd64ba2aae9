// tunnel::Session driven frame by frame through a fake transport
// (fake_transport.h): what it writes, what it tells its streams and owner,
// and when (hooks other than on_peer_data only at the end of the batch).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <vector>

#include "common/log.h"
#include "fake_transport.h"
#include "proxy/tunnel/session.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;
using namespace rdmagw::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

constexpr uint32_t kKiB = 1024;
constexpr const char* kTarget = "tcp:10.0.0.5:6379";

SessionSettings settings_for(uint32_t max_data = 16 * kKiB, uint32_t stream_window = 256 * kKiB,
                             uint64_t session_window = 32ull * kKiB * kKiB) {
  SessionSettings s;
  s.node = "self";
  s.max_data = max_data;
  s.stream_window = stream_window;
  s.session_window = session_window;
  return s;
}

HelloPayload default_peer() { return hello(16 * kKiB, 256 * kKiB, 32ull * kKiB * kKiB); }

// A session on a real loop over a FakeTransport, with a FakeOwner.
struct Harness {
  BufferPool pool;
  EventLoop loop;
  std::vector<std::string> log;  // owner and stream hooks, in the order they ran
  FakeOwner owner{&log};
  SessionSettings settings;
  FakeTransport* transport = nullptr;  // owned by the session
  IoPtr<Session> session;

  explicit Harness(Session::Role role, SessionSettings config = settings_for())
      : pool(kBufferHeadroom + config.max_data, 8192), settings(std::move(config)) {
    log::set_level(log::Level::kError);  // the sessions' warnings are what the tests check
    std::string error;
    if (!loop.init(64, &error)) FAIL("io_uring: " << error);
    auto t = make_io<FakeTransport>(loop, pool, settings.max_data);
    transport = t.get();
    session = make_io<Session>(loop, pool, role, settings, IoPtr<Transport>(t.release()), &owner);
    session->start();
  }
  // No end_batch here: the streams of the test are gone already, and
  // shut_down() deletes the session and its transport without dispatching.
  ~Harness() {
    session.reset();
    loop.shut_down();
  }

  Session& s() { return *session; }
  size_t inject(const Bytes& bytes) { return transport->inject(bytes); }
  std::vector<Frame> written() { return transport->written(); }
  void end_batch() { loop.end_batch(); }

  // Both HELLOs cross; the owner was told; written frames and the log are drained.
  void handshake(const HelloPayload& peer = default_peer()) {
    if (session->role() == Session::Role::kDialer) {
      auto w = written();
      REQUIRE(w.size() == 1);
      REQUIRE(w[0].type() == FrameType::kHello);
      inject(hello_bytes(peer));
      REQUIRE(written().empty());
    } else {
      inject(hello_bytes(peer));
      auto w = written();
      REQUIRE(w.size() == 1);
      REQUIRE(w[0].type() == FrameType::kHello);
    }
    REQUIRE(session->open());
    end_batch();
    REQUIRE(owner.opened == 1);
    log.clear();
  }

  uint8_t* buffer_with(std::string_view payload) {
    uint8_t* b = pool.acquire();
    REQUIRE(b);
    std::memcpy(b + kBufferHeadroom, payload.data(), payload.size());
    return b;
  }
  // Opens `stream` from our side with `first` bytes inside the OPEN.
  bool open(FakeStream& stream, std::string_view first = {}) {
    uint8_t* b = first.empty() ? nullptr : buffer_with(first);
    return session->open_stream(stream, kTarget, b, static_cast<uint32_t>(first.size()));
  }
  // Sends `payload` on `stream` as a local stream would: stream credit, then
  // session credit right before sending. False (credit refunded) if short.
  bool send(FakeStream& stream, std::string_view payload) {
    uint32_t want = static_cast<uint32_t>(payload.size());
    uint32_t n = session->take_stream_credit(stream, want);
    if (n < want) {
      session->refund_stream_credit(stream, n);
      return false;
    }
    if (!session->take_session_credit(stream, n)) {
      session->refund_stream_credit(stream, n);
      return false;
    }
    session->send_data(stream, buffer_with(payload), n);
    return true;
  }
  // The peer opens stream `id`; the owner hands it `stream`.
  void accept(FakeStream& stream, uint32_t id, std::string_view first = {}) {
    owner.give(stream);
    inject(open_bytes(id, kTarget, first));
    REQUIRE(stream.session() == session.get());
    REQUIRE(stream.stream_id() == id);
  }

  // The session closed itself (the owner hears it only at dispatch).
  void expect_closed(SessionEnd end, CloseMode mode, std::string_view reason_part) {
    CHECK(session->state() == Session::State::kClosed);
    CHECK(!session->can_open_streams());
    REQUIRE(transport->closes.size() == 1);
    CHECK(transport->closes[0] == mode);
    CHECK(!transport->delivering());
    CHECK(owner.closed.empty());
    end_batch();
    REQUIRE(owner.closed.size() == 1);
    CHECK(owner.closed[0].end == end);
    CHECK_THAT(owner.closed[0].reason, Contains(std::string(reason_part)));
  }
  void expect_protocol_error(std::string_view reason_part) {
    expect_closed(SessionEnd::kProtocolError, CloseMode::kAbort, reason_part);
  }
};

}  // namespace

// ============================================================================
// Handshake
// ============================================================================

TEST_CASE("handshake: the dialer sends HELLO first and opens on the acceptor's HELLO; the owner is told at dispatch") {
  Harness h(Session::Role::kDialer);
  CHECK(h.transport->starts == 1);
  auto w = h.written();
  REQUIRE(w.size() == 1);
  REQUIRE(w[0].type() == FrameType::kHello);
  CHECK(w[0].id() == 0);
  HelloPayload ours;
  std::string reason;
  REQUIRE(decode_hello(w[0].payload, &ours, &reason));
  CHECK(ours.node == "self");
  CHECK(ours.max_data == h.settings.max_data);
  CHECK(ours.stream_window == h.settings.stream_window);
  CHECK(ours.session_window == h.settings.session_window);
  CHECK(h.s().state() == Session::State::kHandshake);
  CHECK(!h.s().can_open_streams());
  CHECK(h.s().open_credit() == 0);

  h.inject(hello_bytes(hello(4 * kKiB, 64 * kKiB, 1024 * kKiB, "acceptor-node")));
  CHECK(h.s().open());
  CHECK(h.s().peer_node() == "acceptor-node");
  CHECK(h.written().empty());  // the dialer does not answer the acceptor's HELLO
  CHECK(h.owner.opened == 0);  // not mid-parse: at the end of the batch
  h.end_batch();
  CHECK(h.owner.opened == 1);
  CHECK(h.s().can_open_streams());
  // First bytes of an OPEN: the peer's max_data, stream and session windows bound them.
  CHECK(h.s().open_credit() == 4 * kKiB);
  h.end_batch();
  CHECK(h.owner.opened == 1);  // told once
}

TEST_CASE("handshake: the acceptor waits for the dialer's HELLO, then answers with its own") {
  Harness h(Session::Role::kAcceptor);
  CHECK(h.written().empty());
  h.end_batch();
  CHECK(h.written().empty());
  h.inject(hello_bytes(hello(16 * kKiB, 256 * kKiB, 1024 * kKiB, "dialer-node")));
  auto w = h.written();
  REQUIRE(w.size() == 1);
  REQUIRE(w[0].type() == FrameType::kHello);
  HelloPayload ours;
  std::string reason;
  REQUIRE(decode_hello(w[0].payload, &ours, &reason));
  CHECK(ours.node == "self");
  CHECK(h.s().open());
  CHECK(h.s().peer_node() == "dialer-node");
  CHECK(h.owner.opened == 0);
  h.end_batch();
  CHECK(h.owner.opened == 1);
}

TEST_CASE("handshake: any frame but HELLO before the handshake is a protocol error that aborts the transport") {
  auto role = GENERATE(Session::Role::kDialer, Session::Role::kAcceptor);
  auto early = GENERATE(ping_bytes(1), open_bytes(1, kTarget, "x"), window_bytes(0, 100), data_bytes(1, "x"),
                        goaway_bytes());
  Harness h(role);
  h.written();
  // The HELLO behind the bad frame is never handed over: the session closed us.
  CHECK(h.inject(cat({early, hello_bytes(default_peer())})) == 1);
  CHECK(h.transport->refusals == 1);
  CHECK(h.written().empty());
  h.expect_protocol_error("before HELLO");
  CHECK(h.owner.opened == 0);
}

TEST_CASE("handshake: a second HELLO is a protocol error") {
  auto role = GENERATE(Session::Role::kDialer, Session::Role::kAcceptor);
  Harness h(role);
  h.handshake();
  h.inject(hello_bytes(default_peer()));
  h.expect_protocol_error("second HELLO");
}

TEST_CASE("handshake: a HELLO that fails validation is a protocol error") {
  HelloPayload bad = default_peer();
  std::string part;
  SECTION("version") {
    bad.version = 2;
    part = "version";
  }
  SECTION("max_data below 1 KiB") {
    bad.max_data = 512;
    bad.stream_window = 512;
    bad.session_window = 512;
    part = "max_data";
  }
  SECTION("session window smaller than the stream window") {
    bad.session_window = bad.stream_window - 1;
    part = "inconsistent";
  }
  Harness h(Session::Role::kAcceptor);
  h.inject(hello_bytes(bad));
  CHECK(h.written().empty());  // no HELLO answered
  h.expect_protocol_error(part);
  CHECK(h.owner.opened == 0);
}

TEST_CASE("handshake: tick() ends a session whose handshake outlives handshake_timeout_ms") {
  auto role = GENERATE(Session::Role::kDialer, Session::Role::kAcceptor);
  Harness h(role);
  Clock::time_point t0 = h.loop.now();
  h.s().tick(t0 + 3000ms);
  CHECK(h.s().state() == Session::State::kHandshake);
  h.s().tick(t0 + 3001ms);
  h.expect_closed(SessionEnd::kHandshakeTimeout, CloseMode::kAbort, "handshake timeout");
  CHECK(h.owner.opened == 0);
}

TEST_CASE("handshake: an open session is past the handshake timeout") {
  Harness h(Session::Role::kDialer);
  Clock::time_point t0 = h.loop.now();
  h.handshake();
  h.s().tick(t0 + 4000ms);
  CHECK(h.s().open());
  CHECK(h.transport->closes.empty());
}

TEST_CASE("handshake: a GOAWAY asked for during the handshake follows our HELLO") {
  Harness h(Session::Role::kAcceptor);
  h.s().send_goaway();
  CHECK(h.written().empty());
  h.inject(hello_bytes(default_peer()));
  auto w = h.written();
  REQUIRE(w.size() == 2);
  CHECK(w[0].type() == FrameType::kHello);
  CHECK(w[1].is(FrameType::kGoaway, 0));
}
