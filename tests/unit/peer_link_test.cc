// SPDX-License-Identifier: Apache-2.0
// PeerLink with fake connectors: which transport it dials, backoff, the
// fallback from RDMA to TCP, waiting streams, drain (GOAWAY), shutdown and
// retirement. Sessions run over FakeTransport; no I/O happens, so the
// loop's ring is never started and time is passed to tick() explicitly (the
// loop's now() stays where it was when the loop was made).
#include "proxy/tunnel/peer_link.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/address.h"
#include "common/buffer_pool.h"
#include "config/config.h"
#include "proxy/io/event_loop.h"
#include "proxy/tunnel/session.h"
#include "proxy/tunnel/transport.h"
#include "tests/unit/fake_connector.h"
#include "tests/unit/fake_transport.h"
#include "tunnel_keys.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;
using rdmagw::test::FakeConnector;
using rdmagw::test::FakeTransport;
using rdmagw::test::tunnel_keys;
using rdmagw::test::WaitingStream;
using namespace std::chrono_literals;

namespace {

// Redirects stderr (the log) to a file while alive.
class StderrCapture {
 public:
  StderrCapture() {
    char path[] = "/tmp/peer_link_test_XXXXXX";
    fd_ = ::mkstemp(path);
    REQUIRE(fd_ >= 0);
    ::unlink(path);
    fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    ::dup2(fd_, STDERR_FILENO);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::string out;
    char buf[4096];
    ssize_t n;
    ::lseek(fd_, 0, SEEK_SET);
    while ((n = ::read(fd_, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  int fd_ = -1;
  int saved_ = -1;
};

// The lines of `log` that contain every one of `parts`.
std::vector<std::string> lines_with(const std::string& log, std::initializer_list<std::string_view> parts) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    std::string line = log.substr(start, end - start);
    bool all = true;
    for (auto p : parts) all = all && line.find(p) != std::string::npos;
    if (all) out.push_back(line);
    start = end + 1;
  }
  return out;
}

// The peer's HELLO: node "peer-b", the default limits.
test::Bytes peer_b_hello() { return test::hello_bytes(test::hello(16384, 256 * 1024, 32ull * 1024 * 1024, "peer-b")); }

struct Fixture {
  BufferPool pool{kBufferHeadroom + 16384, 256};
  EventLoop loop;  // not initialized: nothing here submits I/O
  FakeConnector tcp{TransportKind::kTcp};
  FakeConnector rdma{TransportKind::kRdma};
  PeerConfig peer;
  SessionSettings settings;
  TunnelConfig tunnel;
  std::unique_ptr<PeerLink> link;
  Clock::time_point t0;

  // `always`: connect: always (the tests below were written for a link that
  // dials at start); the on-demand tests at the end pass false.
  explicit Fixture(TransportMode mode, bool with_rdma = true, bool always = true, SessionBudget* budget = nullptr) {
    peer.name = "b";
    peer.always_connected = always;
    peer.address = "127.0.0.1";
    peer.tcp_port = 17471;
    peer.rdma_port = 17472;
    std::string error;
    auto ep = make_tcp_endpoint(peer.address, peer.tcp_port, &error);
    REQUIRE(ep);
    peer.tcp_endpoint = *ep;
    settings.node = "a";
    // Sessions that do not resume, unless a test says they do.
    tunnel_keys(settings).resume_timeout_ms = 0;
    tunnel.transport = mode;
    tunnel.connect_timeout_ms = 1000;
    tunnel.reconnect_max_ms = 300;
    t0 = loop.now();
    Connectors c;
    c.tcp = &tcp;
    c.rdma = with_rdma ? &rdma : nullptr;
    link = std::make_unique<PeerLink>(loop, pool, peer, settings, tunnel, c, budget);
  }

  PeerInfo info() const {
    PeerInfo out;
    link->describe(0, &out);
    return out;
  }

  // Completes the last dial of `c` with a fake transport of its kind.
  FakeTransport* dialed(FakeConnector& c, bool* destroyed = nullptr) {
    auto t = make_io<FakeTransport>(loop, pool, kMaxPayload, c.kind(), destroyed);
    FakeTransport* raw = t.get();
    c.succeed(std::move(t));
    return raw;
  }
  // The peer answers the session's HELLO; the batch ends.
  void peer_hello(FakeTransport* t) {
    REQUIRE(t->inject_all(peer_b_hello()));
    loop.end_batch();
  }
  FakeTransport* bring_up(FakeConnector& c) {
    FakeTransport* t = dialed(c);
    peer_hello(t);
    REQUIRE(link->up());
    return t;
  }
};

}  // namespace

// --- which transport start() dials ----------------------------------------------------

TEST_CASE("peer link: start() dials RDMA first in auto when an RDMA connector exists") {
  Fixture f(TransportMode::kAuto);
  CHECK(f.info().state == "connecting");
  f.link->start();
  REQUIRE(f.rdma.calls.size() == 1);
  CHECK(f.tcp.calls.empty());
  CHECK(f.rdma.calls[0].endpoint == "tcp:127.0.0.1:17472");  // the peer's RDMA port
  CHECK(f.rdma.calls[0].timeout_ms == 1000);                 // connect_timeout_ms
  CHECK(f.rdma.live_dials == 1);
  PeerInfo info = f.info();
  CHECK(info.transport == "rdma");
  CHECK(info.state == "connecting");
  CHECK(info.transport_reason == "RDMA device available");
  // Starting again while a dial is under way dials nothing more.
  f.link->start();
  CHECK(f.rdma.calls.size() == 1);
}

TEST_CASE("peer link: start() dials TCP in tcp mode, and in auto without an RDMA connector") {
  SECTION("transport: tcp, with an RDMA device") {
    Fixture f(TransportMode::kTcp);
    f.link->start();
    CHECK(f.rdma.calls.empty());
    REQUIRE(f.tcp.calls.size() == 1);
    CHECK(f.tcp.calls[0].endpoint == "tcp:127.0.0.1:17471");
    CHECK(f.tcp.calls[0].timeout_ms == 1000);
    CHECK(f.info().transport == "tcp");
    CHECK(f.info().transport_reason == "configured");
  }
  SECTION("transport: auto, no RDMA device") {
    Fixture f(TransportMode::kAuto, /*with_rdma=*/false);
    f.link->start();
    CHECK(f.rdma.calls.empty());
    REQUIRE(f.tcp.calls.size() == 1);
    CHECK(f.info().transport == "tcp");
    CHECK(f.info().transport_reason == "no usable RDMA device here");
  }
}

TEST_CASE("peer link: a dialed transport becomes a session that says HELLO; the peer's HELLO makes it up") {
  Fixture f(TransportMode::kTcp);
  f.link->start();
  FakeTransport* t = f.dialed(f.tcp);
  CHECK(f.tcp.live_dials == 0);  // the Dial is dropped once it delivered
  CHECK(t->started());
  auto frames = t->written();
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].type() == FrameType::kHello);
  CHECK_FALSE(f.link->up());
  CHECK(f.info().state == "connecting");
  REQUIRE(f.info().sessions.size() == 1);
  CHECK(f.info().sessions[0].state == "handshake");
  f.peer_hello(t);
  CHECK(f.link->up());
  PeerInfo info = f.info();
  CHECK(info.state == "up");
  REQUIRE(info.sessions.size() == 1);
  CHECK(info.sessions[0].state == "open");
  CHECK(info.sessions[0].role == "dialer");
  CHECK(info.sessions[0].transport == "tcp");
  CHECK(info.sessions[0].peer_node == "peer-b");
}

// --- failures and backoff ----------------------------------------------------------------

TEST_CASE("peer link: failed dials back off exponentially from 50 ms, capped at reconnect_max_ms") {
  Fixture f(TransportMode::kTcp);  // reconnect_max_ms = 300
  f.link->start();
  REQUIRE(f.tcp.calls.size() == 1);
  const uint32_t expected[] = {50, 100, 200, 300, 300, 300};
  uint32_t n = 1;
  for (uint32_t backoff : expected) {
    f.tcp.fail("connection refused #" + std::to_string(n));
    CHECK(f.link->consecutive_failures() == n);
    CHECK(f.link->last_error() == "connection refused #" + std::to_string(n));
    CHECK(f.tcp.live_dials == 0);
    CHECK(f.info().state == "down");
    // loop.now() stays at t0 here, so each retry is due at t0 + backoff.
    f.link->tick(f.t0 + std::chrono::milliseconds(backoff) - 1ms);
    INFO("backoff " << backoff);
    CHECK(f.tcp.calls.size() == n);
    f.link->tick(f.t0 + std::chrono::milliseconds(backoff));
    REQUIRE(f.tcp.calls.size() == n + 1);
    CHECK(f.info().state == "connecting");
    ++n;
  }
  CHECK(f.rdma.calls.empty());
}

TEST_CASE("peer link: the first backoff is tunnel.reconnect_min_ms, doubling from there") {
  Fixture f(TransportMode::kTcp);  // reconnect_max_ms = 300
  f.tunnel.reconnect_min_ms = 120;
  f.link = std::make_unique<PeerLink>(f.loop, f.pool, f.peer, f.settings, f.tunnel, Connectors{&f.tcp, &f.rdma});
  f.link->start();
  REQUIRE(f.tcp.calls.size() == 1);
  uint32_t n = 1;
  for (uint32_t backoff : {120u, 240u, 300u, 300u}) {
    f.tcp.fail("connection refused");
    INFO("backoff " << backoff);
    f.link->tick(f.t0 + std::chrono::milliseconds(backoff) - 1ms);
    CHECK(f.tcp.calls.size() == n);
    f.link->tick(f.t0 + std::chrono::milliseconds(backoff));
    REQUIRE(f.tcp.calls.size() == n + 1);
    ++n;
  }
  // Above the ceiling, the ceiling: every wait is reconnect_max_ms.
  Fixture g(TransportMode::kTcp);
  g.tunnel.reconnect_min_ms = 5000;
  g.link = std::make_unique<PeerLink>(g.loop, g.pool, g.peer, g.settings, g.tunnel, Connectors{&g.tcp, &g.rdma});
  g.link->start();
  g.tcp.fail("connection refused");
  g.link->tick(g.t0 + 299ms);
  CHECK(g.tcp.calls.size() == 1);
  g.link->tick(g.t0 + 300ms);
  CHECK(g.tcp.calls.size() == 2);
}

TEST_CASE("peer link: a connector that fails at once counts as a failed dial and is retried") {
  Fixture f(TransportMode::kTcp);
  f.tcp.fail_at_once = "socket: Too many open files";
  f.link->start();
  CHECK(f.tcp.calls.size() == 1);
  CHECK(f.tcp.live_dials == 0);
  CHECK(f.link->consecutive_failures() == 1);
  CHECK(f.link->last_error() == "socket: Too many open files");
  CHECK(f.info().state == "down");
  f.link->tick(f.t0 + 49ms);
  CHECK(f.tcp.calls.size() == 1);
  f.link->tick(f.t0 + 50ms);
  CHECK(f.tcp.calls.size() == 2);
  CHECK(f.link->consecutive_failures() == 2);
  // It comes back: the next dial succeeds and the count resets.
  f.tcp.fail_at_once.clear();
  f.link->tick(f.t0 + 150ms);
  REQUIRE(f.tcp.calls.size() == 3);
  f.bring_up(f.tcp);
  CHECK(f.link->consecutive_failures() == 0);
  CHECK(f.link->last_error().empty());
}

TEST_CASE("peer link: a session that opens resets the failures and the backoff") {
  Fixture f(TransportMode::kTcp);
  f.link->start();
  f.tcp.fail("refused");
  f.link->tick(f.t0 + 50ms);
  f.tcp.fail("refused");
  f.link->tick(f.t0 + 150ms);
  REQUIRE(f.tcp.calls.size() == 3);
  CHECK(f.link->consecutive_failures() == 2);
  FakeTransport* t = f.bring_up(f.tcp);
  CHECK(f.link->consecutive_failures() == 0);
  CHECK(f.link->last_error().empty());
  // The session dies: one failure, and the first backoff step again.
  t->fail("connection reset by peer");
  f.loop.end_batch();
  CHECK_FALSE(f.link->up());
  CHECK(f.link->consecutive_failures() == 1);
  CHECK(f.link->last_error() == "connection reset by peer");
  CHECK(f.info().state == "down");
  f.link->tick(f.t0 + 49ms);
  CHECK(f.tcp.calls.size() == 3);
  f.link->tick(f.t0 + 50ms);
  CHECK(f.tcp.calls.size() == 4);
}

TEST_CASE("peer link: in auto an RDMA failure falls back to TCP at once") {
  Fixture f(TransportMode::kAuto);
  f.link->start();
  REQUIRE(f.rdma.calls.size() == 1);
  f.rdma.fail("RDMA_CM_EVENT_REJECTED");
  // No tick needed: the TCP dial starts inside the failure.
  REQUIRE(f.tcp.calls.size() == 1);
  CHECK(f.tcp.calls[0].endpoint == "tcp:127.0.0.1:17471");
  CHECK(f.link->consecutive_failures() == 0);  // the peer is not down: TCP is being tried
  CHECK(f.info().state == "connecting");
  f.bring_up(f.tcp);
  PeerInfo info = f.info();
  CHECK(info.transport == "tcp");
  CHECK(info.transport_reason.find("RDMA failed (RDMA_CM_EVENT_REJECTED)") != std::string::npos);
}

TEST_CASE("peer link: in auto, RDMA failing 3 times in a row switches the peer to TCP") {
  Fixture f(TransportMode::kAuto);
  f.link->start();
  for (int round = 1; round <= 3; ++round) {
    INFO("round " << round);
    REQUIRE(f.rdma.calls.size() == static_cast<size_t>(round));
    f.rdma.fail("no route");
    REQUIRE(f.tcp.calls.size() == static_cast<size_t>(round));  // the fallback
    f.tcp.fail("refused");
    CHECK(f.link->consecutive_failures() == static_cast<uint32_t>(round));
    f.link->tick(f.t0 + 1s);  // past any backoff
  }
  // The fourth attempt goes straight to TCP.
  CHECK(f.rdma.calls.size() == 3);
  CHECK(f.tcp.calls.size() == 4);
  CHECK(f.info().transport == "tcp");
  f.tcp.fail("refused");
  f.link->tick(f.t0 + 2s);
  CHECK(f.rdma.calls.size() == 3);
  CHECK(f.tcp.calls.size() == 5);
}

TEST_CASE(
    "peer link: in auto, an RDMA session that lasts twice keepalive_timeout_ms resets the count of RDMA failures") {
  Fixture f(TransportMode::kAuto);
  f.link->start();
  for (int i = 0; i < 2; ++i) {
    f.rdma.fail("no route");
    f.tcp.fail("refused");
    f.link->tick(f.t0 + 1s);
  }
  REQUIRE(f.rdma.calls.size() == 3);
  FakeTransport* t = f.bring_up(f.rdma);
  CHECK(f.info().transport == "rdma");
  CHECK(f.info().transport_reason == "RDMA CM connect succeeded");
  // Connected is not proven: only a transport that lasts clears the count.
  f.link->tick(f.t0 + std::chrono::milliseconds(2 * f.tunnel.keepalive_timeout_ms));
  t->fail("QP error");
  f.loop.end_batch();
  // Two more RDMA failures do not switch: the count started over.
  for (int i = 0; i < 2; ++i) {
    f.link->tick(f.t0 + 1s);
    REQUIRE(f.rdma.calls.size() == static_cast<size_t>(4 + i));
    f.rdma.fail("no route");
    f.tcp.fail("refused");
  }
  f.link->tick(f.t0 + 1s);
  CHECK(f.rdma.calls.size() == 6);
}

TEST_CASE("peer link: transport rdma never falls back to TCP, and says why it failed") {
  Fixture f(TransportMode::kRdma);
  f.link->start();
  for (int round = 1; round <= 5; ++round) {
    INFO("round " << round);
    REQUIRE(f.rdma.calls.size() == static_cast<size_t>(round));
    f.rdma.fail("RDMA_CM_EVENT_UNREACHABLE");
    CHECK(f.tcp.calls.empty());
    CHECK(f.link->consecutive_failures() == static_cast<uint32_t>(round));
    CHECK(f.link->last_error() == "rdma: RDMA_CM_EVENT_UNREACHABLE");
    CHECK(f.info().state == "down");
    CHECK(f.info().transport == "rdma");
    f.link->tick(f.t0 + 1s);
  }
  CHECK(f.tcp.calls.empty());
}

TEST_CASE("peer link: a failed TCP fallback is logged and reported as a TCP failure") {
  Fixture f(TransportMode::kAuto);
  std::string log;
  {
    StderrCapture capture;
    f.link->start();
    f.rdma.fail("RDMA_CM_EVENT_REJECTED");
    f.tcp.fail("connect tcp:127.0.0.1:17471: Connection refused");
    log = capture.text();
  }
  INFO(log);
  // The regression: this line said transport=rdma in auto mode.
  auto failed = lines_with(log, {"event=peer_connect_failed"});
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].find("transport=tcp") != std::string::npos);
  CHECK(failed[0].find("transport=rdma") == std::string::npos);
  CHECK(failed[0].find("peer=b") != std::string::npos);
  CHECK(lines_with(log, {"event=transport_fallback", "from=rdma", "to=tcp"}).size() == 1);

  CHECK(f.link->consecutive_failures() == 1);
  CHECK(f.link->last_error() == "connect tcp:127.0.0.1:17471: Connection refused");
  PeerInfo info = f.info();
  CHECK(info.state == "down");
  CHECK(info.last_error == "connect tcp:127.0.0.1:17471: Connection refused");
  // describe() names the transport in use or to be tried next: RDMA is still
  // preferred after one failure; the reason tells what happened.
  CHECK(info.transport == "rdma");
  CHECK(info.transport_reason.find("RDMA failed") != std::string::npos);
}

TEST_CASE("peer link: transport rdma logs its failures as rdma") {
  Fixture f(TransportMode::kRdma);
  std::string log;
  {
    StderrCapture capture;
    f.link->start();
    f.rdma.fail("RDMA_CM_EVENT_REJECTED");
    log = capture.text();
  }
  INFO(log);
  auto failed = lines_with(log, {"event=peer_connect_failed"});
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].find("transport=rdma") != std::string::npos);
}

// --- streams waiting for a session ---------------------------------------------------

TEST_CASE("peer link: streams submitted while down wait, and attach once the session's HELLO arrives") {
  Fixture f(TransportMode::kTcp);
  WaitingStream s1, s2, s3;
  f.link->submit(&s1);  // submitting dials when nothing is under way
  REQUIRE(f.tcp.calls.size() == 1);
  f.link->submit(&s2);
  CHECK(f.tcp.calls.size() == 1);
  CHECK(f.info().waiting_streams == 2);
  FakeTransport* t = f.dialed(f.tcp);
  CHECK(s1.attaches == 0);  // handshake: not yet
  REQUIRE(t->inject_all(peer_b_hello()));
  CHECK(s1.attaches == 0);  // the session announces itself at the end of the batch
  f.loop.end_batch();
  CHECK(s1.attaches == 1);
  CHECK(s2.attaches == 1);
  CHECK(s1.attached_to != nullptr);
  CHECK(s1.attached_to == s2.attached_to);
  CHECK(s1.aborts + s2.aborts == 0);
  CHECK(f.info().waiting_streams == 0);
  // While up, a new stream attaches at once.
  f.link->submit(&s3);
  CHECK(s3.attaches == 1);
  CHECK(s3.attached_to == s1.attached_to);
  CHECK(f.tcp.calls.size() == 1);
}

TEST_CASE("peer link: streams attach in arrival order and open on the session") {
  Fixture f(TransportMode::kTcp);
  WaitingStream s1(true), s2(true);
  f.link->submit(&s1);
  f.link->submit(&s2);
  FakeTransport* t = f.dialed(f.tcp);
  f.peer_hello(t);
  REQUIRE(s1.opened);
  REQUIRE(s2.opened);
  CHECK(s1.stream_id() == 1);  // the dialer's ids are odd, in order
  CHECK(s2.stream_id() == 3);
  auto frames = t->written();
  std::vector<uint32_t> opens;
  for (auto& fr : frames)
    if (fr.type() == FrameType::kOpen) opens.push_back(fr.id());
  CHECK(opens == std::vector<uint32_t>{1, 3});
  REQUIRE(f.info().sessions.size() == 1);
  CHECK(f.info().sessions[0].streams == 2);
  // Detach both before the session goes (they live on the stack).
  s1.session()->detach(s1);
  s2.session()->detach(s2);
}

TEST_CASE("peer link: a waiting stream is aborted with kPeerGone after connect_timeout_ms") {
  Fixture f(TransportMode::kTcp);  // connect_timeout_ms = 1000
  WaitingStream s;
  f.link->submit(&s);
  REQUIRE(f.tcp.calls.size() == 1);
  f.link->tick(f.t0 + 999ms);
  CHECK(s.aborts == 0);
  f.link->tick(f.t0 + 1000ms);
  CHECK(s.aborts == 1);
  CHECK(s.abort_code == ResetCode::kPeerGone);
  CHECK(s.abort_reason.find("connect_timeout_ms") != std::string::npos);
  CHECK(f.info().waiting_streams == 0);
  // The dial goes on; the stream is not attached when it ends.
  f.bring_up(f.tcp);
  CHECK(s.attaches == 0);
}

TEST_CASE("peer link: a stream that ends while it waits leaves the queue and is never called again") {
  Fixture f(TransportMode::kTcp);
  WaitingStream first, second;
  f.link->submit(&first);
  {
    WaitingStream ending;
    f.link->submit(&ending);
    f.link->submit(&second);
    ending.end();
    CHECK(f.info().waiting_streams == 2);
  }  // destroyed: the link must hold no pointer to it
  {
    WaitingStream destroyed_while_waiting;
    f.link->submit(&destroyed_while_waiting);
  }  // its destructor leaves the queue too
  CHECK(f.info().waiting_streams == 2);
  f.bring_up(f.tcp);
  CHECK(first.attaches == 1);
  CHECK(second.attaches == 1);
}

TEST_CASE("peer link: a refused dial diverts the waiting streams that can go directly; the others wait") {
  Fixture f(TransportMode::kTcp);
  WaitingStream service, plain;
  service.divertible = true;
  f.link->submit(&service);
  f.link->submit(&plain);
  REQUIRE(f.tcp.calls.size() == 1);
  CHECK_FALSE(f.link->refused_at());
  f.tcp.fail("connect tcp:10.0.0.9:7471: Connection refused", /*refused=*/true);
  CHECK(service.diverts == 1);
  CHECK(plain.diverts == 0);
  CHECK(f.info().waiting_streams == 1);  // the plain one waits on, for the retry
  CHECK(f.link->refused_at());
  // The retry connects: something listens after all.
  f.link->tick(f.t0 + 50ms);
  REQUIRE(f.tcp.calls.size() == 2);
  f.bring_up(f.tcp);
  CHECK_FALSE(f.link->refused_at());
  CHECK(plain.attaches == 1);
  CHECK(service.attaches == 0);
  CHECK(service.aborts + plain.aborts == 0);
}

TEST_CASE("peer link: a dial that fails otherwise (not refused) diverts nothing") {
  Fixture f(TransportMode::kTcp);
  WaitingStream service;
  service.divertible = true;
  f.link->submit(&service);
  f.tcp.fail("connect tcp:10.0.0.9:7471: timed out");
  CHECK(service.diverts == 0);
  CHECK(f.info().waiting_streams == 1);
  CHECK_FALSE(f.link->refused_at());
  f.link->tick(f.t0 + 1000ms);  // connect_timeout_ms: it ends as any waiting stream does
  CHECK(service.aborts == 1);
}

TEST_CASE("peer link: take_waiting() hands the waiting streams over") {
  Fixture f(TransportMode::kTcp);
  WaitingStream s1, s2;
  f.link->submit(&s1);
  f.link->submit(&s2);
  auto taken = f.link->take_waiting();
  CHECK(taken == std::vector<PendingStream*>{&s1, &s2});
  CHECK(f.info().waiting_streams == 0);
  f.link->tick(f.t0 + 10s);
  CHECK(s1.aborts + s2.aborts == 0);
}

// --- drain, shutdown, retirement -------------------------------------------------------

TEST_CASE("peer link: a session that gets GOAWAY drains and a new dial starts") {
  Fixture f(TransportMode::kTcp);
  WaitingStream carried(true);
  f.link->submit(&carried);
  bool first_gone = false;
  FakeTransport* first = f.dialed(f.tcp, &first_gone);
  f.peer_hello(first);
  REQUIRE(carried.opened);
  Session* old_session = carried.attached_to;
  REQUIRE(f.tcp.calls.size() == 1);

  REQUIRE(first->inject_all(test::goaway_bytes()));
  f.loop.end_batch();
  CHECK_FALSE(f.link->up());
  REQUIRE(f.tcp.calls.size() == 2);  // dialed anew at once, no backoff
  CHECK(f.link->consecutive_failures() == 0);
  PeerInfo info = f.info();
  REQUIRE(info.sessions.size() == 1);
  CHECK(info.sessions[0].state == "draining");
  CHECK(info.state == "connecting");

  // A new stream waits for the new session, not the draining one.
  WaitingStream next;
  f.link->submit(&next);
  CHECK(next.attaches == 0);
  FakeTransport* second = f.dialed(f.tcp);
  f.peer_hello(second);
  CHECK(next.attaches == 1);
  CHECK(next.attached_to != old_session);
  CHECK(f.info().sessions.size() == 2);

  // The draining session still carries its stream: ticks leave it open.
  f.link->tick(f.t0 + 10ms);
  CHECK_FALSE(first->closed());
  // Once its last stream is done, the next tick closes it (flushing what it queued).
  old_session->detach(carried);
  f.link->tick(f.t0 + 20ms);
  CHECK(first->closed());
  CHECK(first->close_mode() == CloseMode::kFlush);
  f.loop.end_batch();
  CHECK(first_gone);  // the session let go of it, and the loop deleted both
  CHECK(f.info().sessions.size() == 1);
  CHECK(f.link->up());
  CHECK(f.link->consecutive_failures() == 0);
}

TEST_CASE("peer link: begin_shutdown aborts waiting streams with kShutdown and cancels the dial") {
  Fixture f(TransportMode::kTcp);
  WaitingStream s1, s2;
  f.link->submit(&s1);
  f.link->submit(&s2);
  REQUIRE(f.tcp.live_dials == 1);
  f.link->begin_shutdown();
  CHECK(f.tcp.live_dials == 0);  // the Dial was destroyed
  CHECK(f.tcp.dials_destroyed == 1);
  CHECK(s1.aborts == 1);
  CHECK(s2.aborts == 1);
  CHECK(s1.abort_code == ResetCode::kShutdown);
  CHECK(s2.abort_code == ResetCode::kShutdown);
  // Streams arriving now are refused at once; nothing is dialed any more.
  WaitingStream late;
  f.link->submit(&late);
  CHECK(late.aborts == 1);
  CHECK(late.abort_code == ResetCode::kShutdown);
  f.link->tick(f.t0 + 10s);
  CHECK(f.tcp.calls.size() == 1);
  CHECK(f.link->finished());
}

TEST_CASE("peer link: begin_shutdown lets a session carry its streams on") {
  Fixture f(TransportMode::kTcp);
  WaitingStream carried(true);
  f.link->submit(&carried);
  FakeTransport* t = f.dialed(f.tcp);
  f.peer_hello(t);
  REQUIRE(carried.opened);
  f.link->begin_shutdown();
  CHECK(carried.aborts == 0);
  CHECK(carried.lost == 0);
  CHECK_FALSE(t->closed());
  // close_all ends it: the stream hears the session is lost.
  f.link->close_all("shutdown", CloseMode::kFlush);
  CHECK(t->closed());
  f.loop.end_batch();
  CHECK(carried.lost == 1);
  // A session that ends during shutdown is not a failure, and nothing is redialed.
  CHECK(f.link->consecutive_failures() == 0);
  f.link->tick(f.t0 + 10s);
  CHECK(f.tcp.calls.size() == 1);
  CHECK(f.link->finished());
}

TEST_CASE("peer link: retire() lets open streams finish, then finished()") {
  Fixture f(TransportMode::kTcp);
  WaitingStream carried(true);
  f.link->submit(&carried);
  FakeTransport* t = f.dialed(f.tcp);
  f.peer_hello(t);
  REQUIRE(carried.opened);
  WaitingStream waiting;  // not yet submitted: retire refuses it below

  f.link->retire();
  CHECK_FALSE(f.link->finished());
  CHECK_FALSE(f.link->up());
  PeerInfo info = f.info();
  CHECK(info.state == "removed");
  CHECK_FALSE(info.configured);
  REQUIRE(info.sessions.size() == 1);
  f.link->submit(&waiting);
  CHECK(waiting.abort_code == ResetCode::kShutdown);

  f.link->tick(f.t0 + 10ms);
  CHECK_FALSE(t->closed());  // still carries a stream
  CHECK(carried.lost == 0);
  carried.session()->detach(carried);
  f.link->tick(f.t0 + 20ms);
  CHECK(t->closed());
  CHECK(t->close_mode() == CloseMode::kFlush);
  CHECK_FALSE(f.link->finished());  // closed; the link hears it at the end of the batch
  f.loop.end_batch();
  CHECK(f.link->finished());
  CHECK(f.info().sessions.empty());
  CHECK(f.tcp.calls.size() == 1);  // never redialed
}

TEST_CASE("peer link: retire() while down cancels the dial and is finished at once") {
  Fixture f(TransportMode::kAuto);
  WaitingStream s;
  f.link->submit(&s);
  REQUIRE(f.rdma.live_dials == 1);
  f.link->retire();
  CHECK(f.rdma.live_dials == 0);
  CHECK(s.abort_code == ResetCode::kShutdown);
  CHECK(f.link->finished());
}

TEST_CASE("peer link: the peer may not open streams on a session we dialed") {
  Fixture f(TransportMode::kTcp);
  f.link->start();
  FakeTransport* t = f.bring_up(f.tcp);
  t->written();
  std::vector<uint8_t> open(kHeaderSize + 2 + 16);
  uint8_t* start = encode_open_before(open.data() + open.size(), 2, "tcp:127.0.0.1:22", 0);
  REQUIRE(start == open.data());
  REQUIRE(t->inject_all(open));
  f.loop.end_batch();
  auto frames = t->written();
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].type() == FrameType::kReset);
  CHECK(frames[0].id() == 2);
  CHECK(frames[0].u32() == static_cast<uint32_t>(ResetCode::kNotAllowed));
  CHECK(f.link->up());
}

TEST_CASE("peer link: destroying the link aborts waiting streams and drops the dial") {
  auto f = std::make_unique<Fixture>(TransportMode::kTcp);
  WaitingStream s;
  f->link->submit(&s);
  REQUIRE(f->tcp.live_dials == 1);
  f->link.reset();
  CHECK(f->tcp.live_dials == 0);
  CHECK(s.aborts == 1);
  CHECK(s.abort_code == ResetCode::kShutdown);
}

TEST_CASE("peer link: a peer that answers HELLO and drops in the same batch counts as a failed dial") {
  Fixture f(TransportMode::kTcp);
  f.link->start();
  Clock::time_point t = f.t0;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(f.tcp.calls.size() == static_cast<size_t>(i + 1));
    FakeTransport* tr = f.dialed(f.tcp);
    REQUIRE(tr->inject_all(peer_b_hello()));
    tr->fail("connection reset by peer");  // same batch as the HELLO
    f.loop.end_batch();
    CHECK_FALSE(f.link->up());
    // Failures add up (so the backoff grows and the log thins out), and the
    // link never reports the peer up.
    INFO("attempt " << i << " failures " << f.link->consecutive_failures());
    CHECK(f.link->consecutive_failures() == static_cast<uint32_t>(i + 1));
    t += 10s;  // past any backoff: redial
    f.link->tick(t);
  }
}

// --- auto: moving a session from TCP back onto RDMA -----------------------------------

namespace {

// The peer's HELLO offering resumption, and RDMA placement when asked.
test::Bytes resumable_hello(bool places_rdma = true) {
  auto h = test::hello(16384, 256 * 1024, 32ull * 1024 * 1024, "peer-b");
  h.capabilities = kCapResume | (places_rdma ? kCapRdmaPlacement : 0);
  return test::hello_bytes(h);
}

test::Bytes session_bytes(const SessionToken& token, SessionKind kind, uint64_t received) {
  test::Bytes out(kHeaderSize + kSessionPayloadSize);
  encode_session(out.data(), SessionPayload{token, kind, received});
  return out;
}

// A resumable session up on TCP after RDMA failed once (auto).
struct OnTcp : Fixture {
  FakeTransport* tcp_wire = nullptr;
  explicit OnTcp(bool places_rdma = true, uint32_t probe_ms = 2000) : Fixture(TransportMode::kAuto) {
    tunnel_keys(settings).resume_timeout_ms = 10000;
    tunnel.rdma_probe_interval_ms = probe_ms;
    link = std::make_unique<PeerLink>(loop, pool, peer, settings, tunnel, Connectors{&tcp, &rdma});
    link->start();
    rdma.fail("RDMA_CM_EVENT_UNREACHABLE");
    tcp_wire = dialed(tcp);
    REQUIRE(tcp_wire->inject_all(resumable_hello(places_rdma)));
    loop.end_batch();
    REQUIRE(link->up());
    REQUIRE(info().transport == "tcp");
  }
};

// A resumable session up on RDMA (auto or rdma).
struct OnRdma : Fixture {
  FakeTransport* wire = nullptr;
  explicit OnRdma(TransportMode mode) : Fixture(mode) {
    tunnel_keys(settings).resume_timeout_ms = 10000;
    link = std::make_unique<PeerLink>(loop, pool, peer, settings, tunnel, Connectors{&tcp, &rdma});
    link->start();
    wire = dialed(rdma);
    REQUIRE(wire->inject_all(resumable_hello()));
    loop.end_batch();
    REQUIRE(link->up());
  }
};

}  // namespace

TEST_CASE("peer link: auto tries RDMA again every rdma_probe_interval_ms while a session runs on TCP") {
  OnTcp f;
  f.link->tick(f.t0 + 1999ms);
  CHECK(f.rdma.calls.size() == 1);
  f.link->tick(f.t0 + 2000ms);
  REQUIRE(f.rdma.calls.size() == 2);
  // The connect names the session, so that the peer places it with the worker holding it.
  REQUIRE(f.rdma.calls[1].session.has_value());
  f.rdma.fail("RDMA_CM_EVENT_UNREACHABLE");
  // A failed try leaves the session where it is: no TCP dial, no failure counted.
  CHECK(f.tcp.calls.size() == 1);
  CHECK(f.link->up());
  CHECK(f.link->consecutive_failures() == 0);
  PeerInfo info = f.info();
  CHECK(info.transport == "tcp");
  CHECK(info.transport_reason.find("trying RDMA again every 2000 ms") != std::string::npos);
  f.link->tick(f.t0 + 3999ms);
  CHECK(f.rdma.calls.size() == 2);
  f.link->tick(f.t0 + 4000ms);
  CHECK(f.rdma.calls.size() == 3);
}

TEST_CASE("peer link: an RDMA connect that succeeds moves the session onto it, which resumes there") {
  OnTcp f;
  PeerInfo before = f.info();
  REQUIRE(before.sessions.size() == 1);
  f.link->tick(f.t0 + 2s);
  REQUIRE(f.rdma.calls.size() == 2);
  SessionToken token = *f.rdma.calls[1].session;
  f.tcp_wire->written();  // what the session sent on TCP so far
  FakeTransport* rdma_wire = f.dialed(f.rdma);
  f.loop.end_batch();
  // The TCP transport is closed; the session says HELLO, then asks to resume on RDMA.
  CHECK(f.tcp_wire->closed());
  auto frames = rdma_wire->written();
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].header.type == FrameType::kHello);
  REQUIRE(rdma_wire->inject_all(resumable_hello()));
  f.loop.end_batch();
  frames = rdma_wire->written();
  REQUIRE(frames.size() == 1);
  REQUIRE(frames[0].header.type == FrameType::kSession);
  SessionPayload ask;
  std::string reason;
  REQUIRE(decode_session(frames[0].payload, &ask, &reason));
  CHECK(ask.kind == SessionKind::kResume);
  CHECK(ask.token == token);
  PeerInfo moving = f.info();
  CHECK(moving.transport == "rdma");
  CHECK(moving.state == "resuming");
  CHECK(moving.transport_reason == "RDMA CM connect succeeded again; moved from TCP");
  // The peer resumes it: the session is up again, on RDMA, and no new one was dialed.
  REQUIRE(rdma_wire->inject_all(session_bytes(token, SessionKind::kResumed, 0)));
  f.loop.end_batch();
  CHECK(f.link->up());
  PeerInfo after = f.info();
  CHECK(after.transport == "rdma");
  REQUIRE(after.sessions.size() == 1);
  CHECK(after.sessions[0].resumes == 1);
  CHECK(f.tcp.calls.size() == 1);
  // On RDMA, nothing more is tried.
  f.link->tick(f.t0 + 10s);
  CHECK(f.rdma.calls.size() == 2);
}

TEST_CASE("peer link: a session that cannot move stays on TCP and RDMA is not tried for it") {
  SECTION("the peer does not place RDMA connects by session") {
    OnTcp f(false);
    f.link->tick(f.t0 + 10s);
    CHECK(f.rdma.calls.size() == 1);
  }
  SECTION("rdma_probe_interval_ms: 0") {
    OnTcp f(true, 0);
    f.link->tick(f.t0 + 10s);
    CHECK(f.rdma.calls.size() == 1);
  }
}

TEST_CASE("peer link: a session that loses TCP while RDMA is tried resumes on the RDMA connect") {
  OnTcp f;
  f.link->tick(f.t0 + 2s);
  REQUIRE(f.rdma.calls.size() == 2);
  f.tcp_wire->fail("connection reset by peer");
  f.loop.end_batch();
  CHECK(f.info().state == "resuming");
  CHECK(f.tcp.calls.size() == 1);  // the RDMA connect under way serves the resume
  SECTION("it succeeds") {
    FakeTransport* rdma_wire = f.dialed(f.rdma);
    f.loop.end_batch();
    auto frames = rdma_wire->written();
    REQUIRE(frames.size() == 1);
    CHECK(frames[0].header.type == FrameType::kHello);
    CHECK(f.info().transport == "rdma");
  }
  SECTION("it fails: TCP at once") {
    f.rdma.fail("RDMA_CM_EVENT_UNREACHABLE");
    CHECK(f.tcp.calls.size() == 2);
  }
}

TEST_CASE("peer link: in auto, an RDMA transport that fails soon after it came up counts as an RDMA failure") {
  // It connected but could not carry (a link that reorders most packets):
  // the suspended session resumes on TCP, as after a failed RDMA dial.
  OnRdma f(TransportMode::kAuto);
  FakeTransport* wire = f.wire;
  REQUIRE(f.info().transport == "rdma");
  wire->fail("keepalive timeout");
  f.loop.end_batch();
  CHECK(f.info().state == "resuming");
  REQUIRE(f.tcp.calls.size() == 1);  // at once, without a tick
  CHECK(f.tcp.calls[0].session.has_value());
  CHECK(f.rdma.calls.size() == 1);
  CHECK(f.info().transport_reason.find("the RDMA transport failed 0 ms after it came up") != std::string::npos);
  SECTION("three such failures switch the peer to TCP") {
    for (int round = 2; round <= 3; ++round) {
      INFO("round " << round);
      FakeTransport* tcp_wire = f.dialed(f.tcp);
      f.loop.end_batch();
      tcp_wire->fail("reset");
      f.loop.end_batch();
      f.link->tick(f.t0 + 1s);
      REQUIRE(f.rdma.calls.size() == static_cast<size_t>(round));
      wire = f.dialed(f.rdma);
      f.loop.end_batch();
      wire->fail("keepalive timeout");
      f.loop.end_batch();
    }
    FakeTransport* tcp_wire = f.dialed(f.tcp);
    f.loop.end_batch();
    tcp_wire->fail("reset");
    f.loop.end_batch();
    f.link->tick(f.t0 + 1s);
    CHECK(f.rdma.calls.size() == 3);  // TCP now, not RDMA
  }
}

TEST_CASE("peer link: transport rdma retries a rejected connect for a suspended session until it resumes") {
  // The peer's RDMA CM listener is away for a moment in a takeover: a
  // rejection is not the end of the session (a refused TCP connect is).
  OnRdma f(TransportMode::kRdma);
  FakeTransport* wire = f.wire;
  wire->fail("RDMA device removed");
  f.loop.end_batch();
  REQUIRE(f.rdma.calls.size() == 2);
  f.rdma.fail("connection rejected by the peer", true);
  CHECK(f.info().state == "resuming");
  f.link->tick(f.t0 + 1s);
  REQUIRE(f.rdma.calls.size() == 3);
  CHECK(f.rdma.calls[2].session.has_value());
  CHECK(f.tcp.calls.empty());
  FakeTransport* again = f.dialed(f.rdma);
  f.loop.end_batch();
  CHECK(again->written().at(0).header.type == FrameType::kHello);
}

// --- on demand (connect: on_demand, the default) --------------------------------------

namespace {

// tunnel.max_sessions as the worker answers it: room or not.
struct FakeBudget final : SessionBudget {
  bool room = true;
  int asked = 0;
  bool make_room_for_session(const PeerLink&) override {
    ++asked;
    return room;
  }
  // tunnel.rdma.max_pinned
  RdmaRoom rdma = RdmaRoom::kYes;
  int rdma_asked = 0;
  RdmaRoom make_room_for_rdma(const PeerLink&) override {
    ++rdma_asked;
    return rdma;
  }
  bool has_rdma_room() const override { return rdma == RdmaRoom::kYes; }
  // tunnel.sessions_per_peer
  bool may_hold = true;
  bool may_hold_session(const PeerLink&) override { return may_hold; }
};

}  // namespace

TEST_CASE("peer link: on demand, start() dials nothing; the first stream dials, and waits for the session") {
  Fixture f(TransportMode::kTcp, true, /*always=*/false);
  f.link->start();
  f.link->tick(f.t0 + 10s);
  CHECK(f.tcp.calls.empty());
  CHECK(f.info().state == "idle");
  CHECK(f.info().connect == "on_demand");
  WaitingStream s(true);
  f.link->submit(&s);
  REQUIRE(f.tcp.calls.size() == 1);
  f.peer_hello(f.dialed(f.tcp));
  CHECK(s.opened);
  CHECK(f.info().state == "up");
  s.attached_to->detach(s);  // the stream goes before the session
}

TEST_CASE("peer link: on demand, a session without streams closes after session_idle_ms, and none is dialled") {
  Fixture f(TransportMode::kTcp, true, /*always=*/false);
  f.tunnel.session_idle_ms = 1000;
  f.link->set_session_idle_ms(1000);
  WaitingStream s;  // attaches without opening: the session carries nothing
  f.link->submit(&s);
  bool gone = false;
  FakeTransport* t = f.dialed(f.tcp, &gone);
  f.peer_hello(t);
  REQUIRE(s.attaches == 1);
  f.link->tick(f.t0 + 100ms);  // idle from here
  f.link->tick(f.t0 + 1000ms);
  CHECK_FALSE(t->closed());
  REQUIRE(f.info().sessions.size() == 1);
  CHECK(f.info().sessions[0].idle_ms >= 0);
  f.link->tick(f.t0 + 1100ms);  // 1000 ms idle
  CHECK(t->closed());
  CHECK(t->close_mode() == CloseMode::kFlush);
  f.loop.end_batch();
  CHECK(gone);
  PeerInfo info = f.info();
  CHECK(info.sessions.empty());
  CHECK(info.state == "idle");
  CHECK(info.last_close.find("idle for 1000 ms") != std::string::npos);
  CHECK(f.link->consecutive_failures() == 0);
  f.link->tick(f.t0 + 60s);
  CHECK(f.tcp.calls.size() == 1);  // nothing wants a session: none is dialled
  CHECK(f.link->dormant());
  // The next stream dials a new one.
  WaitingStream next;
  f.link->submit(&next);
  CHECK(f.tcp.calls.size() == 2);
}

TEST_CASE("peer link: a session carrying a stream is never idle; connect: always is never closed for idleness") {
  SECTION("on demand, busy") {
    Fixture f(TransportMode::kTcp, true, /*always=*/false);
    f.link->set_session_idle_ms(1000);
    WaitingStream s(true);
    f.link->submit(&s);
    FakeTransport* t = f.dialed(f.tcp);
    f.peer_hello(t);
    REQUIRE(s.opened);
    CHECK_FALSE(f.link->idle_since());
    for (int i = 1; i <= 50; ++i) f.link->tick(f.t0 + i * 100ms);
    CHECK_FALSE(t->closed());
    CHECK_FALSE(f.link->close_if_idle("test"));
    s.attached_to->detach(s);
    f.link->tick(f.t0 + 6s);
    CHECK(f.link->idle_since());
  }
  SECTION("always") {
    Fixture f(TransportMode::kTcp);
    f.link->set_session_idle_ms(1000);
    f.link->start();
    FakeTransport* t = f.bring_up(f.tcp);
    for (int i = 1; i <= 50; ++i) f.link->tick(f.t0 + i * 100ms);
    CHECK_FALSE(t->closed());
    CHECK_FALSE(f.link->idle_since());  // never offered to make room either
    CHECK(f.info().connect == "always");
  }
}

TEST_CASE("peer link: close_if_idle (room for another peer) closes the idle session; the next stream dials anew") {
  Fixture f(TransportMode::kTcp, true, /*always=*/false);
  WaitingStream s;
  f.link->submit(&s);
  FakeTransport* t = f.dialed(f.tcp);
  f.peer_hello(t);
  REQUIRE(f.link->idle_since());
  CHECK(f.link->session_count() == 1);
  REQUIRE(f.link->close_if_idle("closed to make room"));
  CHECK_FALSE(f.link->up());
  // A stream that comes before the close is announced does not attach to it.
  WaitingStream next;
  f.link->submit(&next);
  CHECK(f.tcp.calls.size() == 2);
  CHECK(next.attaches == 0);
  f.loop.end_batch();
  CHECK(f.link->session_count() == 0);
  CHECK(f.info().last_close.find("closed to make room") != std::string::npos);
}

TEST_CASE("peer link: no room under max_sessions fails the waiting streams with kResource and dials nothing") {
  FakeBudget budget;
  budget.room = false;
  Fixture f(TransportMode::kTcp, true, /*always=*/false, &budget);
  WaitingStream s;
  f.link->submit(&s);
  CHECK(budget.asked == 1);
  CHECK(f.tcp.calls.empty());
  CHECK(s.aborts == 1);
  CHECK(s.abort_code == ResetCode::kResource);
  CHECK(s.abort_reason.find("max_sessions") != std::string::npos);
  CHECK(f.info().last_error.find("max_sessions") != std::string::npos);
  // Room again: the next stream gets its session.
  budget.room = true;
  WaitingStream next(true);
  f.link->submit(&next);
  REQUIRE(f.tcp.calls.size() == 1);
  f.peer_hello(f.dialed(f.tcp));
  CHECK(next.opened);
  next.attached_to->detach(next);  // the stream goes before the session
}

TEST_CASE("peer link: a worker without a claim to the peer (sessions_per_peer) dials nothing, and asks again later") {
  FakeBudget budget;
  budget.may_hold = false;  // other workers hold this peer's sessions
  Fixture f(TransportMode::kTcp, true, /*always=*/true, &budget);
  f.link->start();
  CHECK(f.tcp.calls.empty());
  CHECK(budget.asked == 0);  // max_sessions is not even asked
  CHECK(f.info().last_error.find("sessions_per_peer") != std::string::npos);
  f.link->tick(f.t0 + 10s);
  CHECK(f.tcp.calls.empty());
  // The other worker let go: this one dials.
  budget.may_hold = true;
  f.link->tick(f.t0 + 20s);
  CHECK(f.tcp.calls.size() == 1);
}

TEST_CASE("peer link: past rdma.max_pinned, auto dials TCP instead; with room it dials RDMA") {
  FakeBudget budget;
  budget.rdma = SessionBudget::RdmaRoom::kSoon;  // an idle RDMA session is closing for it
  Fixture f(TransportMode::kAuto, true, /*always=*/false, &budget);
  WaitingStream s(true);
  f.link->submit(&s);
  CHECK(budget.rdma_asked == 1);
  CHECK(f.rdma.calls.empty());
  REQUIRE(f.tcp.calls.size() == 1);
  f.peer_hello(f.dialed(f.tcp));
  CHECK(s.opened);
  CHECK(s.aborts == 0);
  CHECK(f.link->consecutive_failures() == 0);  // not an RDMA failure: no backoff, no fallback count
  s.attached_to->detach(s);

  FakeBudget roomy;
  Fixture g(TransportMode::kAuto, true, /*always=*/false, &roomy);
  WaitingStream t(true);
  g.link->submit(&t);
  CHECK(roomy.rdma_asked == 1);
  CHECK(g.rdma.calls.size() == 1);
  CHECK(g.tcp.calls.empty());
  g.peer_hello(g.dialed(g.rdma));
  CHECK(t.opened);
  t.attached_to->detach(t);
}

TEST_CASE("peer link: past rdma.max_pinned, a session put on TCP resumes on TCP and moves to RDMA only with room") {
  FakeBudget budget;
  budget.rdma = SessionBudget::RdmaRoom::kNo;
  Fixture f(TransportMode::kAuto, true, /*always=*/true, &budget);
  tunnel_keys(f.settings).resume_timeout_ms = 10000;
  f.tunnel.rdma_probe_interval_ms = 2000;
  f.link =
      std::make_unique<PeerLink>(f.loop, f.pool, f.peer, f.settings, f.tunnel, Connectors{&f.tcp, &f.rdma}, &budget);
  f.link->start();
  CHECK(f.rdma.calls.empty());
  FakeTransport* wire = f.dialed(f.tcp);
  REQUIRE(wire->inject_all(resumable_hello()));
  f.loop.end_batch();
  REQUIRE(f.link->up());
  f.link->tick(f.t0 + 2s);
  CHECK(f.rdma.calls.empty());  // no room: no move to RDMA either
  wire->fail("connection reset by peer");
  f.loop.end_batch();
  CHECK(f.rdma.calls.empty());  // the resume stays on TCP
  CHECK(f.tcp.calls.size() == 2);
  FakeTransport* again = f.dialed(f.tcp);
  REQUIRE(again->inject_all(resumable_hello()));
  f.loop.end_batch();
  // Room again: the next probe moves it.
  budget.rdma = SessionBudget::RdmaRoom::kYes;
  f.link->tick(f.t0 + 10s);
  CHECK(f.rdma.calls.size() == 1);
}

TEST_CASE("peer link: past rdma.max_pinned, transport rdma waits while an idle session makes room, else refuses") {
  FakeBudget budget;
  budget.rdma = SessionBudget::RdmaRoom::kSoon;
  Fixture f(TransportMode::kRdma, true, /*always=*/false, &budget);
  WaitingStream s(true);
  f.link->submit(&s);
  CHECK(f.rdma.calls.empty());
  CHECK(f.tcp.calls.empty());  // rdma never falls back
  CHECK(s.aborts == 0);        // it waits for the room being made
  // The evicted session has closed: the retry dials RDMA.
  budget.rdma = SessionBudget::RdmaRoom::kYes;
  f.link->tick(f.t0 + 500ms);
  REQUIRE(f.rdma.calls.size() == 1);
  f.peer_hello(f.dialed(f.rdma));
  CHECK(s.opened);
  s.attached_to->detach(s);

  FakeBudget full;
  full.rdma = SessionBudget::RdmaRoom::kNo;  // every RDMA session carries streams
  Fixture g(TransportMode::kRdma, true, /*always=*/false, &full);
  WaitingStream r;
  g.link->submit(&r);
  CHECK(g.rdma.calls.empty());
  CHECK(r.aborts == 1);
  CHECK(r.abort_code == ResetCode::kResource);
  CHECK(r.abort_reason.find("max_pinned") != std::string::npos);
  CHECK(g.info().last_error.find("max_pinned") != std::string::npos);
}

TEST_CASE("peer link: on demand, a session that ends with nothing waiting is not redialled") {
  Fixture f(TransportMode::kTcp, true, /*always=*/false);
  WaitingStream s;
  f.link->submit(&s);
  FakeTransport* t = f.dialed(f.tcp);
  f.peer_hello(t);
  t->fail("connection reset by peer");  // not resumable: the session ends
  f.loop.end_batch();
  CHECK_FALSE(f.link->up());
  f.link->tick(f.t0 + 10s);
  CHECK(f.tcp.calls.size() == 1);
  CHECK(f.info().last_close.find("transport-failed") != std::string::npos);
}

// --- tunnel.rdma_share --------------------------------------------------------------

TEST_CASE("peer link: rdma_share 0 puts an auto session on TCP, says why, and never tries RDMA for it") {
  Fixture f(TransportMode::kAuto);
  f.tunnel.rdma_share = 0;
  f.tunnel.rdma_probe_interval_ms = 100;
  tunnel_keys(f.settings).resume_timeout_ms = 10000;
  f.link = std::make_unique<PeerLink>(f.loop, f.pool, f.peer, f.settings, f.tunnel, Connectors{&f.tcp, &f.rdma});
  CHECK_FALSE(f.link->in_rdma_share());
  f.link->start();
  CHECK(f.rdma.calls.empty());
  REQUIRE(f.tcp.calls.size() == 1);
  FakeTransport* t = f.dialed(f.tcp);
  REQUIRE(t->inject_all(resumable_hello()));
  f.loop.end_batch();
  REQUIRE(f.link->up());
  CHECK(f.info().transport == "tcp");
  CHECK(f.info().transport_reason.find("tunnel.rdma_share is 0%") != std::string::npos);
  for (int i = 1; i <= 20; ++i) f.link->tick(f.t0 + i * 200ms);
  CHECK(f.rdma.calls.empty());  // no probe: this peer is not in the share
  // A reload raises the share to 100: the session moves to RDMA at the next probe.
  f.link->set_rdma_share(100);
  CHECK(f.link->in_rdma_share());
  f.link->tick(f.t0 + 10s);
  CHECK(f.rdma.calls.size() == 1);
}

TEST_CASE("peer link: rdma_share picks the same peers on every link, and more of them as it grows") {
  PeerConfig peer;
  SessionSettings settings;
  settings.node = "a";
  TunnelConfig tunnel;
  BufferPool pool{kBufferHeadroom + 16384, 16};
  EventLoop loop;
  FakeConnector tcp{TransportKind::kTcp};
  int chosen_at_30 = 0, chosen_at_60 = 0, kept = 0;
  for (int i = 0; i < 200; ++i) {
    peer.address = "10.0." + std::to_string(i / 100) + "." + std::to_string(i % 100);
    peer.name = peer.address;
    tunnel.rdma_share = 30;
    PeerLink one(loop, pool, peer, settings, tunnel, Connectors{&tcp, nullptr});
    PeerLink again(loop, pool, peer, settings, tunnel, Connectors{&tcp, nullptr});
    CHECK(one.in_rdma_share() == again.in_rdma_share());
    bool at_30 = one.in_rdma_share();
    one.set_rdma_share(60);
    chosen_at_30 += at_30;
    chosen_at_60 += one.in_rdma_share();
    kept += at_30 && one.in_rdma_share();
  }
  CHECK(kept == chosen_at_30);  // raising the share only adds peers
  CHECK(chosen_at_30 > 30);     // about 60 of 200
  CHECK(chosen_at_30 < 90);
  CHECK(chosen_at_60 > chosen_at_30);
}

// --- auto: RDMA's head start (tunnel.rdma_head_start_ms, Happy Eyeballs) ---------

TEST_CASE("peer link: in auto, an RDMA connect not done within rdma_head_start_ms gets TCP beside it; TCP first wins") {
  Fixture f(TransportMode::kAuto);
  WaitingStream s;
  f.link->submit(&s);
  f.link->start();
  REQUIRE(f.rdma.calls.size() == 1);
  f.link->tick(f.t0 + std::chrono::milliseconds(400));
  CHECK(f.tcp.calls.empty());  // RDMA's head start (half of connect_timeout_ms: 500 ms) is not over
  f.link->tick(f.t0 + std::chrono::milliseconds(501));
  REQUIRE(f.tcp.calls.size() == 1);  // TCP beside the RDMA dial, which goes on
  CHECK(f.rdma.live_dials == 1);
  f.bring_up(f.tcp);
  CHECK(f.rdma.live_dials == 0);  // the hanging RDMA connect is cancelled
  CHECK(s.attaches == 1);         // the waiting stream went over TCP
  CHECK(s.aborts == 0);
  PeerInfo info = f.info();
  CHECK(info.transport == "tcp");
  CHECK(info.transport_reason.find("did not complete within tunnel.rdma_head_start_ms (500 ms)") != std::string::npos);
}

TEST_CASE("peer link: in auto, RDMA connecting after its head start but before TCP wins; TCP's dial is cancelled") {
  Fixture f(TransportMode::kAuto);
  f.link->start();
  f.link->tick(f.t0 + std::chrono::milliseconds(501));
  REQUIRE(f.tcp.calls.size() == 1);
  f.bring_up(f.rdma);
  CHECK(f.tcp.live_dials == 0);
  CHECK(f.info().transport == "rdma");
  // A later tick starts nothing beside the session.
  f.link->tick(f.t0 + std::chrono::milliseconds(3000));
  CHECK(f.tcp.calls.size() == 1);
}

TEST_CASE("peer link: in auto, TCP refused beside a hanging RDMA dial diverts the streams that can go directly") {
  Fixture f(TransportMode::kAuto);
  WaitingStream service, plain;
  service.divertible = true;
  f.link->submit(&service);
  f.link->submit(&plain);
  f.link->tick(f.t0 + std::chrono::milliseconds(501));
  REQUIRE(f.tcp.calls.size() == 1);
  f.tcp.fail("connect tcp:10.0.0.9:7471: Connection refused", /*refused=*/true);
  CHECK(service.diverts == 1);  // at once, not when the RDMA dial gives up
  CHECK(plain.diverts == 0);
  CHECK(f.info().waiting_streams == 1);
  CHECK(f.link->refused_at());
  CHECK(f.rdma.live_dials == 1);  // the RDMA dial goes on
}

TEST_CASE("peer link: in auto, an RDMA failure while TCP is dialled beside it waits for that TCP dial") {
  Fixture f(TransportMode::kAuto);
  f.link->start();
  f.link->tick(f.t0 + std::chrono::milliseconds(501));
  REQUIRE(f.tcp.calls.size() == 1);
  f.rdma.fail("RDMA_CM_EVENT_UNREACHABLE");
  CHECK(f.tcp.calls.size() == 1);  // no second TCP dial
  CHECK(f.tcp.live_dials == 1);
  f.bring_up(f.tcp);
  CHECK(f.info().transport == "tcp");
}
